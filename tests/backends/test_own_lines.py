"""The scripted writer's lines of the show's own: one sentence, in the role's language, never
the same line twice within an hour of show."""

from __future__ import annotations

from actors.backends.llm_scripted import ScriptedLLM
from actors.backends.protocols import Persona, Prompt
from app.shows import load_show


def _persona(role_id: str) -> Persona:
    role = load_show().role(role_id)
    assert role is not None
    return Persona(role.id, role.name, role.persona, role.language, role.keywords)


def _prompt(kind: str, turn: int, **kw: object) -> Prompt:
    segment = load_show().segments[1]
    return Prompt(cue_id=f"c{turn}", user="", text=segment.brief, seed=7, kind=kind, segment=segment.title,
                  brief=segment.brief, topics=segment.topics, turn=turn, **kw)  # type: ignore[arg-type]


def test_no_line_repeats_within_an_hour_of_show() -> None:
    """An hour of the demo show without comments, as the director runs it: every line the
    scripted writer says for it (each follow-up answering the line it follows) is new."""
    import dataclasses

    from actors.director import Director
    from actors.runtime.harness import Harness
    from events.cue import CueIssued
    from infra.settings import load_settings
    from tests.showkit import demo_run

    run = dataclasses.replace(demo_run(), duration_ms=3_600_000)
    harness = Harness(Director(load_settings(environ={})), run)
    harness.feed(run)
    harness.advance(run.duration_ms)
    show, writer = load_show(), ScriptedLLM()
    written: dict[str, str] = {}
    said: dict[str, str] = {}
    for cue in (e.event for e in harness.out if isinstance(e.event, CueIssued)):
        if cue.verbatim:
            continue
        segment = next(g for g in show.rundown if g.title == cue.segment)
        addressee = show.role(cue.addressee) if cue.addressee else None
        prompt = Prompt(cue_id=cue.id, user="", text=cue.text, seed=7, kind=cue.reason, segment=segment.title,
                        brief=segment.brief, topics=segment.topics, follows=written.get(cue.follows, ""),
                        addressee=addressee.name if addressee else "", turn=cue.turn)
        [line] = list(writer.stream(_persona(cue.role or ""), prompt))
        assert line not in said, (line, said[line], cue.id)
        said[line] = written[cue.id] = cue.id
    assert len(said) > 1000


def test_a_line_is_one_sentence_in_the_role_s_language_and_fills_its_slots() -> None:
    writer = ScriptedLLM()
    for role in ("host", "xiaolu", "rex"):
        for turn in range(60):
            kind = ("brief", "follow_up", "invitation")[turn % 3]
            [line] = list(writer.stream(_persona(role), _prompt(kind, turn, addressee="Rex", follows="retro games")))
            assert "{" not in line and line[-1] in ".!?。！？", line
            cjk = any("\u4e00" <= ch <= "\u9fff" for ch in line)
            assert cjk == (role == "xiaolu"), line
            if kind == "follow_up":
                assert "Rex" in line
            assert line.last is True  # type: ignore[attr-defined]


def test_model_writers_are_asked_for_the_show_s_own_line_with_what_it_builds_on() -> None:
    from actors.backends.text import chat_messages

    system, user = chat_messages(_persona("rex"), _prompt("follow_up", 0, addressee="Mika", follows="I love co-op games."))
    assert "Game night picks" in system["content"] and "co-op" in user["content"] and "Mika" in user["content"]
    system, user = chat_messages(_persona("xiaolu"), _prompt("invitation", 0))
    assert "请用中文回答" in user["content"] and "Mandarin" in system["content"] and "Invite the viewers" in user["content"]
