"""Faces that act: lipsync decides expressions, gaze and nods on the show timeline
(``viseme.face``), and the timeline every drawer reads eases them."""

from __future__ import annotations

import dataclasses

import pytest

from actors.faces import NOD_MS, FacePlanner, FaceTimeline, ease_out
from actors.kernel import ListFeed
from actors.lipsync import LipsyncActor
from events.audio import AudioChunk, PhonemeMark
from events.viseme import AUDIENCE, FaceChanged
from tests.showkit import demo_run

ROLES = [("host", "Mika"), ("xiaolu", "小鹿"), ("rex", "Rex")]  # the demo's stage order


def said(utt: str, seq: int, text: str, emotion: str = "neutral", role: str = "host", dur: int = 1500,
         last: bool = False) -> AudioChunk:
    return AudioChunk(
        id=f"{utt}-{seq}", run="r1", role=role, correlation=f"c-{utt}", utterance=utt, seq=seq,
        last=last, sample_rate=22050, offset_ms=0, duration_ms=dur, text=text, emotion=emotion,
        phonemes=(PhonemeMark("h", 0, 100), PhonemeMark("aɪ", 100, 300)), pcm=b"\x00\x00" * (22050 * dur // 1000),
    )


def faces(outs: object) -> list[FaceChanged]:
    return [e for e in outs if isinstance(e, FaceChanged)]  # type: ignore[attr-defined]


def test_the_speaker_shows_its_sentence_and_holds_it_before_the_next_change() -> None:
    plan = FacePlanner(ROLES, hold_ms=1200, linger_ms=1500)
    first = plan.spoken("host", 1000, 1500, "What a great gift!", "happy", first=True, sentence=True, last=False)
    assert [(c.role, c.start_ms, c.expression) for c in first if c.expression] == [("host", 1000, "happy")]
    assert {(c.role, c.look) for c in first if c.look} == {("xiaolu", "host"), ("rex", "host")}  # host: the audience
    assert plan.looks["host"].at(1000)[1] == AUDIENCE
    # The next sentence, sad, 500 ms later: it waits for the hold (1000 + 1200), never flickers.
    second = plan.spoken("host", 1500, 2600, "But I lost my cat.", "sad", first=False, sentence=True, last=True)
    [sad] = [c for c in second if c.expression == "sad"]
    assert sad.start_ms == 2200
    [back] = [c for c in second if c.expression == "neutral"]
    assert (back.role, back.start_ms) == ("host", 2600 + 1500)  # eased back after the reply


def test_a_role_that_speaks_again_keeps_its_face_and_a_named_role_reacts() -> None:
    plan = FacePlanner(ROLES, hold_ms=1200, linger_ms=1500)
    plan.spoken("host", 0, 1000, "Yay!", "happy", first=True, sentence=True, last=True)  # neutral planned at 2500
    again = plan.spoken("host", 1800, 2800, "Rex, what do you think?", "happy", first=True, sentence=True, last=False)
    assert ("host", 1800, "happy") in [(c.role, c.start_ms, c.expression) for c in again]  # the return is replaced
    assert plan.expressions["host"].at(2600)[1] == "happy"
    reacts = {(c.role, c.gesture or c.expression or c.look) for c in again if c.role == "rex"}
    assert reacts == {("rex", "nod"), ("rex", "thinking")}  # nods and thinks (it looks at Mika already)
    assert ("host", "rex") in {(c.role, c.look) for c in again}  # Mika speaks to Rex
    assert plan.named("小鹿你喜欢什么音乐？", "host") == ["xiaolu"] and plan.named("Rexy", "host") == []


def test_the_easing_is_monotonic_and_no_step_is_larger_than_the_curve_allows() -> None:
    ease = 250
    line = FaceTimeline(["host", "xiaolu", "rex"])
    line.add(FaceChanged(id="f1", run="r1", role="host", start_ms=1000, expression="happy", ease_ms=ease))
    blends = [line.face("host", t, speaking=True).blend for t in range(990, 1300)]
    assert blends[:10] == [1.0] * 10  # before: neutral, all of it
    eased = blends[10:]
    assert eased[0] == 0.0 and eased[-1] == 1.0 and all(b >= a for a, b in zip(eased, eased[1:], strict=False))
    assert max(b - a for a, b in zip(eased, eased[1:], strict=False)) <= 5 / ease + 1e-9  # the slope at its start
    assert line.face("host", 1000 + ease, True) == dataclasses.replace(line.face("host", 1000 + ease, True), blend=1.0)
    assert abs(ease_out(0.5) - 0.96875) < 1e-9


def test_a_listener_looks_at_the_speaker_within_300_ms_and_a_nod_passes() -> None:
    line = FaceTimeline(["host", "xiaolu", "rex"], seed=3)
    line.add(FaceChanged(id="f1", run="r1", role="host", start_ms=5000, look="rex", ease_ms=250))
    line.add(FaceChanged(id="f2", run="r1", role="xiaolu", start_ms=5000, look="rex", ease_ms=250))
    line.add(FaceChanged(id="f3", run="r1", role="rex", start_ms=5000, gesture="nod"))
    host, xiaolu = line.face("host", 5300, speaking=False), line.face("xiaolu", 5300, speaking=False)
    assert abs(host.gaze - 1.0) <= 0.13 and abs(xiaolu.gaze - 0.5) <= 0.13  # Rex is two slots right, one slot
    assert line.face("rex", 5000 + NOD_MS // 2, speaking=True).nod > 0.99
    assert line.face("rex", 5000 + NOD_MS, speaking=True).nod == 0.0


def test_lipsync_says_what_the_faces_do_as_it_places_speech() -> None:
    lip = ListFeed(LipsyncActor(), demo_run())
    out = lip.handle(said("u1", 0, "Thank you so much!", "happy"), at_ms=1000)
    out += lip.handle(said("u1", 1, "小鹿, do you like it?", "happy", last=True), at_ms=1100)
    changes = faces(out)
    assert {(c.role, c.expression) for c in changes if c.expression} >= {("host", "happy"), ("xiaolu", "thinking")}
    assert ("xiaolu", "nod") in {(c.role, c.gesture) for c in changes}
    assert all(c.start_ms >= 1000 and c.ease_ms in (0, 250) and c.reason for c in changes)
    assert all((c.causation or "").startswith("u1-") and c.utterance == "u1" for c in changes)
    # Deterministic: the same placements give the same events (re-execution checks them).
    again = ListFeed(LipsyncActor(), demo_run())
    replay = again.handle(said("u1", 0, "Thank you so much!", "happy"), at_ms=1000)
    replay += again.handle(said("u1", 1, "小鹿, do you like it?", "happy", last=True), at_ms=1100)
    assert faces(replay) == changes


def test_frames_drawn_during_a_happy_sentence_show_it_after_the_ease_and_redraws_match(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from actors.render import Redrawer, RenderActor
    from events.frame import FrameRendered
    from events.viseme import VisemeTrack
    from infra.settings import load_settings

    run = dataclasses.replace(demo_run("r1", resolution="360p"), duration_ms=4000)
    lip = ListFeed(LipsyncActor(), run)
    render = ListFeed(RenderActor(load_settings(environ={}, out_dir=tmp_path)), run)
    render.handle(run, at_ms=0)
    placed = lip.handle(said("u1", 0, "Thank you so much for the rocket!", "happy", dur=1800), at_ms=600)
    placed += lip.handle(said("u1", 1, "Rex, did you see that?", "happy", dur=1000, last=True), at_ms=700)
    render.handle(*placed, at_ms=700)  # as the renderer takes them in, before it draws their frames
    frames = [e for e in render.advance(60_000) if isinstance(e, FrameRendered)]  # its clock, to the end
    assert len(frames) == 100 and render.kernel.next_tick() is None  # 4 s at 25 fps, and no more
    host = {f.t_ms: next(m for m in f.faces if m.role == "host") for f in frames}
    during = [m for t, m in host.items() if 600 + 250 <= t < 2400]
    assert during and all(m.expression == "happy" and m.blend == 16 for m in during)  # all of it, once eased
    assert all(m.expression == "neutral" for t, m in host.items() if t < 600)
    easing = [m.blend for t, m in sorted(host.items()) if 600 <= t < 850]
    assert easing == sorted(easing) and easing[0] < 16  # eased in, never back
    rex = {f.t_ms: next(m for m in f.faces if m.role == "rex") for f in frames}
    assert rex[2400 + 40 * 2].nod > 0 and rex[2400 + 40 * 8].expression in ("thinking", "neutral")
    assert all(m.gaze < 0 for t, m in rex.items() if 600 + 300 <= t < 2400)  # Rex looks left, at Mika
    # Redrawn from what each frame recorded (export, --verify): the same pictures.
    tracks = {e.id: e for e in placed if isinstance(e, VisemeTrack)}
    redraw = Redrawer(run, load_settings(environ={}), faces=[e for e in placed if isinstance(e, FaceChanged)])
    for frame in frames[::7]:
        again = redraw.draw(frame.n, tracks.get(frame.track or ""), frame.resolution, frame.faces)
        assert again.jpeg == frame.jpeg


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 6])
def test_one_to_six_roles_fit_the_stage_with_legible_tags_at_360p(count: int) -> None:
    from actors.backends.protocols import RoleLook, RoleState
    from actors.backends.render_torch import StageRenderer
    from actors.backends.stage_art import find_font_file, fit_text, load_font

    names = ["Mika", "小鹿", "Rex", "Dr. Bolt", "Willow", "主持人"][:count]
    looks = [RoleLook(f"r{k}", name, "#457b9d", ("round", "square", "tall")[k % 3]) for k, name in enumerate(names)]
    stage = StageRenderer(looks, "360p", seed=1)
    scene = stage._scene  # noqa: SLF001 - the layout is what is checked
    tags = [slot[3] for slot in scene.slots]
    tiles = [slot[0] for slot in scene.slots]
    assert all(0 <= t[0] < t[2] <= 640 and 0 <= t[1] < t[3] <= 360 for t in tags + tiles)
    assert all(a[2] <= b[0] for a, b in zip(tags, tags[1:], strict=False))  # tags side by side, never overlapping
    assert all(a[2] <= b[0] + 2 for a, b in zip(tiles, tiles[1:], strict=False))
    assert getattr(scene.font, "size", 0) >= 15  # the subtitles' letters: 15 px at 360p
    tag_font = load_font(find_font_file(), round(0.03 * 360))  # the tags' (as the stage loads it)
    for (x0, y0, x1, y1), name in zip(tags, names, strict=True):
        assert y1 - y0 >= 19 and fit_text(name, tag_font, (x1 - x0) - (y1 - y0), 1) == [name]  # whole names
    picture = stage.draw(0, [RoleState(look.role, "aa", k == 0, "happy", gaze=0.5) for k, look in enumerate(looks)],
                         "字幕 subtitles stay legible")
    assert tuple(picture.shape) == (360, 640, 3)


def test_a_reply_whose_rest_is_dropped_still_lets_its_face_go_back_to_neutral() -> None:
    from events.utterance import UtteranceDropped

    lip = ListFeed(LipsyncActor(), demo_run())
    out = lip.handle(said("u1", 0, "I am so happy!", "happy", dur=1000), at_ms=1000)
    assert ("host", 1000, "happy") in [(c.role, c.start_ms, c.expression) for c in faces(out)]
    rest = UtteranceDropped(id="d1", run="r1", role="host", utterance="u1", from_seq=1, reason="writer failed: x")
    back = faces(lip.handle(rest, at_ms=1200))
    assert [(c.role, c.start_ms, c.expression) for c in back] == [("host", 2000 + 1500, "neutral")]
    assert back[0].causation == "d1" and back[0].reason == "Mika finished"
