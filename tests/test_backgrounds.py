"""Backgrounds: a show and a segment of its rundown may name the stage's back wall (a colour or
an image); frames record the wall they drew, and redraws draw the same."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from actors.kernel import ListFeed
from actors.render import Redrawer, RenderActor
from app.shows import load_show
from events.cue import SegmentStarted
from events.frame import FrameRendered
from events.show import ShowError, show_from_toml
from infra.settings import load_settings
from tests.showkit import demo_run

SHOW = """
background = "{show}"
[[roles]]
id = "host"
[[segments]]
title = "Open"
length = 10
leads = ["host"]
[[segments]]
title = "Night"
length = 10
leads = ["host"]
background = "{segment}"
"""


def test_a_wall_is_a_colour_or_an_image_and_a_wrong_one_names_the_field(tmp_path: Path) -> None:
    show = show_from_toml(SHOW.format(show="#203040", segment="night.png"))
    assert show.background == "#203040" and show.background_of("Night") == "night.png"
    assert show.background_of("Open") == "#203040" and show.backgrounds == ("#203040", "night.png")
    with pytest.raises(ShowError, match=r"segments\[1\]\.background: 'teal' is not a colour"):
        show_from_toml(SHOW.format(show="", segment="teal"))
    file = tmp_path / "show.toml"
    file.write_text(SHOW.format(show="", segment="night.png"))
    with pytest.raises(ShowError, match=r"segments\[1\]\.background: .*night\.png does not exist"):
        load_show(file)
    Image.new("RGB", (64, 32), (10, 60, 30)).save(tmp_path / "night.png")
    loaded = load_show(file)
    night = str((tmp_path / "night.png").resolve())
    assert loaded.background_of("Night") == night and [a[0] for a in loaded.art] == [night]
    assert dataclasses.replace(loaded).to_dict()["art"] == [[night, loaded.art[0][1]]]


def test_frames_change_wall_when_their_segment_starts_and_redraws_match(tmp_path: Path) -> None:
    Image.new("RGB", (64, 32), (10, 60, 30)).save(tmp_path / "night.png")
    file = tmp_path / "show.toml"
    file.write_text(SHOW.format(show="#203040", segment="night.png"))
    show = load_show(file)
    run = dataclasses.replace(demo_run("r1", resolution="360p"), show=show.to_dict(), duration_ms=1200)
    feed = ListFeed(RenderActor(load_settings(environ={}, out_dir=tmp_path)), run)
    feed.handle(run, at_ms=0)
    night = SegmentStarted(id="s1", run="r1", t_ms=600, title="Night", index=1, planned_ms=600, length_ms=10_000,
                           reason="operator")
    frames = [e for e in feed.advance(600) if isinstance(e, FrameRendered)]  # the clock, to the segment's start
    feed.handle(night, at_ms=600)
    frames += [e for e in feed.advance(60_000) if isinstance(e, FrameRendered)]  # and on to the show's end
    assert len(frames) == 30 and feed.kernel.next_tick() is None
    assert {f.background for f in frames if f.t_ms < 600} == {"#203040"}
    assert {f.background for f in frames if f.t_ms >= 600} == {show.background_of("Night")}
    first, last = (np.asarray(Image.open(io.BytesIO(f.jpeg))) for f in (frames[0], frames[-1]))
    assert abs(int(first[5, 5, 2]) - 0x40) < 12 and abs(int(last[5, 5, 1]) - 60) < 12  # the walls' colours
    redraw = Redrawer(run, load_settings(environ={}), segments=[night])
    assert redraw.wall_at(100) == "#203040" and redraw.wall_at(700) == show.background_of("Night")
    for frame in (frames[3], frames[20]):
        again = redraw.draw(frame.n, None, frame.resolution, frame.faces, frame.background)
        assert again.jpeg == frame.jpeg
    Image.new("RGB", (64, 32), (200, 0, 0)).save(tmp_path / "night.png")  # the picture changed since the run
    with pytest.raises(Exception, match="the background in .*night.png changed since the run"):
        Redrawer(run, load_settings(environ={})).prepare("360p")
