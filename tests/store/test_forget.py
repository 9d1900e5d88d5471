"""Forgetting a viewer, on SQLite and PostgreSQL alike: the read model's rows go, every stored
event of their chains is blanked where it stands (nothing of the text is left in any table), the
other viewers are untouched, a rebuild does not bring them back, an event of a forgotten chain
recorded late is blanked when the projector comes to it, and a viewer's own ``!forget`` (their
recall says so) forgets them at the projector."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, MetaData, select

from events import codec
from events.audio import AudioChunk
from events.base import Event, registry
from events.utterance import UtteranceChunk, UtteranceCompleted
from events.viewer import ViewerRecalled, redact
from store.database import open_engine
from store.forget import forget
from store.recorder import EventWriter
from store.schema import events, redactions
from store.viewers import Projector, profile, snapshot
from tests.store.test_contract import recorded
from tests.store.test_viewers import T0, cue, noted, said, started

SECRETS = ("Berlin", "alice", "twitch:42", "Miso")


def a_viewer_and_another() -> list[Event]:
    d1 = said("s1", 1, "hi all, I'm from Berlin! my cat is called Miso")
    c1 = cue(d1, "host")
    reply = UtteranceChunk(id=c1.derive("chunk1"), run="s1", role="host", causation=c1.id, correlation=d1.id,
                           at_ms=T0, utterance=c1.id, seq=1, text="Welcome, alice! How is Berlin?", language="en")
    audio = AudioChunk(id=reply.derive("audio"), run="s1", role="host", causation=reply.id, correlation=d1.id,
                       at_ms=T0, utterance=c1.id, seq=1, sample_rate=16000, offset_ms=0, duration_ms=10,
                       text=reply.text, phonemes=(), pcm=b"\x01\x02" * 80)
    done = UtteranceCompleted(id=c1.derive("done"), run="s1", role="host", causation=c1.id, correlation=d1.id,
                              at_ms=T0, utterance=c1.id, text=reply.text, chunks=1, backend="scripted")
    recall = ViewerRecalled(id=d1.derive("recalled"), run="s1", causation=d1.id, correlation=d1.id, at_ms=T0,
                            viewer=d1.viewer, danmaku=d1.id, facts=("home||Berlin", "pet|cat|Miso"),
                            bears=("home||Berlin",), topics=("berlin",))
    bob = said("s1", 2, "I'm from Oslo, my dog is called Rex", viewer="twitch:7", user="bob")
    return [started("s1"), d1, recall, noted(d1, "home", "Berlin"), noted(d1, "pet", "Miso", "cat"), c1, reply, audio,
            done, bob, noted(bob, "home", "Oslo"), cue(bob, "guest")]


def write(engine: Engine, evs: list[Event]) -> None:
    """As a recorder writes them: several transactions, each event with its stream sequence."""
    writer = EventWriter(engine)
    for start in range(0, len(evs), 4):
        writer.append([recorded(e, stream_seq=_seq(e)) for e in evs[start:start + 4]])


_SEQS: dict[str, int] = {}


def _seq(event: Event) -> int:
    return _SEQS.setdefault(event.id, len(_SEQS) + 1)


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    engine = open_engine(store_url)
    yield engine
    engine.dispose()


def everything(engine: Engine, where: list[str] | None = None) -> bytes:
    """Every value of every row of every table, as bytes: where the tests look for the text.
    ``where`` gets each row, as text, for a failure to show where something was found."""
    meta = MetaData()
    meta.reflect(engine)
    out = bytearray()
    with engine.connect() as conn:
        for table in meta.sorted_tables:
            for row in conn.execute(select(table)):
                values = b"\x00".join(bytes(v) if isinstance(v, bytes | memoryview) else str(v).encode() for v in row)
                out += values + b"\x00"
                if where is not None:
                    where.append(f"{table.name}: {values!r}")
    return bytes(out)


def test_a_forgotten_viewer_leaves_nothing_of_their_text_in_any_table(engine: Engine) -> None:
    write(engine, a_viewer_and_another())
    Projector(engine).catch_up(now_ms=T0)
    assert profile(engine, "twitch:42") is not None
    assert all(s.encode() in everything(engine) for s in SECRETS)
    with engine.connect() as conn:
        count = len(conn.execute(select(events.c.pos)).all())

    done = forget(engine, "twitch:42")

    assert done.known and done.chains == 1 and done.events == 8  # the comment and its whole chain
    assert len(done.messages) == 8 and all(stream.startswith("TROUPE_") for stream, _ in done.messages)
    dump = everything(engine)
    for secret in SECRETS:
        assert secret.encode() not in dump, secret
    assert profile(engine, "twitch:42") is None
    # The other viewer is untouched, and the store keeps every event, in place, still decodable.
    bob = profile(engine, "twitch:7")
    assert bob is not None and [f["value"] for f in bob.facts] == ["Oslo"] and b"Oslo" in dump
    with engine.connect() as conn:
        rows = conn.execute(select(events.c.id, events.c.body, events.c.redaction).order_by(events.c.pos)).all()
        [(by, n)] = conn.execute(select(redactions.c.requested_by, redactions.c.events)).all()
    assert len(rows) == count and (by, n) == ("cli", 8)
    blanked = [codec.decode(bytes(body)) for _, body, redaction in rows if redaction == done.redaction]
    assert len(blanked) == 8 and all(redact(e) == e for e in blanked)
    audio = next(e for e in blanked if isinstance(e, AudioChunk))
    assert audio.pcm == b"\x01\x02" * 80 and audio.text == ""  # the voice kept, its text not
    # A rebuild from the blanked store does not bring them back; forgetting again finds nothing.
    Projector(engine).rebuild(now_ms=T0)
    assert profile(engine, "twitch:42") is None and profile(engine, "twitch:7") is not None
    again = forget(engine, "twitch:42")
    assert (again.known, again.chains, again.events) == (False, 0, 0)


def test_an_event_of_a_forgotten_chain_recorded_late_is_blanked_by_the_projector(engine: Engine) -> None:
    evs = a_viewer_and_another()
    late = next(e for e in evs if isinstance(e, UtteranceCompleted))
    write(engine, [e for e in evs if e is not late])
    Projector(engine).catch_up(now_ms=T0)
    forget(engine, "twitch:42")
    write(engine, [late])  # the reply was still being spoken
    assert b"How is Berlin" in everything(engine)
    progress = Projector(engine).catch_up(now_ms=T0)
    assert len(progress.messages) == 1
    assert not any(s.encode() in everything(engine) for s in SECRETS)
    with engine.connect() as conn:
        assert conn.execute(select(redactions.c.events)).scalar() == 8  # 7 at the forgetting, 1 late


def test_a_viewers_own_forget_is_carried_out_by_the_projector(engine: Engine) -> None:
    evs = a_viewer_and_another()
    ask = said("s1", 3, "!forget")
    recall = ViewerRecalled(id=ask.derive("recalled"), run="s1", causation=ask.id, correlation=ask.id, at_ms=T0,
                            viewer=ask.viewer, danmaku=ask.id, forget=True, reason="the viewer asked to be forgotten")
    after = said("s1", 4, "I'm from Lyon now", viewer="twitch:9", user="carol")
    write(engine, [*evs, ask, recall, after, noted(after, "home", "Lyon")])
    progress = Projector(engine, batch=1000).catch_up(now_ms=T0)
    assert progress.forgotten == 1 and len(progress.messages) == 10
    assert not any(s.encode() in everything(engine) for s in SECRETS)
    assert b"!forget" not in everything(engine)
    assert profile(engine, "twitch:42") is None and profile(engine, "twitch:9") is not None  # read after the stop
    with engine.connect() as conn:
        assert conn.execute(select(redactions.c.requested_by)).scalar() == "chat"
    once = snapshot(engine)
    Projector(engine).rebuild(now_ms=T0)
    assert snapshot(engine) == once


def test_every_event_type_with_personal_fields_names_fields_it_has() -> None:
    for type_ in registry.types():
        cls = registry.lookup(type_)
        assert set(cls.personal) <= set(registry.field_types(type_)), type_
