"""The tutorials' shell blocks run as a new user types them, in a fresh folder with a fresh state
folder, with the installed environment's ``troupe`` on the PATH.

A tutorial marks its fenced blocks with a title (`````bash title="terminal 2"``):

- ``terminal 1``: the show, left running; the blocks after it run while it is on air;
- ``terminal 2``: typed in a second terminal while the show of terminal 1 runs;
- no title: typed once the show has ended (in either terminal);
- ``install`` and ``server: ...``: not run here, for the reasons in ``SKIPPED``;
- a block of another language with a title (`````toml title="my-show.toml"``): a file
  the reader writes, written here at that point.

The only change to what the page says is the shows' length: ``--duration`` is cut to
``SHOW_SECONDS`` (the pages give minutes, to read along).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "docs" / "tutorials"
SHOW_SECONDS = 45
SKIPPED = {
    "install": "the test command has just installed Troupe and its extras into this environment",
    "server": "it needs an Ollama or llama.cpp server beside the show, which the tests do not start "
              "(tests/backends/test_llm_openai.py runs the openai backend against llama_cpp.server)",
}
TITLES = ("terminal 1", "terminal 2", "")
_FENCE = re.compile(r'^```(\w+)(?:\s+title="([^"]*)")?\s*$')


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: its language, its title, its text, where it starts."""

    lang: str
    title: str
    text: str
    line: int


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, in order."""
    found: list[Block] = []
    current: tuple[str, str, int] | None = None
    lines: list[str] = []
    for no, line in enumerate(text.splitlines(), 1):
        if current is None:
            fence = _FENCE.match(line)
            if fence:
                current, lines = (fence.group(1), fence.group(2) or "", no), []
        elif line.strip() == "```":
            found.append(Block(current[0], current[1], "\n".join(lines) + "\n", current[2]))
            current = None
        else:
            lines.append(line)
    return found


def skipped(block: Block) -> str | None:
    """Why a shell block is not run here (None: it is)."""
    return next((why for prefix, why in SKIPPED.items() if block.title.startswith(prefix)), None)


def shortened(script: str) -> str:
    return re.sub(r"--duration (\d+)", lambda m: f"--duration {min(int(m.group(1)), SHOW_SECONDS)}", script)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``condition`` until it holds, or fail saying ``what`` did not happen."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout_s:g} s")
        time.sleep(0.2)


class Reader:
    """A new user going through one tutorial in a fresh folder: the show in terminal 1, the rest
    typed in order."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = _free_port()
        bin_dir = Path(sys.executable).parent
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TROUPE_")}
        self.env.update(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(bin_dir.parent),
                        TROUPE_STATE_DIR=str(folder / ".troupe"), TROUPE_HTTP_PORT=str(self.port))
        self.show: subprocess.Popen[bytes] | None = None
        self.show_log = folder / "terminal-1.log"
        self.output: list[str] = []
        self.skips: list[str] = []

    def type(self, block: Block) -> None:
        """Do what one block says."""
        if block.lang not in ("bash", "sh"):
            if block.title:
                (self.folder / block.title).write_text(block.text, "utf-8")
            return
        assert block.title in TITLES or skipped(block), f"line {block.line}: unknown title {block.title!r}"
        why = skipped(block)
        if why or (self.show is None and block.title == "terminal 2"):
            self.skips.append(f"line {block.line} ({block.title}): {why or 'its show was not run'}")
            return
        if block.title == "terminal 1":
            self.start_show(block)
            return
        if block.title == "":
            self.wait_for_the_show()
        self.output.append(self.run(block))

    def run(self, block: Block) -> str:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", shortened(block.text)], cwd=self.folder, env=self.env,
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, f"line {block.line}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done.stdout + done.stderr

    def start_show(self, block: Block) -> None:
        self.wait_for_the_show()
        if "--llm llama_cpp" in block.text and importlib.util.find_spec("llama_cpp") is None:
            self.skips.append(f"line {block.line}: the llama extra is not installed")
            return
        with self.show_log.open("wb") as log:
            self.show = subprocess.Popen(["bash", "-euo", "pipefail", "-c", shortened(block.text)], cwd=self.folder,
                                         env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        show = self.show
        _wait(lambda: b"troupe: run " in self.show_log.read_bytes() or show.poll() is not None, 240,
              f"line {block.line}: the show did not go on air")
        assert show.poll() is None, f"line {block.line}: the show stopped\n{self.show_log.read_text()}"
        if "--preview" in block.text:
            _wait(self._page_served, 60, f"line {block.line}: the preview page was not served")

    def _page_served(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/", timeout=5) as page:
                return page.status == 200 and b"<html" in page.read().lower()
        except OSError:
            return False

    def wait_for_the_show(self) -> None:
        """The show of terminal 1 has ended, as the page says to wait for."""
        if self.show is None:
            return
        try:
            rc = self.show.wait(timeout=SHOW_SECONDS + 240)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the show did not end\n{self.show_log.read_text()[-3000:]}")
        log = self.show_log.read_text()
        self.show = None
        assert rc == 0, f"the show failed: exit {rc}\n{log[-3000:]}"
        self.output.append(log)

    def stop(self) -> None:
        if self.show is not None and self.show.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.show.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.show.wait(timeout=30)


@contextlib.contextmanager
def reader(folder: Path) -> Iterator[Reader]:
    you = Reader(folder)
    try:
        yield you
    finally:
        you.stop()


def follow(page: str, folder: Path) -> Reader:
    with reader(folder) as you:
        for block in blocks((TUTORIALS / page).read_text("utf-8")):
            you.type(block)
        you.wait_for_the_show()
    print("\n".join(["skipped:", *you.skips]))
    return you


def test_every_tutorial_block_is_one_the_tests_know_how_to_type() -> None:
    for page in sorted(TUTORIALS.glob("*.md")):
        show_running = False
        for block in blocks(page.read_text("utf-8")):
            where = f"{page.name}:{block.line}"
            if block.lang in ("bash", "sh"):
                assert block.title in TITLES or skipped(block), f"{where}: unknown title {block.title!r}"
                assert block.title != "terminal 2" or show_running, f"{where}: terminal 2 with no show running"
                show_running = block.title in ("terminal 1", "terminal 2") and not skipped(block)
            elif block.title:
                assert "/" not in block.title, f"{where}: a file the reader writes is in the current folder"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_your_first_show(tmp_path: Path) -> None:
    you = follow("first-show.md", tmp_path)
    said = "\n".join(you.output)
    assert "hello-1: cue" in said and "-> rex" in said
    assert "say: rex says it next, word for word" in said
    assert "first-show" in said and "0 divergences" in said
    assert list((tmp_path / "out").glob("*.mp4"))


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_two_role_show_of_your_own(tmp_path: Path) -> None:
    you = follow("two-role-show.md", tmp_path)
    said = "\n".join(you.output)
    assert "ok: Stars and Sprouts, 2 roles, 3 segments" in said
    assert "ok: Midnight Kitchen, 2 roles, 3 segments" in said
    assert "q1: cue" in said and "-> juno" in said and "say: bit says it next" in said
    assert "juno" in said and "bit" in said and "0 divergences" in said
    assert (tmp_path / "out" / "my-show.mp4").is_file()
    if importlib.util.find_spec("llama_cpp") is not None:
        assert "q2: cue" in said and (tmp_path / "out" / "my-show-llama.mp4").is_file()
