"""What fills the air is worth hearing: a show's material (roles' ``material``, segments' ``points``)
is what the scripted writer says of its own; a show without it says fewer lines, and ``troupe up``
warns of it in one line; a line of the show's own on deck gives way to a comment; every reply says
where its words came from."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from actors.director import Director
from actors.floor import SPARSE_GAP_MS, sparse
from actors.kernel import ListFeed
from actors.llm import LLMActor
from app.shows import load_show
from events.cue import CueIssued
from events.danmaku import DanmakuReceived
from events.run import RunStarted
from events.show import ShowError, show_from_dict, show_from_toml
from events.utterance import UtteranceCompleted, UtteranceDropped
from infra.settings import load_settings
from tests.showkit import demo_run

BARE = """
[[roles]]
id = "ann"
name = "Ann"
keywords = ["planets"]
[[roles]]
id = "bo"
name = "Bo"
[[segments]]
title = "Space"
length = 60
leads = ["ann"]
joins = ["bo"]
topics = ["planets", "spice"]
"""


def _bare_run(duration_ms: int = 120_000) -> RunStarted:
    return dataclasses.replace(demo_run(), show=show_from_toml(BARE).to_dict(), duration_ms=duration_ms)


def test_material_and_points_are_read_checked_and_carried() -> None:
    show = show_from_toml(BARE.replace('name = "Bo"', 'name = "Bo"\nmaterial = ["I sailed to Mars once."]')
                          .replace('topics = ["planets", "spice"]', 'topics = ["planets"]\npoints = ["Mars is red."]'))
    assert show.has_material and show.roles[1].material == ("I sailed to Mars once.",)
    assert show_from_dict(show.to_dict()) == show  # as run.started carries it
    assert not show_from_toml(BARE).has_material
    for bad, field in (('material = ["{user} hi"]', r"roles\[1\]\.material\[0\]: .*placeholders"),
                       ('material = [""]', r"roles\[1\]\.material\[0\]: a line is a string of 1 to 300"),
                       ('material = "one"', r"roles\[1\]\.material: wrong type str")):
        with pytest.raises(ShowError, match=field):
            show_from_toml(BARE.replace('name = "Bo"', f'name = "Bo"\n{bad}'))


def test_a_show_with_nothing_to_say_speaks_less_and_only_invites_the_chat() -> None:
    run = _bare_run()
    assert sparse(show_from_dict(run.show), load_settings(environ={}))
    assert not sparse(show_from_dict(run.show), load_settings(environ={}, llm_backend="llama_cpp"))
    assert not sparse(load_show(), load_settings(environ={}))
    feed = ListFeed(Director(load_settings(environ={})), run)
    feed.feed(run)
    feed.advance(run.duration_ms)
    cues = [e.event for e in feed.out if isinstance(e.event, CueIssued)]
    assert cues and {c.reason for c in cues} == {"invitation"}
    assert all(b.t_ms - a.t_ms >= SPARSE_GAP_MS for a, b in zip(cues, cues[1:], strict=False))


def test_troupe_up_warns_in_one_line_of_a_show_without_material(tmp_path: Path) -> None:
    show = tmp_path / "bare.toml"
    show.write_text(BARE)
    # --duration -1 stops it right after the show is loaded and checked (exit 2): no show runs.
    result = subprocess.run([sys.executable, "-m", "app.cli", "--state-dir", str(tmp_path), "up", "--show", str(show),
                             "--duration", "-1"], capture_output=True, text=True, timeout=60)
    warnings = [line for line in result.stderr.splitlines() if line.startswith("troupe: warning:")]
    assert len(warnings) == 1 and "nothing to say of their own" in warnings[0], result.stderr
    demo = subprocess.run([sys.executable, "-m", "app.cli", "--state-dir", str(tmp_path), "up", "--duration", "-1"],
                          capture_output=True, text=True, timeout=60)
    assert "warning" not in demo.stderr


def test_a_line_of_the_show_s_own_on_deck_gives_way_to_a_comment() -> None:
    run = dataclasses.replace(demo_run(), duration_ms=120_000)

    def show() -> ListFeed:
        feed = ListFeed(Director(load_settings(environ={})), run)
        feed.feed(run)
        return feed

    quiet = show()
    quiet.advance(20_000)
    last = [e.event for e in quiet.out if isinstance(e.event, CueIssued)][-1]
    feed = show()  # the same show, and a comment just after that line was asked for, on deck
    feed.advance(last.t_ms + 10)
    out = feed.feed(DanmakuReceived(id="d1", run="r1", text="what should I cook tonight?", user="ann"))
    [yielded] = [e for e in out if isinstance(e, UtteranceDropped)]
    assert yielded.utterance == last.id and yielded.reason.startswith("yielded")
    feed.advance(30_000)
    assert [e.event for e in feed.out if isinstance(e.event, CueIssued) and e.event.danmaku == ("d1",)]


def test_every_reply_says_where_its_words_came_from() -> None:
    show = load_show()
    llm = LLMActor(load_settings(environ={}))
    run = demo_run("r1")
    segment = show.segments[2]
    brief = CueIssued(id="own1", run="r1", role="xiaolu", correlation="own1", seq=1, user="", text=segment.brief,
                      danmaku=(), routed_by="rundown", priority=0.3, reason="brief", segment=segment.title,
                      max_sentences=1, point=0)
    chat = CueIssued(id="cue1", run="r1", role="host", correlation="d1", seq=2, user="ann",
                     text="what game are we playing tonight", danmaku=("d1",), routed_by="mention", priority=2.0)
    line = dataclasses.replace(brief, id="own2", role="host", verbatim=True, text="Hello!", reason="line")
    feed = ListFeed(llm, run)
    done = {}
    for cue in (brief, chat, line):
        for e in feed.handle(cue, at_ms=100):
            if isinstance(e, UtteranceCompleted):
                done[e.utterance] = e
    zh_points = [p for p in segment.points if any("\u4e00" <= ch <= "\u9fff" for ch in p)]
    assert (done["own1"].source, done["own1"].text) == ("material", zh_points[0])  # the segment's first point
    assert done["cue1"].source == "template" and done["own2"].source == "verbatim"
