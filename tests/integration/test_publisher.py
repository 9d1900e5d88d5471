"""The runtime's JetStream publisher: acks as futures on one reply subscription, a refusal or a
subject no stream takes failing its future at once, and its room bounded."""

from __future__ import annotations

import asyncio

import pytest
from nats.js import JetStreamContext
from nats.js.api import StreamConfig
from nats.js.errors import APIError, NoStreamResponseError

from infra.bus import AsyncPublisher, publish_raw


async def test_acks_come_back_in_order_and_a_repeated_id_is_a_duplicate(js: JetStreamContext) -> None:
    await js.add_stream(StreamConfig(name="PUBACKS", subjects=["pubacks.>"]))
    try:
        futures = [await publish_raw(js, "pubacks.a", f"m{i}".encode(), f"id{i}") for i in range(200)]
        acks = await asyncio.wait_for(asyncio.gather(*futures), 10)
        assert [a.seq for a in acks] == list(range(1, 201))
        assert {a.stream for a in acks} == {"PUBACKS"} and not any(a.duplicate for a in acks)
        again = await asyncio.wait_for(await publish_raw(js, "pubacks.a", b"m0", "id0"), 10)
        assert again.duplicate and again.seq == 1
    finally:
        await js.delete_stream("PUBACKS")


async def test_a_refused_message_and_a_subject_without_a_stream_fail_their_futures(js: JetStreamContext) -> None:
    await js.add_stream(StreamConfig(name="PUBSMALL", subjects=["pubsmall.>"], max_msg_size=256))
    try:
        refused = await publish_raw(js, "pubsmall.a", b"x" * 1000, "big")
        with pytest.raises(APIError, match="maximum"):  # nats-py's own publish_async never answers this one
            await asyncio.wait_for(refused, 5)
        nowhere = await publish_raw(js, "no.stream.here", b"x", "lost")
        with pytest.raises(NoStreamResponseError):
            await asyncio.wait_for(nowhere, 5)
        assert (await asyncio.wait_for(await publish_raw(js, "pubsmall.a", b"ok", "small"), 5)).seq == 1
    finally:
        await js.delete_stream("PUBSMALL")


async def test_publishes_given_up_on_give_their_room_back(js: JetStreamContext) -> None:
    await js.add_stream(StreamConfig(name="PUBROOM", subjects=["pubroom.>"]))
    try:
        publisher = AsyncPublisher(js._nc, max_pending=2)  # noqa: SLF001 - the test's own connection
        first = await publisher.publish("pubroom.a", b"1", {"Nats-Msg-Id": "r1"})
        second = await publisher.publish("pubroom.a", b"2", {"Nats-Msg-Id": "r2"})
        first.cancel()  # given up on before its ack came (as ``acks`` does after its timeout)
        third = await asyncio.wait_for(publisher.publish("pubroom.a", b"3", {"Nats-Msg-Id": "r3"}), 5)
        assert (await asyncio.wait_for(second, 5)).seq == 2
        assert (await asyncio.wait_for(third, 5)).seq == 3
        blocked = asyncio.ensure_future(publisher.publish("pubroom.a", b"4", {"Nats-Msg-Id": "r4"}))
        fourth = await asyncio.wait_for(blocked, 5)  # room again: the acked ones gave theirs back
        assert (await asyncio.wait_for(fourth, 5)).seq == 4
    finally:
        await js.delete_stream("PUBROOM")
