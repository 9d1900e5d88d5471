"""Sections of the benchmarks page for whole shows on air: a reply's latency, live and recorded
chats, the show carrying itself, glass to glass, many shows at once, hours on air and a standby
taking over."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from bench.plots import lines_svg, ranges_svg
from bench.report_page import Page, Result, ms, num, pct, section


def nearest_rank(values: Sequence[float], q: float) -> float | None:
    ordered = sorted(values)
    return float(ordered[max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))]) if ordered else None


@section("Interaction latency",
         "`python -m bench.latency [--count N] [--interval S] [--llm NAME] [--tts NAME] [--split \"\"]`: "
         "danmaku one at a time, one-sentence replies, 720p. **Latency** is from the danmaku's "
         "publication to the publication of the first frame that shows a non-silent viseme of its "
         "reply, over the danmaku that found the stage idle (a reply that waited for the floor is "
         "counted under *all*). Targets: p99 ≤ 87 ms with the scripted writer; with llama.cpp "
         "p50 ≤ 600 ms, p99 ≤ 1.5 s and first audio p50 ≤ 500 ms.")
def latency(page: Page, results: Sequence[Result]) -> None:
    rows, ranges = [], []
    for r in results:
        d = r.doc
        where = "one process" if len(d["processes"]) == 1 else "sink, recorder apart"
        verdict = "—"
        if d["llm"] == "scripted":
            verdict = page.target(f"latency p99, scripted, {where} (`{r.name}`)", "≤ 87 ms", ms(d["p99_ms"]),
                                  d["p99_ms"] <= 87)
        elif d["llm"] == "llama_cpp":
            met = d["p50_ms"] <= 600 and d["p99_ms"] <= 1500 and d["first_audio_p50_ms"] <= 500
            verdict = page.target(f"latency, llama_cpp + {d['tts']} (`{r.name}`)", "p50 ≤ 600 ms, p99 ≤ 1.5 s",
                                  f"p50 {ms(d['p50_ms'])}, p99 {ms(d['p99_ms'])}", met)
        hops = " / ".join(num(d["hop_median_ms"].get(h), 1) for h in ("cue.issued", "utterance.chunk", "audio.chunk",
                                                                        "viseme.track"))
        rows.append((f"`{r.name}`", f"{d['llm']} + {d['tts']}", where, f"{d['idle']}/{d['answered']}",
                     ms(d["p50_ms"]), ms(d["p99_ms"]), ms(d["all_p99_ms"]),
                     f"{ms(d['first_audio_p50_ms'])} / {ms(d['first_audio_p99_ms'])}", hops, verdict))
        ranges.append((r.name.removesuffix(".json"), d["p50_ms"], d["p99_ms"]))
    page.table(("file", "writer + voice", "processes", "idle/answered", "p50", "p99", "p99 of all",
                "first audio p50 / p99", "median ms to cue / sentence / audio / visemes", "target"), rows)
    page.plot("latency", "p50 to p99 of each latency run", ranges_svg(
        "Danmaku to first speaking frame: p50 (dot) to p99 (tick)", "ms, log scale", ranges))


@section("A live chat",
         "`python -m bench.chat --rates R,... --duration S [--llm NAME] [--tts NAME]`: a generated chat "
         "(Zipf-like viewers, 15% @mentions, 3% gifts, 1% moderator lines, 3% hostile, a third Chinese, "
         "bursts of one comment) into the demo show, every actor in one process. Latency as above, over "
         "the answered comments; shares are of the valid comments. Targets: answered speech within 8 s "
         "p99; every gift and moderator line within 3 s p99; floor gaps p50 ≤ 300 ms; nothing after the "
         "end; one outcome per danmaku; speaking ≥ 90% (scripted), ≥ 70% from 1 comment/s (a model).")
def chat(page: Page, results: Sequence[Result]) -> None:
    rows = []
    for r in results:
        d, misses_all = r.doc, []
        for x in d["rates"]:
            lat, misses = x["latency"], []
            gaps = x.get("floor_gap_ms") or {}
            checks = {
                "speech p99": lat["all"]["p99_ms"] is not None and lat["all"]["p99_ms"] <= 8000,
                "gifts": _urgent_met(lat.get("gift")), "moderator": _urgent_met(lat.get("moderator")),
                "floor gaps": not gaps or gaps.get("p50", 0) <= 300,
                "after the end": x["placed_after_end"] == 0,
                "one outcome": x["outcomes"]["none"] == 0 and x["outcomes"]["twice"] == 0,
                "speaking": x["speaking_share"] >= (0.9 if d["llm"] == "scripted" else 0.7 if x["rate"] >= 1 else 0),
            }
            misses = [k for k, ok in checks.items() if not ok]
            misses_all += [f"{k} at {x['rate']:g}/s" for k in misses]
            rows.append((f"`{r.name}`", f"{d['llm']} + {d['tts']}", f"{x['rate']:g}/s", x["danmaku"],
                         f"{lat['all']['answered']}/{lat['all']['valid']} ({pct(lat['all']['share'])})",
                         f"{ms(lat['all']['p50_ms'])} / {ms(lat['all']['p99_ms'])}", _urgent(lat.get("addressed")),
                         _urgent(lat.get("gift")), _urgent(lat.get("moderator")), pct(x["speaking_share"]),
                         " / ".join(f"{gaps[k]:g}" for k in ("p50", "p95", "p90", "max") if k in gaps) or "—",
                         x["placed_after_end"], f"{x['outcomes']['none']} / {x['outcomes']['twice']}",
                         ", ".join(misses) or "none"))
        page.target(f"bench.chat, {d['llm']} + {d['tts']} (`{r.name}`)", "the live-chat targets",
                    "; ".join(misses_all) or "all met", not misses_all)
    page.table(("file", "writer + voice", "rate", "danmaku", "answered", "p50 / p99", "addressed: answered, p99",
                "gifts: answered, p99", "moderator: answered, p99", "speaking", "floor gaps ms", "after the end",
                "no / two outcomes", "targets missed"), rows)


def _urgent(lat: dict[str, Any] | None) -> str:
    return "—" if not lat or not lat["valid"] else f"{lat['answered']}/{lat['valid']}, {ms(lat['p99_ms'])}"


def _urgent_met(lat: dict[str, Any] | None) -> bool:
    return not lat or not lat["valid"] or (lat["answered"] == lat["valid"] and (lat["p99_ms"] or 0) <= 3000)


@section("A recorded chat",
         "`python -m bench.recorded FILE [--address SHARE] [--llm NAME] [--tts NAME]`: a real Bilibili "
         "danmaku file (`1660054944.xml` of the MIT-licensed biliass corpus: 605 danmaku in 120 s, mostly "
         "Chinese) played by plain nats-py into a `troupe up` of the demo, at its pace; `--address` puts "
         "`@Mika`, `@小鹿` or `@Rex` before that share of the comments. Latency from the sender's clock to the "
         "first frame showing the reply. Targets: answered speech within 8 s p99; 80% of the addressed "
         "comments spoken.")
def recorded(page: Page, results: Sequence[Result]) -> None:
    rows = []
    for r in results:
        d = r.doc
        spoken = "—"
        if d.get("addressed"):
            share = d["addressed_spoken_share"]
            spoken = (f"{d['addressed_spoken']}/{d['addressed']} ({pct(share)}) "
                      + page.target(f"addressed comments spoken (`{r.name}`)", "≥ 80%", pct(share), share >= 0.8))
        p99 = page.target(f"recorded chat p99, {d['llm']} + {d['tts']} (`{r.name}`)", "≤ 8 s", ms(d["p99_ms"]),
                          d["p99_ms"] <= 8000)
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(d["outcomes"].items(), key=lambda kv: -kv[1]))
        rows.append((f"`{r.name}`", f"{d['llm']} + {d['tts']}", f"{d['seconds']:g} s of {d['file']}", d["sent"],
                     outcomes, f"{ms(d['p50_ms'])} / {ms(d['p99_ms'])} ({p99})", pct(d["speaking_share"]), spoken))
    page.table(("file", "writer + voice", "played", "sent", "outcomes", "answered p50 / p99", "speaking",
                "addressed spoken"), rows)


@section("The show carrying itself",
         "`python -m bench.show [--cases quiet,chat-0.25,chat-1,operator] [--duration S] [--llm NAME]`: the "
         "demo's roles and rundown, each case a show of its own with every actor in one process, then "
         "`troupe replay --verify`. Targets, for the scripted writer with no comments: speaking ≥ 75% of "
         "the time, the longest silence ≤ 2 s; for every case: 0 divergences.")
def show(page: Page, results: Sequence[Result]) -> None:
    rows = []
    for r in results:
        for c in r.doc["cases"]:
            air, verify = c["airtime"], c["verify"]
            label = f"{c['case']}, {c['llm']}, {c['duration_s']:g} s"
            if c["llm"] == "scripted" and c["case"] == "quiet":
                page.target(f"speaking share, {label} (`{r.name}`)", "≥ 75%", pct(air["speaking_share"]),
                            air["speaking_share"] >= 0.75)
                page.target(f"longest silence, {label} (`{r.name}`)", "≤ 2 s", ms(air["longest_silence_ms"]),
                            air["longest_silence_ms"] <= 2000)
            page.target(f"re-execution, {label} (`{r.name}`)", "0 divergences", str(verify["divergences"]),
                        verify["divergences"] == 0)
            own = air["own_lines"]
            waits = air.get("waits_behind_own_ms") or []
            total = sum(air["seconds_by_role"].values()) or 1.0
            rows.append((f"`{r.name}`", label, pct(air["speaking_share"]), ms(air["longest_silence_ms"]),
                         ", ".join(f"{k} {v:g} s ({v / total:.0%})" for k, v in air["seconds_by_role"].items()),
                         ", ".join(f"{k} {v}" for k, v in (own.get("by_source") or own["by_kind"]).items()),
                         own["repeated"], f"{len(own['verbatim_said'])}/{own['verbatim_asked']}",
                         own["most_turns_between_roles"],
                         f"{ms(nearest_rank(waits, 50))} / {ms(nearest_rank(waits, 99))}" if waits else "—",
                         verify["divergences"]))
    page.table(("file", "case", "speaking", "longest silence", "seconds by role", "the show's own lines",
                "repeated", "verbatim said", "most turns between roles", "wait behind its own p50 / p99",
                "`--verify` divergences"), rows)


@section("Glass to glass",
         "`python -m bench.glass`: chromium (Playwright) on the preview page types danmaku into its input box "
         "and times each from clicking Send to the browser presenting the first frame of its reply; the same "
         "danmaku's server-side figure is from the store (stored → frame published).")
def glass(page: Page, results: Sequence[Result]) -> None:
    for r in results:
        d = r.doc
        page.table(("measured where", "p50", "p99"), (
            ("server: danmaku stored → frame published", ms(d["server_p50_ms"]), ms(d["server_p99_ms"])),
            ("page: Send clicked → frame on screen", ms(d["page_p50_ms"]), ms(d["page_p99_ms"])),
            ("page minus server, per danmaku", ms(d["page_minus_server_p50_ms"]), ms(d["page_minus_server_p99_ms"]))))
        page.add(f"{d['measured']} of {d['sent']} danmaku timed, one every {d['interval_s']:g} s, {d['resolution']}.", "")
        series = [(label, [(v, (i + 1) / len(d["samples"]) * 100) for i, v in
                           enumerate(sorted(s[key] for s in d["samples"]))])
                  for label, key in (("page", "page_ms"), ("server", "server_ms"))]
        page.plot(r.name.removesuffix(".json"), "share of danmaku by latency, page and server",
                  lines_svg("Glass to glass: share of danmaku seen within", "ms", "% of danmaku", series))


@section("Many shows at once",
         "`python -m bench.scale [--resolutions R,...] [--modes one,split] [--shows 1,2,3,4,6,8] [--seconds S]`: "
         "`k` shows started together on one embedded nats-server and one SQLite store, the workers shared "
         "(`one`: every actor in one process, as `troupe up`; `split`: each kind in a `troupe actor` process, "
         "as compose runs them), each with the demo's roles and 0.5 comments a second. A count holds when every "
         "show drew every frame with frame lateness p99 within the 40 ms budget and every cue was answered. "
         "Targets: 6 shows at 480p, 4 at 720p.")
def scale(page: Page, results: Sequence[Result]) -> None:
    for r in results:
        d = r.doc
        page.add(f"### `{r.name}`", "", f"{d['seconds']:g} s shows; the counts tried: "
                 + ", ".join(str(k) for k in d["ladder"]) + " (0 held: the first count tried did not hold).", "")
        held = d["held"]
        for res, goal in (("480p", 6), ("720p", 4)):
            if res in held:
                best = max(held[res].values())
                page.target(f"shows held at {res} (`{r.name}`)", f"{goal}", str(best), best >= goal)
        page.table(("resolution", *sorted({m for modes in held.values() for m in modes})),
                   ((res, *(modes.get(m, "—") for m in sorted({m for ms_ in held.values() for m in ms_})))
                    for res, modes in held.items()))
        page.table(("resolution", "mode", "shows", "held", "lateness p99 (worst show)", "frames (fewest)",
                    "cues answered", "CPU s per show-second", "cores busy", "resident MB"),
                   ((t["resolution"], t["mode"], t["shows"], "yes" if t["held"] else "no", ms(t["worst_late_p99_ms"]),
                     min(t["frames"], key=lambda f: int(f.split("/")[0])), f"{t['answered']}/{t['cues']}",
                     num(t.get("cpu_s_per_show_s")), pct(t.get("cpu_busy")), num(t.get("rss_mb"), 0))
                    for t in d["trials"]))
        path = d.get("frame_path_ms", {})
        if path:
            page.add("A frame's path, ms per frame and step (median of 3 over 100 frames):", "")
            page.table(("resolution", "draw", "JPEG encode (render)", "JPEG decode (sink)", "H.264 encode (sink)",
                        "the JPEG steps' share"),
                       ((res, *(num(p[k]) for k in ("draw", "jpeg_encode", "jpeg_decode", "h264_encode")),
                         pct((p["jpeg_encode"] + p["jpeg_decode"]) / sum(p.values()))) for res, p in path.items()))
        curves: dict[str, list[tuple[float, float]]] = {}
        for t in d["trials"]:
            curves.setdefault(f"{t['resolution']} {t['mode']}", []).append((t["shows"], t["worst_late_p99_ms"]))
        page.plot(r.name.removesuffix(".json"), "frame lateness p99 by number of shows",
                  lines_svg("Frame lateness p99 of the worst show, by shows at once", "shows at once", "ms (log)",
                            sorted(curves.items()), log_y=True, limit=(40.0, "budget 40 ms")))


@section("Hours on air",
         "`python -m bench.soak --minutes N [--rate 5] [--producers 4] [--resolution 720p]`: every actor in one "
         "process on its own embedded nats-server, four nats-py producers sending `bench.chat`'s generated chat, "
         "the self-driven stage on. Targets: resident memory within 10% of its size after warm-up; frame "
         "lateness p99 ≤ 40 ms in every minute; every danmaku one outcome; every cue an end.")
def soak(page: Page, results: Sequence[Result]) -> None:
    rows = []
    for r in results:
        d = r.doc
        mem, late, dm = d["memory"], d["lateness_p99_ms_by_minute"], d["danmaku"]
        worst = max(late.values())
        page.target(f"memory growth, {d['minutes']:g} min (`{r.name}`)", "≤ 10%", pct(mem["growth"]), mem["growth"] <= 0.1)
        page.target(f"frame lateness p99 per minute, {d['minutes']:g} min (`{r.name}`)", "≤ 40 ms", ms(worst),
                    worst <= d["lateness_budget_ms"])
        rows.append((f"`{r.name}`", f"{d['minutes']:g} min, {d['resolution']}, {d['rate']:g}/s",
                     f"{mem['warm_mb']:g} / {mem['end_mb']:g} / {mem['peak_after_warm_mb']:g} MB ({pct(mem['growth'])})",
                     f"{ms(min(late.values()))} – {ms(worst)}", f"{d['frames']['drawn']}/{d['frames']['expected']}",
                     f"{d['sent']} / {dm['received']} (answered {dm['answered']}, merged {dm['merged']}, let go "
                     f"{dm['skipped']}, rejected {dm['rejected']}; none {dm['none']}, twice {dm['twice']})",
                     f"{d['cues']} / {d['cues_without_an_end']}", f"{d['store_mb_per_hour']:g} MB",
                     f"{d['jetstream_end_mb']:g} MB"))
        series = [(label, [(s["t_s"] / 60, s[key] / 1e6) for s in d["samples"]])
                  for label, key in (("resident memory", "rss"), ("JetStream on disk", "jetstream"))]
        page.plot(r.name.removesuffix(".json"), f"memory and JetStream over {d['minutes']:g} minutes",
                  lines_svg(f"{d['minutes']:g} minutes on air: memory and JetStream", "minutes", "MB", series))
    page.table(("file", "show", "memory after warm-up / end / peak", "lateness p99 per minute", "frames",
                "comments sent / received", "cues / without an end", "store per hour", "JetStream at the end"), rows)


@section("A standby taking over",
         "`python -m bench.standby [--kinds director,lipsync,render,sink] [--seconds 20] [--rate 2]`: the "
         "process running each kind killed (`kill -9`) half-way through a show, a second one standing by. "
         "Targets: the standby running within 2 s (director, lipsync) and the renderer's frames late by at "
         "most 1 s; no frame lost, nothing stored twice, one outcome per danmaku.")
def standby(page: Page, results: Sequence[Result]) -> None:
    rows = []
    for r in results:
        for k in r.doc["results"]:
            goal = 1.0 if k["kind"] == "render" else 2.0
            value = k["latest_frame_ms"] / 1000 if k["kind"] == "render" else k["took_s"]
            verdict = page.target(f"takeover of {k['kind']} (`{r.name}`)", f"≤ {goal:g} s", f"{value:g} s", value <= goal)
            rows.append((k["kind"], f"{k['took_s']:g} s", f"{k['next_output_s']:g} s", f"{k['frames']}/{k['expected_frames']}",
                         ms(k["latest_frame_ms"]), k["stored_twice"], f"{k['no_outcome']} / {k['two_outcomes']}",
                         k["rebuilt"].split(": ", 2)[-1], verdict))
    page.table(("killed", "standby running after", "its next output after", "frames", "latest frame",
                "stored twice", "danmaku without / with two outcomes", "rebuilt", "target"), rows)


@section("Shows spread over processes",
         "`python -m bench.spread [--shows 6] [--seconds 40] [--resolution 360p]`: with `TROUPE_SPREAD=on`, "
         "two processes each of the director, lipsync, render and sink, one each of llm, tts, qos and the "
         "recorder, and six shows on air at once; one render process killed (`kill -9`) a third of the way "
         "in, then a third render process joins and one more show starts. Targets: every process holds 2 to "
         "4 of the 6 runs; the killed process's runs have frames again within 1 s and miss at most 25 frames; "
         "the other runs miss none; the process that joined holds the new run.")
def spread(page: Page, results: Sequence[Result]) -> None:
    for r in results:
        d = r.doc
        held = [n for per_kind in d["runs_held"].values() for n in per_kind.values()]
        page.target(f"runs held per process (`{r.name}`)", "2 to 4", f"{min(held)} to {max(held)}",
                    all(2 <= n <= 4 for n in held) and len(held) == 2 * len(d["runs_held"]))
        killed = [x for x in d["per_run"].values() if x["held_by_killed"]]
        others = [x for x in d["per_run"].values() if not x["held_by_killed"]]
        resumed = [x["resumed_after_s"] for x in killed if x["resumed_after_s"] is not None]
        worst = max(resumed) if resumed else None
        page.target(f"frames again after a render process was killed (`{r.name}`)", "≤ 1 s",
                    "no frame after" if worst is None else f"{worst:g} s",
                    worst is not None and len(resumed) == len(killed) and worst <= 1.0)
        page.target(f"frames missing, the killed process's runs (`{r.name}`)", "≤ 25 each",
                    str(max((x["missing"] for x in killed), default=0)), all(x["missing"] <= 25 for x in killed))
        page.target(f"frames missing, the other runs (`{r.name}`)", "0",
                    str(sum(x["missing"] for x in others)), all(x["missing"] == 0 for x in others))
        page.target(f"the new run goes to the process that joined (`{r.name}`)", "render-3", str(d["joined"]),
                    d["joined"] == "render-3")
        page.add(f"{d['shows']} shows of {d['seconds']:g} s at {d['resolution']}, run keys with a "
                 f"{d['lease_ttl_s']:g} s lease time, placed in {d['placed_s']:g} s; killed: {d['killed']} "
                 f"({len(d['killed_runs'])} runs).", "")
        page.table(("kind", "runs held per process"),
                   ((kind, ", ".join(f"{w}: {n}" for w, n in sorted(per.items()))) for kind, per in d["runs_held"].items()))
        page.table(("run", "held by the killed process", "frames again after", "frames missing"),
                   ((run, "yes" if x["held_by_killed"] else "", "" if x["resumed_after_s"] is None else
                     f"{x['resumed_after_s']:g} s", f"{x['missing']}/{x['expected']}") for run, x in d["per_run"].items()))


@section("Twenty takeovers, then a verify",
         "`python -m bench.takeovers [--takeovers 20] [--seconds 150] [--rate 1]`, run with the cores kept busy "
         "(`../shared/tools/busy`): the director, lipsync, render and the sink each in a process of their own "
         "with a standby; the process running a kind killed (`kill -9`) again and again, the kinds in turn, a "
         "fresh standby started after each; then the run re-executed (`troupe replay --verify`). Target: 0 "
         "divergences after 20 takeovers; nothing stored twice, one outcome per danmaku.")
def takeovers(page: Page, results: Sequence[Result]) -> None:
    for r in results:
        d = r.doc
        divergences = 0 if d["divergence"] is None else 1
        page.target(f"divergences after {d['takeovers']} takeovers (`{r.name}`)", "0", str(divergences),
                    divergences == 0 and d["takeovers"] >= 20)
        page.target(f"stored twice, danmaku without / with two outcomes (`{r.name}`)", "0, 0 / 0",
                    f"{d['stored_twice']}, {d['no_outcome']} / {d['two_outcomes']}",
                    d["stored_twice"] == 0 and d["no_outcome"] == 0 and d["two_outcomes"] == 0)
        page.table(("takeovers (director / lipsync / render / sink)", "standby running after (median, max)",
                    "frames", "re-executed (checked)", "verify took", "load average at the end"),
                   [(f"{d['takeovers']} ({' / '.join(str(n) for n in d['per_kind'].values())})",
                     f"{d['took_s_median']:g} s, {d['took_s_max']:g} s", f"{d['frames']}/{d['expected_frames']}",
                     ", ".join(f"{k} {v}" for k, v in d["checked"].items()), f"{d['verify_s']:g} s", f"{d['load']:g}")])
        if d["divergence"] is not None:
            x = d["divergence"]
            page.add(f"First divergence: {x['actor']} {x['what']} {x['type']} `{x['id']}`.", "")
