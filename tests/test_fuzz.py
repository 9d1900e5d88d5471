"""The codec and the handlers under random input (hypothesis): bytes either decode to an event that
encodes back to itself or fail with a DecodeError (which the runtime dead-letters with the bytes);
decodable garbage never breaks an actor: the director still answers the next comment, the
lip-sync still places the next speech."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.director import Director
from actors.kernel import ListFeed
from actors.lipsync import LipsyncActor
from events import codec
from events.audio import AudioChunk, PhonemeMark
from events.base import Event
from events.cue import CueIssued
from events.danmaku import DanmakuReceived
from events.errors import DecodeError
from infra.settings import load_settings
from tests.showkit import demo_run

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)

SAMPLES: list[Event] = [
    demo_run("f1"),
    DanmakuReceived(id="d1", run="f1", text="hello @rex", user="alice", t_ms=100),
    CueIssued(id="c1", run="f1", role="rex", causation="d1", correlation="d1", t_ms=200, text="hello @rex",
              user="alice", danmaku=("d1",), routed_by="mention", priority=2.0, deadline_ms=8000, seq=1),
    AudioChunk(id="a1", run="f1", role="rex", causation="u1", correlation="c1", t_ms=300, utterance="c1",
               seq=0, sample_rate=16000, offset_ms=0, duration_ms=50, text="hi", phonemes=(PhonemeMark("h", 0, 20),
               PhonemeMark("aI", 20, 30)), pcm=b"\x00\x01" * 800, last=True),
]


def decoded_or_refused(data: bytes) -> Event | None:
    """The event the bytes hold, or None when they are refused; anything else fails the test."""
    try:
        event = codec.decode(data)
    except DecodeError:
        return None
    again = codec.decode(codec.encode(event))
    assert again == event
    return event


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=4096))
def test_random_bytes_decode_or_are_refused(data: bytes) -> None:
    decoded_or_refused(data)
    decoded_or_refused(codec.MAGIC + data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SAMPLES), st.data())
def test_an_event_with_a_field_changed_or_removed_decodes_or_is_refused(sample: Event, data: st.DataObject) -> None:
    body, blob = codec.split(codec.encode(sample))
    doc: dict[str, Any] = orjson.loads(body)
    where = data.draw(st.sampled_from(["envelope", "payload"]))
    target = doc if where == "envelope" or not doc["payload"] else doc["payload"]
    key = data.draw(st.sampled_from(sorted(target)))
    if data.draw(st.booleans()):
        target[key] = data.draw(JSON)
    else:
        del target[key]
    raw = json.dumps(doc).encode()  # what any producer may send: integers past 64 bits, Infinity
    decoded_or_refused(codec.frame(raw, blob) if blob is not None else raw)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.text(max_size=300), st.text(max_size=40), st.none() | st.text(max_size=12),
                          st.sampled_from(["comment", "gift", "superchat", "question", "", "??"])),
                min_size=1, max_size=8))
def test_the_director_answers_every_comment_whatever_it_holds(comments: list[tuple[str, str, str | None, str]]) -> None:
    feed = ListFeed(Director(load_settings(environ={})), demo_run("f2"))
    feed.feed(demo_run("f2"), at_ms=0)
    for i, (text, user, to, kind) in enumerate(comments):
        event = DanmakuReceived(id=f"z{i}", run="f2", text=text, user=user, to=to, kind=kind, t_ms=1000 + i)
        try:
            codec.encode(event)
        except TypeError:
            continue  # lone surrogates: no producer can send them
        out = feed.feed(event, at_ms=1000 + i * 10)
        for e in out:  # whatever it emits goes on the bus as it is
            assert codec.decode(codec.encode(e)) == e
    # Every comment got its one answer (a cue, a merge, a rejection or a skip) in the end.
    feed.advance(120_000)
    answered = {e.event.causation for e in feed.out if e.event.type.startswith(("cue.issued", "cue.merged",
                                                                                    "danmaku."))
                and e.event.answers}  # a danmaku.waiting is no answer
    sent = {f"z{i}" for i, c in enumerate(comments) if _encodable(c)}
    assert sent <= answered, sent - answered
    # ... and it still answers a plain one.
    out = feed.feed(DanmakuReceived(id="plain", run="f2", text="hello @rex", user="bob", t_ms=130_000),
                       at_ms=130_000)
    feed.advance(200_000)
    assert any(e.event.causation == "plain" and e.event.answers for e in feed.out), out


def _encodable(comment: tuple[str, str, str | None, str]) -> bool:
    try:
        orjson.dumps(list(comment))
    except TypeError:
        return False
    return True


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(-(2**31), 2**31), st.integers(-(2**31), 2**31), st.binary(max_size=64),
                          st.integers(1, 96000), st.text(max_size=30)), max_size=6))
def test_lipsync_takes_odd_audio_and_still_places_the_next_speech(parts: list[tuple[int, int, bytes, int, str]]) -> None:
    """Whole one-chunk replies with odd times, lengths, rates, sound and text: each is placed or
    refused with a reason, and the speech after them is placed."""
    feed = ListFeed(LipsyncActor(), demo_run("f3"))
    feed.feed(demo_run("f3"), at_ms=0)
    for i, (t_ms, duration_ms, pcm, rate, text) in enumerate(parts):
        odd = AudioChunk(id=f"odd{i}", run="f3", role="rex", causation=f"u{i}", correlation=f"c{i}", t_ms=t_ms,
                         utterance=f"c{i}", seq=0, sample_rate=rate, offset_ms=0, duration_ms=duration_ms,
                         text=text, phonemes=(PhonemeMark("a", 0, duration_ms),), pcm=pcm, last=True)
        feed.feed(odd, at_ms=100 + i)
    good = AudioChunk(id="good", run="f3", role="xiaolu", causation="u", correlation="good", t_ms=2000,
                      utterance="good", seq=0, sample_rate=16000, offset_ms=0, duration_ms=1000, text="hello",
                      phonemes=(PhonemeMark("h", 0, 300), PhonemeMark("@", 300, 700)), pcm=b"\x10\x00" * 16000,
                      last=True)
    feed.feed(good, at_ms=2000)
    feed.advance(2**31 + 10_000)
    assert any(e.event.type == "viseme.track" and getattr(e.event, "utterance", None) == "good" for e in feed.out)
