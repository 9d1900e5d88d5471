"""Glass to glass: a danmaku sent from the preview page -> its reply's first viseme on that page's screen.

``python -m bench.glass [--count 50] [--interval 5] [--resolution 720p] [--json]``

A real headless browser (Debian's chromium, driven by Playwright) opens the preview page of a
``troupe up``-like show (every actor in this process, embedded nats-server, SQLite, the
scripted LLM with one-sentence replies and espeak), types ``--count`` danmaku into its input
box one every ``--interval`` seconds and clicks Send.  The page times each from the click to
the moment the browser presents the first video frame at or after the reply's first
non-silent viseme frame (it reads the frame number drawn into each WebRTC frame).  The same
danmaku's server-side figure comes from the event store, as ``troupe inspect`` measures it:
the danmaku's JetStream time to the JetStream time of the first frame showing its speech.
A screenshot of the page is written to ``bench/results/preview.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

from app.shows import load_show
from app.summary import reply_latencies
from app.supervisor import Stage, new_run_id, run_show
from app.web import preview_server
from bench.common import RESULTS, machine, pct, print_table, write_result
from bench.latency import QUESTIONS
from infra.settings import load_settings

CHROMIUM = "/usr/bin/chromium"
BROWSER_ARGS = ["--no-sandbox", "--autoplay-policy=no-user-gesture-required", "--disable-gpu"]
TOKEN = "bench-token"


async def _until(page: Any, script: str, timeout_s: float) -> Any:
    return await (await page.wait_for_function(script, timeout=timeout_s * 1000, polling=50)).json_value()


async def bench(count: int, interval_s: float, resolution: str) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    show = dataclasses.replace(load_show(), script=())  # the page's danmaku are the only ones
    duration = 4.0 + count * interval_s + 4.0
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            state_dir=Path(tmp) / "state", out_dir=Path(tmp) / "out", metrics_port=-1, resolution=resolution,
            llm_max_sentences=1, merge_window_ms=0, preview_token=TOKEN, http_port=0,
            self_driven="off",  # the stage idle between the page's danmaku, as before the rundown
        )
        run = new_run_id()
        async with Stage(settings) as stage:
            page_server = await preview_server(stage)
            show_task = asyncio.create_task(run_show(stage, show, duration, run_id=run))
            try:
                async with async_playwright() as pw:
                    browser = await pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
                    page = await browser.new_page(viewport={"width": 1280, "height": 860})
                    await page.goto(f"http://127.0.0.1:{page_server.port}/?run={run}")
                    await _until(page, "troupe.pc && troupe.pc.connectionState === 'connected'", 60)
                    await _until(page, "troupe.frames.length > 25", 60)
                    await page.fill("#token", TOKEN)
                    loop = asyncio.get_running_loop()
                    begun = loop.time()
                    shot = min(count - 1, 10)
                    for i in range(count):
                        await asyncio.sleep(max(0.0, begun + i * interval_s - loop.time()))
                        await page.fill("#user", f"viewer{i}")
                        await page.fill("#text", f"{QUESTIONS[i % len(QUESTIONS)]} #{i}")
                        await page.click("#send button[type=submit]")
                        await _until(page, f"Object.keys(troupe.sent).length === {i + 1}", 30)
                        if i == shot:  # the page with a reply on screen and a feed behind it
                            sent = await page.evaluate(f"Object.keys(troupe.sent)[{i}]")
                            await _until(page, f"troupe.glass[{sent!r}] !== undefined", 30)
                            await page.screenshot(path=str(RESULTS / "preview.png"))
                    last = await page.evaluate("Object.keys(troupe.sent).at(-1)")
                    await _until(page, f"troupe.glass[{last!r}] !== undefined", 60)
                    glass: dict[str, float] = await page.evaluate("troupe.glass")
                    sent_ids: list[str] = await page.evaluate("Object.keys(troupe.sent)")
                    await browser.close()
                result = await show_task
            finally:
                if not show_task.done():
                    show_task.cancel()
                await page_server.close()
        server = reply_latencies(Stage(settings).engine, result.run)["frame"]  # as troupe inspect measures
    both = [i for i in sent_ids if i in glass and i in server]
    page_ms = [glass[i] for i in both]
    server_ms = [server[i] for i in both]
    extra = [glass[i] - server[i] for i in both]
    return {
        "machine": machine(), "count": count, "interval_s": interval_s, "resolution": resolution,
        "sent": len(sent_ids), "measured": len(both),
        "page_p50_ms": round(pct(page_ms, 50), 1), "page_p99_ms": round(pct(page_ms, 99), 1),
        "server_p50_ms": pct(server_ms, 50), "server_p99_ms": pct(server_ms, 99),
        "page_minus_server_p50_ms": round(pct(extra, 50), 1), "page_minus_server_p99_ms": round(pct(extra, 99), 1),
        "samples": [{"id": i, "page_ms": round(glass[i], 1), "server_ms": server[i]} for i in both],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between danmaku")
    parser.add_argument("--resolution", default="720p")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    doc = asyncio.run(bench(args.count, args.interval, args.resolution))
    m = doc["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, {m['platform']}, Python {m['python']}")
    print(f"{doc['measured']}/{doc['sent']} danmaku sent from the page were answered and timed; {args.resolution}; "
          "scripted LLM (one sentence), espeak, chromium over WebRTC on loopback")
    print_table(
        "ms from the danmaku to its reply's first viseme frame",
        ["measured where", "p50", "p99"],
        [["server: danmaku stored -> frame published", doc["server_p50_ms"], doc["server_p99_ms"]],
         ["page: Send clicked -> frame on screen", doc["page_p50_ms"], doc["page_p99_ms"]],
         ["page minus server, per danmaku", doc["page_minus_server_p50_ms"], doc["page_minus_server_p99_ms"]]],
    )
    print(f"screenshot: {RESULTS / 'preview.png'}")
    write_result("glass", doc)
    if args.json:
        print(json.dumps({k: v for k, v in doc.items() if k != "samples"}))


if __name__ == "__main__":
    main()
