"""Sections of the benchmarks page for the parts measured alone: the actor runtime, the event
store, the scheduler, rendering, the model backends, what the writers write, the platform bridges
and the GPU check."""

from __future__ import annotations

from collections.abc import Sequence

from bench.plots import bars_svg
from bench.report_page import Page, Result, ms, num, pct, section


@section("Runtime overhead",
         "`python -m bench.runtime --repeats 7 --messages 6000`: a chain of pass-through hops on `ActorRuntime` "
         "against the same chain written directly on nats-py (durable pull consumers, `fetch` of up to 64, "
         "ack after the publish is confirmed), alternating repeats, medians. Targets: throughput ≥ 0.85 of raw "
         "nats-py; added latency per hop p99 ≤ 1 ms.")
def runtime(page: Page, results: Sequence[Result]) -> None:
    for r in results:
        d = r.doc
        page.table(("variant", "msgs/s", "client CPU per message", "end-to-end p50", "end-to-end p99"),
                   ((name, num(d[key]["tput"], 0), f"{d[key]['cpu_us']:.0f} µs", f"{d[key]['p50']:.2f} ms",
                     f"{d[key]['p99']:.2f} ms") for name, key in (("raw nats-py", "raw"), ("Troupe runtime", "troupe"))))
        page.table(("ratio of the medians", "median of the pairs' ratios", "CPU raw / Troupe",
                    "added per hop p50", "added per hop p99"),
                   [(f"{num(d['ratio'])} " + page.target(f"runtime throughput ratio (`{r.name}`)", "≥ 0.85",
                                                          num(d["ratio"]), d["ratio"] >= 0.85),
                     num(d["pair_ratio"]), num(d["cpu_ratio"]), f"{d['added_p50_ms']:.2f} ms",
                     f"{d['added_p99_ms']:.2f} ms " + page.target(f"added latency per hop p99 (`{r.name}`)", "≤ 1 ms",
                                                                 f"{d['added_p99_ms']:.2f} ms", d["added_p99_ms"] <= 1))])
        page.add(f"{d['hops']} hops, {d['messages']} messages for throughput, {d['latency_messages']} for latency, "
                 f"{d['repeats']} repeats.", "")


@section("Event store",
         "`python -m bench.store`: the recorder's ingest against a plain `insert` of the same rows, playback "
         "(`troupe replay --max`) against a raw `publish_async` loop, and re-execution (`--verify`) of a "
         "recorded 60 s 720p show; medians of alternating repeats. Targets: ratios ≥ 0.8; re-execution ≥ 20× "
         "real time.")
def store(page: Page, results: Sequence[Result]) -> None:
    for r in results:
        d = r.doc
        sq, pg, pb, rx = d["sqlite"], d["postgres"], d["playback"], d["reexec"]
        rows = [(f"recorder ingest into SQLite, {d['events']:,} events (mean {d['mean_event_bytes']:,} B), batches of "
                 f"{d['batch']}", f"{sq['troupe_eps']:,.0f} ev/s", f"{sq['plain_eps']:,.0f} ev/s",
                 f"{num(sq['ratio'])} " + page.target(f"SQLite ingest ratio (`{r.name}`)", "≥ 0.8", num(sq["ratio"]),
                                                      sq["ratio"] >= 0.8)),
                ("the same into PostgreSQL", f"{pg['troupe_eps']:,.0f} ev/s", f"{pg['plain_eps']:,.0f} ev/s",
                 f"{num(pg['ratio'])} " + page.target(f"PostgreSQL ingest ratio (`{r.name}`)", "≥ 0.8", num(pg["ratio"]),
                                                      pg["ratio"] >= 0.8)),
                (f"playback of a recorded {d['show_s']:g} s show at `--max` ({pb['messages']:,} messages)",
                 f"{pb['troupe_eps']:,.0f} ev/s", f"{pb['raw_eps']:,.0f} ev/s",
                 f"{num(pb['ratio'])} " + page.target(f"playback ratio (`{r.name}`)", "≥ 0.8", num(pb["ratio"]),
                                                      pb["ratio"] >= 0.8)),
                ("re-execution of that show (" + ", ".join(f"{k} {v:,}" for k, v in rx["checked"].items())
                 + f" events; {rx['divergences']} divergences)", f"{rx['seconds']:g} s", f"{d['show_s']:g} s of show",
                 f"{rx['x_realtime']:g}× real time " + page.target(f"re-execution speed (`{r.name}`)", "≥ 20×",
                                                                   f"{rx['x_realtime']:g}×", rx["x_realtime"] >= 20))]
        page.table(("measure", "Troupe", "baseline", "ratio"), rows)
        lag = d["recorder_lag_ms"]
        page.add(f"The recorder's lag while that show ran (age of the newest event at commit, {lag['samples']} "
                 f"samples): p50 {lag['p50']:.0f} ms, p99 {lag['p99']:.0f} ms, max {lag['max']:.0f} ms.", "")


@section("Scheduling: role priority and batching",
         "`python -m bench.scheduler [--engine simulated|vllm]`: 200 requests over 8 roles of weights 4 to 0.5, "
         "published at once as cues; one worker, one role per batch of at most 8; only the order differs "
         "between `TROUPE_SCHEDULER=fifo` and Troupe's. Targets: the top role's P95 ≤ 25% of FIFO's; no role's "
         "P95 worse than 3× FIFO's; throughput not below FIFO's.")
def scheduler(page: Page, results: Sequence[Result]) -> None:
    for r in results:
        d = r.doc
        engine = d.get("engine", f"simulated ({d['fixed_ms']:g} ms + {d['per_token_ms']:g} ms a token a batch)")
        page.add(f"### `{r.name}`: {engine}", "")
        page.table(("scheduler", "mean", "P95", "throughput", "busy", "batches"),
                   ((name, ms(d[k]["mean_ms"]), ms(d[k]["p95_ms"]), f"{d[k]['throughput']:.1f} req/s", pct(d[k]["busy"]),
                     f"{d[k]['batches']:g}") for name, k in (("FIFO", "fifo"), ("Troupe", "troupe"))))
        roles = list(d["roles"])
        page.table(("role (weight)", *(f"{k} ({d['roles'][k]:g})" for k in roles)),
                   ((f"{name} P95", *(ms(d[k]["per_role"][x]["p95_ms"]) for x in roles))
                    for name, k in (("FIFO", "fifo"), ("Troupe", "troupe"))))
        c = d["checks"]
        page.add(f"Top role's P95 {num(c['top_role_p95_vs_fifo'])}× FIFO's ("
                 + page.target(f"top role P95 vs FIFO (`{r.name}`)", "≤ 0.25×", num(c["top_role_p95_vs_fifo"]),
                               c["top_role_p95_vs_fifo"] <= 0.25)
                 + f"), the worst role {num(c['worst_role_p95_vs_fifo'])}× ("
                 + page.target(f"worst role P95 vs FIFO (`{r.name}`)", "≤ 3×", num(c["worst_role_p95_vs_fifo"]),
                               c["worst_role_p95_vs_fifo"] <= 3)
                 + f"), throughput {num(c['throughput_vs_fifo'])}× ("
                 + page.target(f"throughput vs FIFO (`{r.name}`)", "≥ 1×", num(c["throughput_vs_fifo"]),
                               c["throughput_vs_fifo"] >= 1) + ").", "")
        page.plot(r.name.removesuffix(".json"), "P95 wait per role, FIFO and Troupe",
                  bars_svg(f"P95 wait per role ({engine.split(' ')[0]})", "ms", roles,
                           [(name, [d[k]["per_role"][x]["p95_ms"] for x in roles])
                            for name, k in (("FIFO", "fifo"), ("Troupe", "troupe"))]))


@section("Render and encode throughput",
         "`python -m bench.render [--baseline REV]`: 3 roles, one speaking with changing visemes and subtitles: "
         "frames a second of `draw()`, of JPEG encoding and of the MP4 writer (JPEG decode + H.264 `veryfast` "
         "+ AAC), and the real-time factor (RTF: wall seconds per second of video; below 1 is faster than real "
         "time) of draw + JPEG + mux at 25 fps, on one thread and with the writer on its own.")
def render(page: Page, results: Sequence[Result]) -> None:
    for r in results:
        d = r.doc
        page.table(("resolution", "draw fps", "JPEG fps", "JPEG kB", "MP4 fps", "RTF", "RTF, writer on its own thread"),
                   ((x["resolution"], num(x["draw_fps"], 0), num(x["jpeg_fps"], 0), num(x["jpeg_kb"], 0),
                     num(x["mp4_fps"], 0), num(x["rtf"]), num(x["rtf_threaded"])) for x in d["results"].values()))
        if "jpeg_720p_by_quality" in d:
            page.add("JPEG at 720p by quality: " + "; ".join(
                f"{q}: {v['ms']:.2f} ms, {v['kb']:.0f} kB" for q, v in d["jpeg_720p_by_quality"].items())
                + f" (the default is {d['jpeg_quality']}).", "")
        if "faces_720p_ms" in d:
            f = d["faces_720p_ms"]
            page.add(f"Faces, draw + JPEG of a 720p frame against revision {d.get('baseline', '?')} (before faces, "
                     f"{f['baseline']:.2f} ms): still faces {f['still']:.2f} ms, acting faces {f['acting']:.2f} ms "
                     f"({f['acting'] / f['baseline']:.2f}×), three image-art roles {f['art']:.2f} ms "
                     f"({f['art'] / f['baseline']:.2f}×).", "")


@section("Model backends",
         "`python -m bench.models [--llm a,b] [--tts a,b] [--repeats N]` (the `models` extra; vLLM in its own "
         "environment): N roles ask at once and the writer gets them as one batch; replies read in turn, up to "
         "2 sentences each; tokens counted with SmolLM2's tokenizer for every LLM backend. TTS: N sentences at "
         "once. The vLLM rows serve the tiny random-weight Llama of the tests: its \"first sentence\" is the "
         "whole 72-token reply.")
def models(page: Page, results: Sequence[Result]) -> None:
    llm, tts = [], []
    for r in results:
        for x in r.doc["llm"]:
            llm.append((f"`{r.name}`", x["backend"], x["roles"], ms(x["first_token_ms"]) if x["first_token_ms"] else "—",
                        _small_ms(x["first_sentence_ms"]), _small_ms(x["first_sentence_p50_all_ms"]),
                        num(x["tokens_per_s"], 1)))
        for x in r.doc["tts"]:
            tts.append((f"`{r.name}`", x["backend"], x["roles"], _small_ms(x["first_audio_ms"]), f"{x['rtf']:.4f}"))
    page.table(("file", "LLM backend", "roles asking at once", "engine's first token", "first reply's first sentence",
                "p50 first sentence over the replies", "tokens/s"), llm)
    page.table(("file", "TTS backend", "sentences at once", "first audio", "real-time factor"), tts)


def _small_ms(value: float) -> str:
    return f"{value:.2f} ms" if value < 10 else ms(value)


@section("What the writers write",
         "`python -m bench.replies [--writers scripted,llama_cpp]`: 50 comments × the demo's 3 roles, the writer "
         "alone as `ReplyWriter.stream` gives it (no openers, no scripted stand-in). Language by `langid` over "
         "en/zh/ja/ko. Goals: language right ≥ 98%, 0 leaks, echoes ≤ 5%, repetition ≤ 5%, injection "
         "deflected ≥ 95%.")
def replies(page: Page, results: Sequence[Result]) -> None:
    rows = []
    for r in results:
        for name, w in r.doc["writers"].items():
            met = (w["language_right"] >= 0.98 and w["leaks"] == 0 and w["echoes"] <= 0.05 and w["repetition"] <= 0.05
                   and w["injection_deflected"] >= 0.95)
            verdict = page.target(f"reply quality, {name} (`{r.name}`)", "the five goals",
                                  f"language {pct(w['language_right'])}, leaks {pct(w['leaks'])}", met)
            alone = w["injection_deflected_model_alone"]
            rows.append((name, w["replies"], pct(w["language_right"]), pct(w["empty"]), pct(w["within_budget"]),
                         pct(w["echoes"]), pct(w["repetition"]), pct(w["leaks"]),
                         pct(w["injection_deflected"]) + ("" if alone is None else f" ({pct(alone)} alone)"),
                         pct(w["blocked"]), f"{_small_ms(w['first_sentence_ms_p50'])} / {_small_ms(w['first_sentence_ms_p90'])}",
                         verdict))
    page.table(("writer", "replies", "language right", "empty", "within budget", "echoes", "repetition",
                "leaked tags / system text", "injection deflected", "blocked words", "first sentence p50 / p90",
                "goals"), rows)


@section("Platform bridges",
         "`python -m bench.bridges [--quick] [--soak-minutes N]`: each platform's loopback peer (`bench/peers/`) "
         "through its connector and the bridge into JetStream on a real nats-server; the benchmark's process "
         "(the peers, which share its event loop, included) pinned to one core, nats-server on the other. "
         "Throughput: N messages as fast as the peer sends them (Twitch over TLS; Bilibili 20 DANMU_MSG to a "
         "brotli frame; YouTube polled with a 5 ms interval), rate cap off, from the peer's first write to the "
         "last message parsed (the connector alone) or to the last publish ack (end to end). Latency: 50 "
         "messages a second, each one's write to its ack. Soak: the three at once, every connection cut every "
         "3 minutes (a third of a shorter soak); a Twitch or Bilibili message sent while no client was "
         "connected is not kept by the platform, so it is counted apart. Targets: Twitch end to end ≥ 2,000 "
         "messages/s; latency p99 ≤ 20 ms; in the soak nothing lost, nothing stored twice, every drop a "
         "`danmaku.gap`.")
def bridges(page: Page, results: Sequence[Result]) -> None:
    for r in results:
        d = r.doc
        rows = []
        for name, t in d["throughput"].items():
            verdict = "" if name != "twitch" else page.target(
                f"Twitch bridge end to end (`{r.name}`)", "≥ 2,000 msg/s", f"{t['per_s']:,.0f} msg/s", t["per_s"] >= 2000)
            rows.append((name, f"{t['parse_per_s']:,.0f} msg/s", f"{t['per_s']:,.0f} msg/s",
                         f"{t['sent']:,} / {t['published']:,} / {t['stored']:,}", verdict))
        page.table((f"platform ({d['messages']:,} messages)", "parse only", "end to end", "sent / published / stored",
                    "target"), rows)
        paced = []
        for name, x in d["latency"].items():
            w, b = x["socket_to_ack_ms"], x["read_to_ack_ms"]
            verdict = page.target(f"{name} write → ack p99 at {x['rate']:g}/s (`{r.name}`)", "≤ 20 ms",
                                  f"{w['p99']:.1f} ms", w["p99"] <= 20)
            paced.append((name, f"{x['messages']:,} in {x['seconds']:g} s", *(f"{w[q]:.1f} ms" for q in ("p50", "p95", "p99", "max")),
                         x["over_20_ms"], f"{b['p50']:.1f} / {b['p99']:.1f} ms", verdict))
        page.table(("platform", "messages", "write → ack p50", "p95", "p99", "max", "over 20 ms", "read → ack p50 / p99",
                    "target"), paced)
        s, soaked = d["soak"], []
        for name in ("twitch", "bilibili", "youtube"):
            x = s[name]
            met = x["lost"] == 0 and x["twice"] == 0 and x["gaps"] == x["drops"]
            verdict = page.target(f"{name} soak, {s['seconds'] / 60:g} min (`{r.name}`)", "0 lost, 0 twice, a gap a drop",
                                  f"{x['lost']} lost, {x['twice']} twice, {x['gaps']}/{x['drops']} gaps", met)
            soaked.append((name, f"{s['rates'][name]:g}/s", f"{x['sent_to_a_client']:,} / {x['sent_to_no_client']:,}",
                         f"{x['stored']:,}", x["lost"], x["twice"], x["repeats_dropped"], f"{x['gaps']} / {x['drops']}",
                         "—" if x["gap_s_max"] is None else f"{x['gap_s_max']:.1f} s", verdict))
        page.add(f"Soak: {s['seconds'] / 60:g} minutes, every connection cut every {s['drop_every_s']:g} s.", "")
        page.table(("platform", "rate", "sent to a client / to none", "stored", "lost", "twice", "repeats dropped",
                    "gaps / drops", "longest gap", "target"), soaked)


@section("The GPU check",
         "`python -m bench.gpu_check [--frames N] [--vllm-python PATH]`: every GPU path against its CPU path in "
         "one table, saying what it skipped and why; it runs on any machine.")
def gpu_check(page: Page, results: Sequence[Result]) -> None:
    for r in results:
        d = r.doc
        rows = [(f"render draw + JPEG {res}, fps", num(d[f"render_{res}_fps"]["cpu"], 0),
                 num(d[f"render_{res}_fps"]["cuda"], 0)) for res in ("1080p", "720p", "480p", "360p")]
        rows += [("JPEG encoder", d["jpeg_encoder"]["cpu"], d["jpeg_encoder"]["cuda"] or "—"),
                 ("onnx voice real-time factor", num(d["tts_rtf"]["cpu"], 3), num(d["tts_rtf"]["cuda"], 3)),
                 ("SmolLM2 first sentence", ms(d["llm"]["cpu"]["first_sentence_ms"]), ms(d["llm"]["cuda"]["first_sentence_ms"])),
                 ("SmolLM2 tokens/s", num(d["llm"]["cpu"]["tokens_per_s"], 1), num(d["llm"]["cuda"]["tokens_per_s"], 1))]
        lat = d["interaction_latency_ms"]
        rows.append(("interaction latency p50 / p99 (10 danmaku, transformers + onnx)",
                     " / ".join(ms(v) for v in lat["cpu"]) if lat["cpu"] else "—",
                     " / ".join(ms(v) for v in lat["cuda"]) if lat["cuda"] else "—"))
        page.table(("path", "CPU", "CUDA"), rows)
        page.add("Skipped: " + "; ".join(f"{k}: {v}" for k, v in d["skipped"].items()) + ".", "")


@section("Viewers remembered",
         "`python -m bench.memory [--writer scripted|llama_cpp]`: the viewers projection's catch-up against the "
         "recorder's ingest of the same chatty show (medians of alternating repeats on fresh databases), its "
         "catch-up over a large store, the director's read of what the stage remembers of a viewer (the recall's "
         "added latency on the cue path), and two real shows (a nats-server, every actor "
         "in one process): viewers state facts in the first and come back in the second, half in English, half in "
         "Chinese, with an anonymous comment beside each. Targets: projection ≥ 1.5× ingest on SQLite and "
         "PostgreSQL; the recall's added latency on the cue path p99 ≤ 5 ms; ≥ 95% of returning viewers greeted "
         "back; ≥ 80% of replies use the fact the comment bears on (scripted writer; a model's share reported).")
def memory(page: Page, results: Sequence[Result]) -> None:
    for r in results:
        d = r.doc
        rows = []
        for store_name in ("sqlite", "postgresql"):
            s = d.get(store_name)
            if s is None:
                continue
            a, c, w = s["against_ingest"], s["catch_up"], s["recall_read"]
            rows.append((store_name, f"{a['ingest_eps']:,} ev/s", f"{a['projection_eps']:,} ev/s",
                         f"{num(a['ratio'])}× " + page.target(f"projection vs ingest, {store_name} (`{r.name}`)", "≥ 1.5×",
                                                             f"{num(a['ratio'])}×", a["ratio"] >= 1.5),
                         f"{c['events']:,} events in {c['seconds']:g} s ({c['events_per_s']:,} ev/s)",
                         f"{w['p50_ms']:g} / {w['p99_ms']:g} ms " + page.target(f"recall's added latency p99, {store_name} (`{r.name}`)",
                                                             "≤ 5 ms", f"{w['p99_ms']:g} ms", w["p99_ms"] <= 5)))
        if rows:
            page.table(("store", "recorder ingest", "projection", "ratio", "catch-up",
                        "recall added p50 / p99 (the director's read)"), rows)
        shows = d.get("two_shows")
        if shows:
            t, added = shows["taken_in_ms"], shows["recall_added_ms"]
            writer = shows["writer"]
            greeted, used = shows["greeted_share"], shows["fact_used_share"]
            page.add(f"Two shows, {writer} writer: {shows['returning']} returning viewers, {shows['answered']} answered "
                     f"in the second show; greeted back {pct(greeted)} "
                     + page.target(f"returning viewers greeted (`{r.name}`)", "≥ 95%", pct(greeted),
                                   greeted is not None and greeted >= 0.95)
                     + f"; replies that use the fact {pct(used)} "
                     + (page.target(f"replies using a fact (`{r.name}`)", "≥ 80%", pct(used), used is not None and used >= 0.8)
                        if writer == "scripted" else "(a model's share: reported)") + ".", "")
            page.add(f"Taken in by the director after the comment was sent: remembered viewers p50 {t['remembered']['p50']:.0f} / "
                     f"p99 {t['remembered']['p99']:.0f} ms, anonymous p50 {t['anonymous']['p50']:.0f} / p99 "
                     f"{t['anonymous']['p99']:.0f} ms (every actor of the show in one process on two cores, "
                     f"{t['remembered']['n']} comments of each: the p99 is their slowest); the difference p50 "
                     f"{added['p50']:.0f} ms, p99 {added['p99']:.0f} ms.", "")
        facts = d.get("facts_read")
        if facts:
            rules, both = facts["rules"], facts["rules_and_model"]
            page.add(f"Facts read from {facts['comments']} labelled comments in English and Chinese ({facts['facts']} facts "
                     f"of their writers; `bench.stated`): the rules alone found {rules['right']} right and {rules['wrong']} "
                     f"wrong (precision {pct(rules['precision'])}, recall {pct(rules['recall'])}); with the facts worker's "
                     f"{facts['model']} reading what they missed, {both['right']} right and {both['wrong']} wrong "
                     f"(precision {pct(both['precision'])}, recall {pct(both['recall'])}). The model read "
                     f"{facts['read']} of them, p50 {facts['read_p50_ms']:g} ms each on {facts['threads']} thread "
                     f"(at most {facts['read_max_ms']:g} ms).", "")
