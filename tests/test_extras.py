"""Heavy libraries sit behind install extras: a worker for any actor but render runs without
torch and the picture libraries, and a render worker without them stops with one line."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Makes the render extra's libraries look uninstalled in the child process.
BLOCK = "import sys\nfor m in ('torch', 'PIL', 'simplejpeg', 'mplfonts'):\n    sys.modules[m] = None\n"


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK + textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_every_actor_but_render_is_built_without_the_render_extra() -> None:
    done = _python("""
        from app.registry import ACTORS, Wiring
        from infra.metrics import Metrics
        from infra.settings import load_settings
        settings = load_settings(environ={})
        for name, entry in ACTORS.items():
            if name not in ("render", "recorder"):
                entry.build(Wiring(settings, Metrics(), lambda: None))
        import actors.backends.mp4, app.cli, app.supervisor
        print("built without", [m for m in ("torch", "PIL", "simplejpeg") if sys.modules.get(m) is not None])
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "built without []"


def test_a_render_worker_without_the_extra_stops_with_one_line(tmp_path: Path) -> None:
    done = _python(f"""
        from app.cli import main
        sys.exit(main(["actor", "render", "--nats", "nats://127.0.0.1:1", "--state-dir", {str(tmp_path)!r}]))
    """)
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"troupe: error: the torch backend \(render backend\) needs (torch|PIL|simplejpeg|mplfonts), "
                        r"which is not installed: pip install 'troupe\[render\]'", last), last
