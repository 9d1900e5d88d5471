"""Talking to a running show: send danmaku to a run and collect the director's answer to each."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from events import codec
from events.base import Event
from events.cue import ControlApplied, CueIssued, CueMerged
from events.danmaku import DanmakuReceived, DanmakuRejected, DanmakuSkipped, viewer_problem
from events.errors import ConfigError, DecodeError
from events.subjects import family_filter, stream_name
from infra.bus import publish_event

_ANSWERS = (CueIssued, CueMerged, DanmakuRejected, DanmakuSkipped, ControlApplied)


class DanmakuFileError(DecodeError):
    """A danmaku file cannot be read or has a bad line (``file:line: field: reason``)."""


class RunError(ConfigError):
    """The run to talk to is not there: unknown on this server, or ended."""


class UnknownRunError(RunError):
    """No ``run.started`` for the run on this server."""


class RunEndedError(RunError):
    """The run has ended."""


def read_danmaku_file(path: Path, run: str, now_ms: int) -> list[DanmakuReceived]:
    """Every danmaku of a JSON-lines file, all validated before any is sent.

    A line without its own ``id`` gets one derived from the file's content and the line
    number, so that sending the same file again sends the same ids, which JetStream drops
    as duplicates: nothing is answered twice.
    """
    try:
        content = path.read_bytes()
        lines = content.decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DanmakuFileError(f"cannot read {path}: {exc}") from None
    digest = hashlib.sha256(content).hexdigest()[:12]
    out: list[DanmakuReceived] = []
    first_line: dict[str, int] = {}
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = _file_line(line, f"f{digest}-{no}", run, now_ms)
            if event.id in first_line:
                raise DecodeError(f"{event.id!r} is already used on line {first_line[event.id]}", "id")
        except (orjson.JSONDecodeError, DecodeError) as exc:
            raise DanmakuFileError(f"{path}:{no}: {exc}") from None
        first_line[event.id] = no
        out.append(event)
    if not out:
        raise DanmakuFileError(f"{path}: no danmaku in the file")
    return out


def _file_line(line: str, default_id: str, run: str, now_ms: int) -> DanmakuReceived:
    """One line, checked by the codec exactly as the director will decode it."""
    return danmaku_from(orjson.loads(line), default_id, run, now_ms)


def danmaku_from(doc: object, default_id: str, run: str, now_ms: int) -> DanmakuReceived:
    """A producer's danmaku object (``user``, ``text``, ``to``, ``kind``, ``id``, and where a
    platform identifies the viewer ``viewer``, ``platform``, ``value``, ``currency``, ``badges``),
    checked by the codec exactly as the director will decode it; DecodeError says what is wrong."""
    if not isinstance(doc, dict):
        raise DecodeError(f"expected a JSON object, got {type(doc).__name__}")
    doc = dict(doc)
    own_id = doc.pop("id", None)
    if own_id == "":
        raise DecodeError("must not be empty", "id")
    wrapped = {"type": "danmaku.received", "payload": doc, **({"id": own_id} if own_id is not None else {})}
    event = codec.decode(orjson.dumps(wrapped), {"id": default_id, "run": run, "at_ms": now_ms})
    assert isinstance(event, DanmakuReceived)  # the type was set just above
    problem = viewer_problem(event)  # the director would turn it away: said before anything is sent
    if problem is not None:
        raise DecodeError(problem)
    return event


async def check_run(js: JetStreamContext, run: str) -> int:
    """The run's start (wall ms); RunError unless the run has started and not ended."""
    stream = stream_name("run")
    try:
        msg = await js.get_last_msg(stream, f"troupe.{run}.run.started")
    except NotFoundError:
        raise UnknownRunError(f"no run {run} on this NATS server") from None
    started = _started_at(msg.data)
    try:
        await js.get_last_msg(stream, f"troupe.{run}.run.ended")
    except NotFoundError:
        return started
    raise RunEndedError(f"run {run} has ended")


def _started_at(data: bytes | None) -> int:
    try:
        event = codec.decode(data or b"")
    except DecodeError:
        return 0
    return getattr(event, "started_at_ms", 0)


@dataclass(slots=True)
class Sent:
    """One danmaku sent, and what became of it."""

    id: str
    duplicate: bool = False  # JetStream already had this id: dropped, not answered again
    answer: Event | None = None

    def to_dict(self) -> dict[str, object]:
        """The outcome as one JSON object (``outcome`` null: no answer within the wait)."""
        a = self.answer
        if self.duplicate:
            return {"id": self.id, "outcome": "duplicate"}
        if isinstance(a, CueIssued):
            return {"id": self.id, "outcome": "cue", "cue": a.id, "role": a.role, "routed_by": a.routed_by}
        if isinstance(a, CueMerged):
            return {"id": self.id, "outcome": "merged", "cue": a.cue}
        if isinstance(a, DanmakuRejected | DanmakuSkipped):
            return {"id": self.id, "outcome": a.type.split(".")[1], "reason": a.reason, "detail": a.detail}
        if isinstance(a, ControlApplied):
            return {"id": self.id, "outcome": "applied", "action": a.action, "detail": a.detail}
        return {"id": self.id, "outcome": None}


    def describe(self, wait_s: float) -> str:
        """One line: the id and its outcome."""
        doc = self.to_dict()
        kind = doc["outcome"]
        if kind == "cue":
            what = f"cue {doc['cue']} -> {doc['role']} ({doc['routed_by']})"
        elif kind == "merged":
            what = f"merged into cue {doc['cue']}"
        elif kind in ("rejected", "skipped"):
            what = f"{kind} ({doc['reason']}): {doc['detail']}"
        elif kind == "applied":
            what = f"{doc['action']}: {doc['detail']}"
        elif kind == "duplicate":
            what = "duplicate: this id was sent before (JetStream dropped this copy), not answered again"
        else:
            what = f"no outcome within {wait_s:g} s"
        return f"{self.id}: {what}"


@dataclass(slots=True)
class _Answers:
    """The director's answers to the danmaku sent, by correlation (the danmaku's id)."""

    ids: set[str]
    found: dict[str, Event] = field(default_factory=dict)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_message(self, msg: Msg) -> None:
        try:
            event = codec.decode(msg.data)
        except DecodeError:
            return  # not an answer (the director dead-letters what it cannot read)
        corr = event.correlation
        if isinstance(event, _ANSWERS) and corr in self.ids and corr not in self.found:
            self.found[corr] = event
            self.arrived.set()

    async def wait(self, ids: Sequence[str], timeout_s: float) -> None:
        """Until every one of ``ids`` has its answer, or ``timeout_s`` has passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not all(i in self.found for i in ids):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), remaining)


async def send(
    nc: Client, run: str, batch: Sequence[Event], wait_s: float,
    on_sent: Callable[[Sent], None] | None = None, offsets_s: Sequence[float] | None = None,
) -> list[Sent]:
    """Check the run, publish the batch (danmaku, or an operator's controls) and wait up to
    ``wait_s`` (all together) for the answers.

    With ``offsets_s`` each danmaku is published that many seconds after the first (a recorded
    chat at its pace), stamped with the time it is sent."""
    js = nc.jetstream(timeout=10.0)
    started_at_ms = await check_run(js, run)
    answers = _Answers({e.id for e in batch})
    subscriptions = [await nc.subscribe(family_filter(family, run), cb=answers.on_message)
                     for family in ("cue", "danmaku")]
    sent: list[Sent] = []
    try:
        await nc.flush()  # subscribed on the server before the first danmaku: no answer slips by
        start = time.monotonic()
        for i, event in enumerate(batch):
            if offsets_s is not None:
                delay = start + offsets_s[i] - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                event = dataclasses.replace(event, at_ms=int(time.time() * 1000))
            if started_at_ms and not event.t_ms:  # its show time: when it was sent, in the run
                event = dataclasses.replace(event, t_ms=max(0, int(time.time() * 1000) - started_at_ms))
            ack = await (await publish_event(js, event))
            sent.append(Sent(event.id, duplicate=bool(ack.duplicate)))
            if on_sent is not None:
                on_sent(sent[-1])
        if wait_s > 0:
            await answers.wait([s.id for s in sent if not s.duplicate], wait_s)
    finally:
        for sub in subscriptions:
            await sub.unsubscribe()
    for s in sent:
        s.answer = answers.found.get(s.id)
    return sent


def tally(sent: Sequence[Sent], wait_s: float) -> str:
    """One line counting the outcomes of a batch."""
    counts = Counter(str(s.to_dict()["outcome"] or f"no outcome within {wait_s:g} s") for s in sent)
    return f"{len(sent)} danmaku: " + ", ".join(f"{n} {key}" for key, n in counts.most_common())
