"""The live output: the show pushed over RTMP to a real nginx-rtmp on loopback while it is
written to MP4; nginx killed for 5 s mid-show and started again: the stream resumes, the
events say so, and the MP4 is complete."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import av
import pytest

from app.inspect import format_report, report
from app.shows import load_show
from app.summary import summarise
from app.supervisor import Stage, run_show
from events.output import OutputClosed, OutputConnected, OutputDropped
from infra.natsserver import EmbeddedNats, free_port
from infra.settings import load_settings
from store.recorder import read_events
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
MODULE = Path("/usr/lib/nginx/modules/ngx_rtmp_module.so")
pytestmark = [
    pytest.mark.skipif(shutil.which("nginx") is None or not MODULE.exists(),
                       reason="needs Debian's nginx-light and libnginx-mod-rtmp (scripts/test.sh installs them)"),
    pytest.mark.timeout(180),
]


class Nginx:
    """nginx-rtmp with the repository's config, recording what is pushed to it."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port = folder, free_port()
        folder.mkdir(parents=True, exist_ok=True)
        config = (ROOT / "infra/nginx/rtmp.conf").read_text()
        for key, value in {"@PORT@": str(self.port), "@DIR@": str(folder), "@MODULE@": str(MODULE)}.items():
            config = config.replace(key, value)
        self.config = folder / "nginx.conf"
        self.config.write_text(config)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(["nginx", "-c", str(self.config), "-p", str(self.folder),
                                         "-e", str(self.folder / "error.log")], stderr=subprocess.DEVNULL)

    def listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def recordings(self) -> list[Path]:
        return sorted(self.folder.glob("*.flv"), key=os.path.getmtime)


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[Nginx]:
    server = Nginx(tmp_path / "rtmp")
    server.start()
    yield server
    server.kill()


def _times(path: Path) -> dict[str, list[float]]:
    """Presentation times (s) of a recording's video and audio packets."""
    with av.open(str(path)) as container:
        out: dict[str, list[float]] = {"video": [], "audio": []}
        for packet in container.demux():
            if packet.pts is not None and packet.stream.type in out:
                out[packet.stream.type].append(float(packet.pts * packet.time_base))
    return out


async def test_a_show_pushed_over_rtmp_resumes_after_the_server_comes_back(nginx: Nginx, tmp_path: Path) -> None:
    await wait_for(nginx.listening, timeout_s=10, what="nginx listens")
    duration = 24.0
    async with EmbeddedNats(tmp_path / "nats") as server:
        settings = load_settings(environ={}, nats_url=server.url, state_dir=tmp_path / "state",
                                 out_dir=tmp_path / "out", metrics_port=-1,
                                 rtmp_url=f"rtmp://127.0.0.1:{nginx.port}/live/showkey")
        async with Stage(settings) as stage:
            show = asyncio.create_task(run_show(stage, load_show(), duration))

            async def outage() -> None:
                await wait_for(lambda: bool(nginx.recordings()) and nginx.recordings()[0].stat().st_size > 20_000,
                               timeout_s=30, what="the stream reaches nginx")
                nginx.kill()
                await asyncio.sleep(5)  # the outage itself: five seconds without a server
                nginx.start()

            await outage()
            result = await show
            events = read_events(stage.engine, result.run)
            inspected = format_report(report(stage.engine, result.run))
            summary = summarise(stage.engine, result.run, str(result.mp4))
    connected = [e for e in events if isinstance(e, OutputConnected)]
    dropped = [e for e in events if isinstance(e, OutputDropped)]
    [closed] = [e for e in events if isinstance(e, OutputClosed)]
    assert [c.attempt for c in connected][0] == 1 and len(connected) >= 2 and connected[-1].attempt > 1
    assert dropped and all(d.reason for d in dropped) and dropped[0].t_ms < connected[-1].t_ms
    assert closed.reconnects >= 1 and closed.packets_sent > 0 and closed.packets_lost > 0
    assert all(e.target == f"rtmp://127.0.0.1:{nginx.port}/live/***" for e in (*connected, *dropped, closed))
    # troupe inspect and the summary of troupe up say what happened, the stream key masked.
    assert f"live output rtmp rtmp://127.0.0.1:{nginx.port}/live/***: connected {len(connected)}x" in inspected
    assert dropped[0].reason in inspected and "showkey" not in inspected
    [out] = summary["outputs"]
    assert out["reconnects"] == closed.reconnects and len(out["drops"]) == len(dropped)
    # The MP4 is whole: every frame of the show, and its audio, whatever the live output did.
    assert result.mp4 is not None
    with av.open(str(result.mp4)) as mp4:
        assert mp4.streams.video[0].frames == int(duration * 25)
        assert abs(float(mp4.streams.audio[0].duration * mp4.streams.audio[0].time_base) - duration) < 0.2
    # nginx recorded the stream before the outage and after it: video and audio up to the end.
    recordings = nginx.recordings()
    assert len(recordings) >= 2
    first, last = _times(recordings[0]), _times(recordings[-1])
    assert first["video"] and first["audio"] and last["video"] and last["audio"]
    assert min(first["video"]) < 1.0
    assert max(last["video"]) > duration - 1.5 and max(last["audio"]) > duration - 1.5
    assert min(last["video"]) > max(first["video"])  # resumed where the show was, not from the start


async def test_a_show_is_a_live_hls_playlist_with_old_segments_pruned(tmp_path: Path) -> None:
    async with EmbeddedNats(tmp_path / "nats") as server:
        settings = load_settings(environ={}, nats_url=server.url, state_dir=tmp_path / "state",
                                 out_dir=tmp_path / "out", metrics_port=-1, hls_dir=tmp_path / "hls")
        async with Stage(settings) as stage:
            result = await run_show(stage, load_show(), 20.0)
            events = read_events(stage.engine, result.run)
    folder = tmp_path / "hls" / result.run
    playlist = (folder / "index.m3u8").read_text()
    listed = [line for line in playlist.splitlines() if line.endswith(".ts")]
    assert "#EXT-X-TARGETDURATION" in playlist and len(listed) == 6  # the last six segments
    assert "#EXT-X-MEDIA-SEQUENCE:0" not in playlist  # older ones have left the list ...
    on_disk = sorted(p.name for p in folder.glob("*.ts"))
    assert set(listed) <= set(on_disk) and len(on_disk) <= 7  # ... and the folder
    with av.open(str(folder / listed[-1])) as segment:
        assert segment.streams.video and segment.streams.audio
    [closed] = [e for e in events if isinstance(e, OutputClosed)]
    assert closed.output == "hls" and closed.reconnects == 0 and closed.packets_sent > 0


async def test_a_stalled_ingest_never_stalls_the_show(nginx: Nginx, tmp_path: Path) -> None:
    """nginx frozen (SIGSTOP) for 14 s mid-show: it still holds the connection but reads nothing.
    What the socket's buffers do not take waits in the sink's bounded queue to it (750 packets;
    beyond that, dropped and counted): the sink never waits for the ingest, so the show's
    frames are drawn on time and the MP4 is whole."""
    await wait_for(nginx.listening, timeout_s=10, what="nginx listens")
    duration = 26.0
    async with EmbeddedNats(tmp_path / "nats") as server:
        settings = load_settings(environ={}, nats_url=server.url, state_dir=tmp_path / "state",
                                 out_dir=tmp_path / "out", metrics_port=-1, resolution="360p",
                                 rtmp_url=f"rtmp://127.0.0.1:{nginx.port}/live/showkey")
        async with Stage(settings) as stage:
            show = asyncio.create_task(run_show(stage, load_show(), duration))
            await wait_for(lambda: bool(nginx.recordings()) and nginx.recordings()[0].stat().st_size > 20_000,
                           timeout_s=30, what="the stream reaches nginx")
            assert nginx.process is not None
            nginx.process.send_signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(14)  # the stall itself
            finally:
                nginx.process.send_signal(signal.SIGCONT)
            result = await show
            summary = summarise(stage.engine, result.run, str(result.mp4))
            events = read_events(stage.engine, result.run)
    [closed] = [e for e in events if isinstance(e, OutputClosed)]
    assert closed.packets_sent > 0, closed
    # The stage went on at its pace: frames drawn on time while the ingest was frozen.
    assert summary["frames"]["rendered"] >= int(duration * 25) * 0.97, summary["frames"]
    assert summary["frame_lateness_ms"]["p99"] < 200, summary["frame_lateness_ms"]
    assert result.mp4 is not None
    with av.open(str(result.mp4)) as mp4:
        assert mp4.streams.video[0].frames == int(duration * 25)
