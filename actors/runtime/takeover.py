"""Taking over a single-per-deployment actor (director, lipsync, render, sink) mid-show.

A process that starts such an actor while shows are on air (a standby taking over from
one that died, or the same worker restarted) must not begin from nothing: it rebuilds
each live run's state from the streams, then goes on where the last holder stopped.

1. Each durable consumer is re-made to start just after its ack floor, so what the
   last holder had taken but not acked is delivered at once, not after the ack wait.
   Of those, the inputs its stored outputs say it had taken in (``Event.seen``) are part of
   the rebuilt state (step 2) and acked when redelivered, not handled again: handled at
   another show time, an input can be decided otherwise, and both answers would be stored.
   The others are handled live; an output the last holder published anyway carries the same
   id, so JetStream drops it (within the streams' two-minute duplicate window).
   The actor is told (``taking_over``) before each run's past is handed to it.
2. For every run on air (started, not a playback, not ended, not past its planned end, its
   show process alive: ``live_runs``), the actor's inputs up to the floor (and past it, up to
   what its outputs say it took in) are read back and handled again, as re-execution does, in
   the order the last holder took them in (its outputs record the stream positions it had
   taken in) and each at the show time it was
   handled then: the earliest of the times its outputs record (a deferred decision's
   ``heard_ms``; a comment the director let wait says when it took it in, ``danmaku.waiting``),
   else (it caused nothing yet) the time of the input before it, never before the server stored
   it (``actors.kernel.handling_order``).  Families in ``rebuild_skips`` are not read (the
   sink's frames).  What these calls emit is thrown away: it was published already.
3. An actor whose decisions come from its clock (the director) has its clock run up to
   the last output of the run that only it publishes (``clock_marks``), so what it
   decided is decided again.  One that goes on from its last output (the renderer, from
   the frame after the last one stored: ``resumes_from``) is told what that was.
4. What the rebuilt state emitted for an input that has no answer stored (a decision the last
   holder made and died before publishing, or one it was about to make when an input's time
   was only known roughly; a note that a comment waits is no answer) is published now: the
   state believes it was said, so the world hears it, and the input is not left without its
   outcome.  What was stored is never sent again, nor a second answer to an input that has one.

The rebuilt state is the state the last holder had, and the decisions it goes on to make
are the ones a holder that never died would have made at those show times; what was
due while nobody held the actor is decided at once, each at the show time it was due.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy
from nats.js.errors import NotFoundError

from actors.base import ClockedActor, inputs_for
from actors.kernel import Fed, Kernel, Recorded, Tick, handling_order, take_over
from actors.runtime.runs import RunDirectory
from events import codec
from events.base import Event
from events.errors import DecodeError
from events.run import RunStarted
from events.subjects import PREFIX, family_of, stream_name
from infra.bus import ConsumerSpec, read_stream
from infra.lease import runs_on_air

log = logging.getLogger(__name__)
# Output families never read back to time inputs: frames are large, observations many, and
# neither is caused by an input.
UNREAD_FAMILIES = frozenset({"frame", "qos"})


@dataclass(slots=True)
class Takeover:
    """What a start found and rebuilt."""

    floors: dict[str, int] = field(default_factory=dict)  # durable -> its ack floor
    runs: list[str] = field(default_factory=list)          # the live runs rebuilt
    resumed: dict[str, str] = field(default_factory=dict)  # run -> the stored output it went on from
    # (run, family) -> the last position the last holder had taken in past its ack floor: the inputs
    # redelivered up to it were handled in the rebuild, and are acked without being handled again
    taken: dict[tuple[str, str], int] = field(default_factory=dict)
    inputs: int = 0                                        # inputs handled again
    published: int = 0                                     # outputs nobody had published, sent now
    seconds: float = 0.0


async def restart_from_floor(js: JetStreamContext, spec: ConsumerSpec) -> int:
    """Re-make a durable so that its unacked messages are delivered now; its ack floor (0: none yet)."""
    try:
        info = await js.consumer_info(spec.stream, spec.durable)
    except NotFoundError:
        return 0
    floor = int(info.ack_floor.stream_seq or 0) if info.ack_floor is not None else 0
    if not info.num_ack_pending and not info.num_redelivered:
        return floor  # nothing taken and left unacked: the consumer goes on as it is
    config = dataclasses.replace(spec.config(), deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                                 opt_start_seq=floor + 1)
    await js.delete_consumer(spec.stream, spec.durable)
    await js.add_consumer(spec.stream, config)
    log.info("%s: %d messages taken by the last holder and not acked are delivered again from #%d",
             spec.durable, int(info.num_ack_pending or 0), floor + 1)
    return floor


async def live_runs(js: JetStreamContext, runs: RunDirectory, now_ms: int, grace_ms: int) -> list[RunStarted]:
    """The runs on air: started, not ended, not past their planned end by ``grace_ms``, and
    with their show process alive (holding the run's on-air lease: a run whose show died
    without its run.ended is not taken over)."""
    on_air = await runs_on_air(js)
    if not on_air:
        return []
    started, ended = (await _runs_with(js, "run.started")), (await _runs_with(js, "run.ended"))
    found = []
    for run_id in sorted((started & on_air) - ended):
        run = await runs.get(run_id)
        if run is None or run.replay_of is not None or await runs.ended_at(run_id) is not None:
            continue  # unknown, a playback (its outputs are replayed with it), or over
        if run.duration_ms > 0 and now_ms > run.started_at_ms + run.duration_ms + grace_ms:
            continue  # past its planned end
        found.append(run)
    return found


async def _runs_with(js: JetStreamContext, type_: str) -> set[str]:
    """The runs with an event of this type in the run stream (one request: its subjects)."""
    try:
        info = await js.stream_info(stream_name("run"), subjects_filter=f"{PREFIX}.*.{type_}")
    except NotFoundError:
        return set()
    return {subject.split(".")[1] for subject in ((info.state.subjects or {}) if info.state is not None else {})}


def run_filters(filters: Sequence[str], run: str) -> list[str]:
    return [f.replace(f"{PREFIX}.*.", f"{PREFIX}.{run}.", 1) for f in filters]


async def rebuild(
    js: JetStreamContext, kernel: Kernel[Any], specs: Sequence[ConsumerSpec], runs: RunDirectory,
    now_s: float, grace_s: float, in_thread: Callable[..., Awaitable[Any]],
    publish: Callable[[list[Event]], Awaitable[Any]],
) -> Takeover:
    """Re-make the consumers from their floors and rebuild every live run's state in the kernel's
    actor (the kernel fed from the streams, called through ``in_thread``: the actor's own worker
    thread); ``publish`` sends what the rebuilt state emitted that nothing stored answers."""
    began = time.perf_counter()
    report = Takeover()
    for spec in specs:
        report.floors[spec.durable] = await restart_from_floor(js, spec)
    for run in await live_runs(js, runs, int(now_s * 1000), int(grace_s * 1000)):
        runs.remember(run)
        await rebuild_run(js, kernel, specs, run, report, in_thread, publish)
    report.seconds = time.perf_counter() - began
    return report


async def rebuild_run(
    js: JetStreamContext, kernel: Kernel[Any], specs: Sequence[ConsumerSpec], run: RunStarted, report: Takeover,
    in_thread: Callable[..., Awaitable[Any]], publish: Callable[[list[Event]], Awaitable[Any]],
) -> None:
    """Rebuild one run's state from its inputs up to the consumers' floors (``report.floors``,
    made by ``restart_from_floor``), as steps 2 to 4 above say."""
    actor = kernel.actor
    outputs = [out for out in inputs_for(actor.emits) if out.family not in UNREAD_FAMILIES]
    marks = set(actor.clock_marks) if isinstance(actor, ClockedActor) else set()
    own = tuple(actor.emits)
    mine: list[Event] = []        # its outputs stored: when and in what order it took its inputs in
    answered: set[str] = set()    # inputs an output stored answers (not only a note of when it was taken in)
    stored: set[str] = set()      # the ids of its outputs stored
    last_ms = 0
    for out in outputs:
        for msg in await read_stream(js, stream_name(out.family), run_filters(out.filters, run.run)):
            event = _decoded(msg.data)
            if event is None:
                continue
            stored.add(event.id)
            if isinstance(event, own):
                mine.append(event)
            if type(event) in marks:
                last_ms = max(last_ms, event.t_ms)
            if event.causation is not None and event.answers:
                answered.add(event.causation)
    # What the last holder had taken in, as its outputs stored record it (``seen``): inputs past its
    # ack floor that it took in before it died belong to the rebuilt state, and their redelivery is
    # not handled again (at another show time it could decide otherwise, and both would be stored).
    taken: dict[str, int] = {}
    for said in mine:
        for family, seq in (said.seen or {}).items():
            taken[family] = max(taken.get(family, 0), seq)
    inputs: dict[str, list[Recorded]] = {}
    for spec in specs:
        if spec.family in actor.rebuild_skips:
            continue
        floor = report.floors.get(spec.durable, 0)
        upto = max(floor, taken.get(spec.family, 0))
        if upto <= 0:
            continue
        if upto > floor:
            report.taken[(run.run, spec.family)] = upto
        for msg in await read_stream(js, spec.stream, run_filters(spec.subjects, run.run), upto_seq=upto):
            event = _decoded(msg.data)
            if event is None or event.run != run.run:
                continue
            inputs.setdefault(spec.family, []).append(
                Recorded(event, msg.seq, msg.time_us // 1000 - run.started_at_ms))
    feed = handling_order(inputs, mine)
    last = None
    if isinstance(actor, ClockedActor) and actor.resumes_from is not None:
        last = await _last(js, run.run, actor.resumes_from.type)
        if last is not None:
            report.resumed[run.run] = last.id
    kernel.record(run.run, mine)  # what it read from outside the run then (a recall): not read again
    # One call into the actor: its clock sees the run only once it is rebuilt and resumed.
    emitted = await in_thread(_rebuild_state, kernel, run, feed, last_ms, last)
    unsaid = unpublished(emitted, stored, answered)
    if unsaid:
        log.warning("%s: run %s: %d outputs of the rebuilt state were never published (%s): published now",
                    actor.name, run.run, len(unsaid), ", ".join(sorted({e.type for e in unsaid})))
        await publish(unsaid)
        report.published += len(unsaid)
    report.inputs += len(feed)
    report.runs.append(run.run)


def _rebuild_state(kernel: Kernel[Any], run: RunStarted, feed: Sequence[Fed | Tick], last_ms: int,
                   last: Event | None) -> list[Event]:
    """The run taken over in the kernel (``take_over``), an actor whose clock decides having its
    clock run up to its last recorded output; what the replay emitted."""
    clocked = isinstance(kernel.actor, ClockedActor) and bool(kernel.actor.clock_marks)
    return take_over(kernel, run, feed, last_ms if clocked else None, last)


def unpublished(emitted: Sequence[Event], stored: set[str], answered: Collection[str]) -> list[Event]:
    """Of what a rebuilt state emitted, what nobody published: not stored, and caused by an input
    nothing stored answers (``answered``: an input the last holder answered keeps that answer
    alone; a stored note of when it was taken in, ``danmaku.waiting``, answers nothing), or by
    one of these outputs itself (the opener that goes with a cue)."""
    out: list[Event] = []
    sent: set[str] = set()
    for event in emitted:
        if event.id in stored or family_of(event.type) in UNREAD_FAMILIES:
            continue
        if event.causation is None or event.causation not in answered or event.causation in sent:
            out.append(event)
            sent.add(event.id)
    return out


async def _last(js: JetStreamContext, run: str, type_: str) -> Event | None:
    """The run's last stored event of a type (published without a role token)."""
    try:
        raw = await js.get_last_msg(stream_name(type_.split(".", 1)[0]), f"{PREFIX}.{run}.{type_}")
    except NotFoundError:
        return None
    return _decoded(raw.data or b"")


def _decoded(data: bytes) -> Event | None:
    try:
        return codec.decode(data)
    except DecodeError:
        return None  # dead-lettered when it was delivered
