"""The scripted writer's lines of the show's own: the show's material said as written, follow-ups
that name what they answer, questions to the chat; in the role's language, none twice in a quiet show."""

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


def _quiet_show(duration_ms: int) -> list[tuple[object, str, str]]:
    """A quiet demo show as the director runs it, each of its own lines written by the scripted
    writer as the llm actor asks for it: (cue, line, source)."""
    import dataclasses

    from actors.director import Director
    from actors.kernel import ListFeed
    from events.cue import CueIssued
    from infra.settings import load_settings
    from tests.showkit import demo_run

    run = dataclasses.replace(demo_run(), duration_ms=duration_ms)
    feed = ListFeed(Director(load_settings(environ={})), run)
    feed.feed(run)
    feed.advance(run.duration_ms)
    show, writer = load_show(), ScriptedLLM()
    written: dict[str, str] = {}
    out = []
    for cue in (e.event for e in feed.out if isinstance(e.event, CueIssued)):
        if cue.verbatim:
            continue
        segment = next(g for g in show.rundown if g.title == cue.segment)
        role, addressee = show.role(cue.role or ""), show.role(cue.addressee) if cue.addressee else None
        assert role is not None
        prompt = Prompt(cue_id=cue.id, user="", text=cue.text, seed=7, kind=cue.reason, segment=segment.title,
                        brief=segment.brief, topics=segment.topics, follows=written.get(cue.follows, ""),
                        addressee=addressee.name if addressee else "", turn=cue.turn,
                        points=segment.points, material=role.material, point=cue.point,
                        cast=tuple(r.name for r in show.roles))
        [line] = list(writer.stream(_persona(cue.role or ""), prompt))
        written[cue.id] = str(line)
        out.append((cue, str(line), line.source))  # type: ignore[attr-defined]
    return out


def test_a_quiet_show_says_the_show_s_material_and_repeats_nothing() -> None:
    # Five minutes as the director plans them from its estimates (2.6 s a line: more lines than a
    # real show says, whose lines of material run longer); bench.show measures ten real minutes.
    lines = _quiet_show(300_000)
    assert len(lines) > 90
    said = [line for _, line, _ in lines]
    assert len(set(said)) == len(said), [x for x in said if said.count(x) > 1][:3]
    show = load_show()
    material = {m for r in show.roles for m in r.material} | {p for g in show.segments for p in g.points}
    briefs = [(line, source) for cue, line, source in lines if cue.reason == "brief"]  # type: ignore[attr-defined]
    assert briefs and all(source == "material" and line in material for line, source in briefs)


def test_a_follow_up_names_something_from_the_line_it_follows() -> None:
    lines = _quiet_show(300_000)
    by_id = {cue.id: line for cue, line, _ in lines}  # type: ignore[attr-defined]
    follows = [(by_id[cue.follows], line) for cue, line, _ in lines  # type: ignore[attr-defined]
               if cue.reason == "follow_up" and cue.follows in by_id]  # type: ignore[attr-defined]
    assert len(follows) >= 10
    named = 0
    for before, line in follows:
        words = {w.strip(".,!?").casefold() for w in line.split() if len(w.strip(".,!?")) >= 4}
        named += any(w in before.casefold() for w in words - {"mika", "that", "with", "tell", "more", "about",
                                                              "later", "sounds", "plan", "going", "list"})
    assert named >= 0.9 * len(follows), (named, len(follows), follows[:4])


def test_without_material_a_point_on_the_brief_is_a_question_to_the_chat() -> None:
    writer = ScriptedLLM()
    for turn in range(12):
        [line] = list(writer.stream(_persona("host"), _prompt("brief", turn)))
        assert line.endswith(("?", "!")) and line.source == "template", line  # type: ignore[attr-defined]


def test_model_writers_are_asked_for_the_show_s_own_line_with_what_it_builds_on() -> None:
    from actors.backends.text import chat_messages

    system, user = chat_messages(_persona("rex"), _prompt("follow_up", 0, addressee="Mika", follows="I love co-op games."))
    assert "Game night picks" in system["content"] and "co-op" in user["content"] and "Mika" in user["content"]
    system, user = chat_messages(_persona("xiaolu"), _prompt("invitation", 0))
    assert "请用中文回答" in user["content"] and "Mandarin" in system["content"] and "Invite the viewers" in user["content"]


def test_an_invitation_with_no_topic_asks_a_question_that_needs_none() -> None:
    """A segment without topics never gets "What's the best this you ever had, chat?"."""
    from actors.backends.own_lines import OwnLine, own_line

    for language, filler in (("en", " this "), ("zh", "这个")):
        lines = {own_line(OwnLine("invitation", language, "mika", "Mika", turn, ()))[0] for turn in range(12)}
        assert len(lines) >= 5 and not any(filler in f" {line} " for line in lines), lines
        assert all("{" not in line for line in lines)
