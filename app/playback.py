"""Playback: re-publish a recorded run on NATS, into a new run id, at its pace or at full speed.

Every id in the run (event ids, causations, correlations and ids that payloads
refer to, such as a viseme track's audio chunk) is mapped to a new one derived
from the old id and the new run, so that the playback is a consistent run of its
own and playing it twice changes nothing.  Its ``run.started`` carries
``replay_of``: worker actors leave a playback alone, the recorder and the sink
(and any other subscriber) see it.  Frames stored by digest only are redrawn from
their recorded viseme track.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from nats.js import JetStreamContext
from sqlalchemy import Engine

from events import codec
from events.base import derive_id
from events.errors import StoreError
from events.frame import FrameRendered
from events.run import RunStarted
from events.subjects import is_token, subject_for
from events.viseme import FaceChanged, VisemeCut, VisemeTrack
from infra.bus import publish_raw
from store.queries import Row, in_stream_order, iter_rows, run_info, run_started

Progress = Callable[[int, int], None]
WINDOW = 512  # publish acks outstanding at once


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a playback, ready to publish."""

    t_ms: int
    subject: str
    data: bytes
    msg_id: str


@dataclass(frozen=True, slots=True)
class PlaybackResult:
    run: str
    into: str
    published: int
    seconds: float


class _Mapper:
    """Old ids to new ones, wherever they appear in an event."""

    def __init__(self, ids: Iterable[str], into: str) -> None:
        self.into = into
        self._map = {old: derive_id(old, f"replay:{into}") for old in ids}

    def value(self, v: Any) -> Any:
        if isinstance(v, str):
            return self._map.get(v, v)
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            return {k: self.value(x) for k, x in v.items()}
        return v

    def doc(self, doc: dict[str, Any]) -> dict[str, Any]:
        out = dict(doc)
        for key in ("id", "causation", "correlation"):
            if out.get(key) is not None:
                out[key] = self._map.get(out[key], out[key])
        out["run"] = self.into
        out["payload"] = self.value(doc.get("payload", {}))
        return out


def prepare(
    engine: Engine, run: str, into: str, types: Sequence[str] | None = None,
    from_ms: int | None = None, to_ms: int | None = None, started_at_ms: int | None = None,
) -> list[Message]:
    """The playback's messages in run order (run.started first, whatever the filters)."""
    if not is_token(into):
        raise StoreError(f"--into {into!r} is not a valid run id (letters, digits, - and _)")
    run_info(engine, run)
    everything = list(iter_rows(engine, run))
    start = run_started(everything)
    wanted = _select(everything, types, from_ms, to_ms)
    mapper = _Mapper((r.event.id for r in everything), into)
    from actors.render import Redrawer
    from actors.visemes import apply_cuts, as_drawn
    from infra.settings import load_settings

    whole = {r.event.id: r.event for r in everything if isinstance(r.event, VisemeTrack)}
    tracks = apply_cuts(whole.values(), (r.event for r in everything if isinstance(r.event, VisemeCut)))
    redraw = Redrawer(start, load_settings(environ={}), memo_size=64,
                      faces=(r.event for r in in_stream_order(everything, FaceChanged)))
    out: list[Message] = []
    first = [r for r in everything if isinstance(r.event, RunStarted)][:1]
    for row in first + [r for r in wanted if not isinstance(r.event, RunStarted)]:
        e = row.event
        json_part, blob = codec.split(codec.encode(e))
        doc = mapper.doc(orjson.loads(json_part))
        if isinstance(e, RunStarted):
            doc["payload"]["replay_of"] = run
            doc["payload"]["started_at_ms"] = started_at_ms if started_at_ms is not None else int(time.time() * 1000)
        if isinstance(e, FrameRendered) and row.blob_digest is not None:
            blob = redraw.draw(e.n, as_drawn(e.track, e.track_end_ms, whole, tracks), e.resolution, e.faces,
                               e.background).jpeg
        data = orjson.dumps(doc)
        if blob is not None:
            data = codec.frame(data, blob)
        event = codec.decode(data)  # what subscribers will read: fail here, not in them
        out.append(Message(e.t_ms, subject_for(event), data, event.id))
    return out


def _select(rows: list[Row], types: Sequence[str] | None, from_ms: int | None, to_ms: int | None) -> list[Row]:
    def keep(row: Row) -> bool:
        t = row.event.type
        if types and not any(t == w or t.startswith(w + ".") for w in types):
            return False
        if from_ms is not None and row.event.t_ms < from_ms:
            return False
        return to_ms is None or row.event.t_ms < to_ms

    return [r for r in rows if keep(r)]


async def publish(
    js: JetStreamContext, messages: Sequence[Message], speed: float | None = 1.0,
    progress: Progress | None = None,
) -> float:
    """Publish at the recorded pace divided by ``speed`` (None: as fast as JetStream takes them)."""
    loop = asyncio.get_running_loop()
    begun = loop.time()
    origin = messages[0].t_ms if messages else 0
    pending: list[asyncio.Future[Any]] = []
    for i, m in enumerate(messages):
        if speed is not None:
            delay = begun + max(0, m.t_ms - origin) / 1000 / speed - loop.time()
            if delay > 0:
                await asyncio.gather(*pending)
                pending.clear()
                await asyncio.sleep(delay)
        pending.append(await publish_raw(js, m.subject, m.data, m.msg_id))
        if len(pending) >= WINDOW:
            await asyncio.gather(*pending)
            pending.clear()
        if progress is not None:
            progress(i + 1, len(messages))
    await asyncio.gather(*pending)
    return loop.time() - begun
