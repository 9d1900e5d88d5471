"""Codec, registry and validation of events."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import events
from events import codec
from events.audio import AudioChunk, PhonemeMark
from events.base import Event, EventRegistry, UnknownEventType, registry
from events.danmaku import DanmakuReceived
from events.errors import DecodeError
from events.frame import FrameRendered, SpeakingMark
from events.subjects import subject_for


def test_every_family_registers_stable_type_strings() -> None:
    types = registry.types()
    for family in ("run", "role", "danmaku", "cue", "utterance", "audio", "viseme", "frame", "qos", "error"):
        assert any(t.startswith(family + ".") for t in types), family
    assert all("." in t and not t.startswith(("actors", "events")) for t in types)


def test_binary_payload_travels_raw_not_base64() -> None:
    pcm = bytes(range(256)) * 40
    chunk = AudioChunk(
        id="a1", run="r1", role="host", utterance="u", seq=0, sample_rate=22050, offset_ms=0,
        duration_ms=232, text="hi", phonemes=(PhonemeMark("h", 0, 10),), pcm=pcm,
    )
    data = codec.encode(chunk)
    assert pcm in data  # the bytes are there verbatim
    assert len(data) < len(pcm) + 400
    assert codec.decode(data) == chunk


def test_frames_round_trip_with_nested_records() -> None:
    frame = FrameRendered(
        id="f", run="r", n=3, width=1280, height=720, resolution="720p",
        speaking=(SpeakingMark("host", "d1", "aa"),), jpeg=b"\xff\xd8jpeg",
    )
    assert codec.decode(codec.encode(frame)) == frame


def test_producer_json_needs_only_type_and_text() -> None:
    doc = b'{"type":"danmaku.received","payload":{"text":"hi","user":"al"},"extra":1}'
    event = codec.decode(doc, {"id": "x", "run": "r1", "at_ms": 5})
    assert isinstance(event, DanmakuReceived)
    assert (event.text, event.user, event.run, event.at_ms) == ("hi", "al", "r1", 5)
    assert subject_for(event) == "troupe.r1.danmaku.received"


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (b'{"type":"danmaku.received","id":"x","run":"r","payload":{"text":5}}', "payload.text"),
        (b'{"type":"danmaku.received","id":"x","run":"r","payload":{}}', "payload.text"),
        (b'{"type":"danmaku.received","id":7,"run":"r","payload":{"text":"a"}}', "id"),
        (b'{"type":"danmaku.received","id":"x","run":"r","v":9,"payload":{"text":"a"}}', "v"),
        (b'{"type":"danmaku.received","id":"x","run":"r","payload":[]}', "payload"),
        (b'{"id":"x"}', "type"),
    ],
)
def test_decoding_errors_name_the_field(doc: bytes, field: str) -> None:
    with pytest.raises(DecodeError) as info:
        codec.decode(doc)
    assert info.value.field == field


def test_unknown_types_and_garbage_are_rejected() -> None:
    with pytest.raises(UnknownEventType):
        codec.decode(b'{"type":"events.danmaku.DanmakuReceived","id":"x","run":"r"}')
    for garbage in (b"\xff\xfe\x00", b"[1,2]", b"", b"\x00TRP\x00\x00\xff\xff{}"):
        with pytest.raises(DecodeError):
            codec.decode(garbage)


def test_old_payload_versions_are_upcast() -> None:
    from dataclasses import dataclass

    local = EventRegistry()

    @local.register
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Greeting(Event):
        type = "test.greeting"
        v = 2
        upcasters = {1: lambda p: {"text": p.pop("msg"), **p}}
        text: str

    old = orjson.dumps({"type": "test.greeting", "v": 1, "id": "g", "run": "r", "payload": {"msg": "hi"}})
    original = codec.registry
    codec.registry = local  # type: ignore[attr-defined]
    try:
        assert codec.decode(old) == Greeting(id="g", run="r", text="hi")
    finally:
        codec.registry = original  # type: ignore[attr-defined]


@given(st.text(max_size=300), st.text(max_size=40))
def test_any_danmaku_text_round_trips(text: str, user: str) -> None:
    event = DanmakuReceived(id="d", run="r", text=text, user=user)
    try:
        data = codec.encode(event)
    except TypeError:
        return  # lone surrogates cannot be encoded as UTF-8: the producer could not send them either
    assert codec.decode(data) == event


def test_package_exports() -> None:
    assert events.decode is codec.decode


def test_a_moderator_line_has_a_subject_of_its_own_and_comes_only_there() -> None:
    from events.subjects import misplaced

    line = DanmakuReceived(id="m1", run="r1", text="wrap up", kind="moderator")
    comment = DanmakuReceived(id="c1", run="r1", text="hi")
    assert subject_for(line) == "troupe.r1.danmaku.received.moderator"
    assert subject_for(comment) == "troupe.r1.danmaku.received"
    assert misplaced(line, "troupe.r1.danmaku.received.moderator") is None
    assert misplaced(comment, "troupe.r1.danmaku.received") is None
    reason = misplaced(line, "troupe.r1.danmaku.received")
    assert reason is not None and "moderator" in reason


def test_a_nats_url_in_a_log_line_has_no_password() -> None:
    from infra.bus import masked_url

    assert masked_url("nats://llm:s3cret@nats:4222") == "nats://llm:***@nats:4222"
    assert masked_url("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"
