"""Subject names and the JetStream streams, one per event family.

An event travels on ``troupe.<run>.<family>.<name>[.<role>]``: its type (``cue.issued``) after
its run, and the role it concerns, if any, last (``subject_for``), so that a consumer filters a
run, a family or a role with wildcards and a NATS user's permissions name what it may publish.
Two subjects are kept for a moderator's credentials (``app.natsauth``): moderator lines
(``troupe.<run>.danmaku.received.moderator``), which take the floor, and the operator's controls
(``troupe.<run>.danmaku.control``: say, segment, hold, resume).

Each family (``FAMILIES``) has a stream of its own, ``TROUPE_<FAMILY>``, holding
``troupe.*.<family>.>`` for every run, with limits-based retention (the oldest messages go first):

- ``frame``: ``TROUPE_FRAME_MAX_AGE_S`` (600 s by default), 8 GiB, 8 MiB a message: frames are
  large and short-lived (the store keeps their digests, ``TROUPE_STORE_FRAMES``);
- ``audio``: 7 days, 8 GiB, 1 MiB a message;
- ``danmaku``: 7 days, 2 GiB, 4 MiB a message, room for an oversized comment so that the
  director turns it away (``danmaku.rejected``) instead of NATS refusing it unseen;
- the others (``run``, ``role``, ``cue``, ``utterance``, ``viseme``, ``qos``, ``output``,
  ``error``): 7 days, 2 GiB, 1 MiB a message.

``infra.bus.provision_streams`` creates them from ``stream_specs``, or updates them when they
drift: file storage, ``TROUPE_STREAM_REPLICAS`` copies on a cluster, and a 120 s duplicate
window, within which a message whose ``Nats-Msg-Id`` (the event's id: ``events.base``) was
stored already is dropped: a redelivered input's outputs, a producer's retry.  What outlives the
streams is the store's (``store.schema``): ``replay``, ``inspect`` and ``export`` read from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from events.base import Event

PREFIX = "troupe"
TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
FAMILIES = ("run", "role", "danmaku", "cue", "utterance", "audio", "viseme", "frame", "qos", "output", "error")


def is_token(value: str) -> bool:
    """True when ``value`` can be one subject token (run and role ids)."""
    return bool(TOKEN.match(value))


# Moderator lines take the floor: they have a subject of their own, which only a moderator's
# NATS credentials may publish on (see the generated server config, app.natsauth).
MODERATOR = "moderator"
MODERATED = "danmaku.received"
# The operator's controls (say, segment, hold, resume): moderators' credentials only, like
# moderator lines; in the danmaku stream, so that the director takes them in one order with the chat.
CONTROL = "danmaku.control"


def subject_for(event: Event) -> str:
    """The subject an event is published on."""
    base = f"{PREFIX}.{event.run}.{event.type}"
    if event.type == MODERATED and getattr(event, "kind", None) == MODERATOR:
        return f"{base}.{MODERATOR}"
    return f"{base}.{event.role}" if event.role else base


def misplaced(event: Event, subject: str) -> str | None:
    """Why an event may not come on this subject (None: it may): a moderator line must come on
    the moderator subject, which only a moderator's credentials may publish on."""
    if event.type == MODERATED and getattr(event, "kind", None) == MODERATOR and subject != subject_for(event):
        return (f"a moderator line must be published on {subject_for(event)} "
                "(with a moderator's credentials)")
    return None


def family_filter(family: str, run: str = "*") -> str:
    """A subject filter matching every event of one family (of one run or all)."""
    return f"{PREFIX}.{run}.{family}.>"


def run_of(subject: str) -> str | None:
    """The run token of a Troupe subject, or None."""
    parts = subject.split(".")
    return parts[1] if len(parts) >= 4 and parts[0] == PREFIX else None


def family_of(type_: str) -> str:
    """The family of an event type (``audio.chunk`` -> ``audio``): its stream's."""
    return type_.split(".", 1)[0]


def type_of(subject: str) -> str | None:
    """The event type a Troupe subject carries (``troupe.<run>.<family>.<name>[.<role>]``), or None."""
    parts = subject.split(".")
    return f"{parts[2]}.{parts[3]}" if len(parts) >= 4 and parts[0] == PREFIX else None


def stream_name(family: str) -> str:
    """The JetStream stream holding one family."""
    return f"TROUPE_{family.upper()}"


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """Retention of one family's stream."""

    family: str
    max_age_s: float
    max_bytes: int
    max_msg_size: int

    @property
    def name(self) -> str:
        return stream_name(self.family)

    @property
    def subjects(self) -> list[str]:
        return [family_filter(self.family)]


_DAY = 24 * 3600.0
_GIB = 1024**3


def stream_specs(frame_max_age_s: float = 600.0) -> tuple[StreamSpec, ...]:
    """Every stream: frames are large and short-lived, the rest is kept for replay."""
    specs = []
    for family in FAMILIES:
        if family == "frame":
            specs.append(StreamSpec(family, frame_max_age_s, 8 * _GIB, 8 * 1024 * 1024))
        elif family == "danmaku":  # room for oversized comments, so the director can reject them
            specs.append(StreamSpec(family, 7 * _DAY, 2 * _GIB, 4 * 1024 * 1024))
        elif family == "audio":
            specs.append(StreamSpec(family, 7 * _DAY, 8 * _GIB, 1024 * 1024))
        else:
            specs.append(StreamSpec(family, 7 * _DAY, 2 * _GIB, 1024 * 1024))
    return tuple(specs)


def file_store_bytes() -> int:
    """What a NATS server's JetStream needs as ``max_file_store`` for Troupe's streams.

    JetStream reserves each stream's ``max_bytes`` up front and refuses a stream that does
    not fit (10047, "insufficient storage resources available").  Left unset, a server's
    limit is 75% of the disk free when it starts, so a machine with less than about 46 GiB
    free could not create them.  The streams are bounded by age too, and use what they
    hold, not what they reserve: this is the sum of their byte limits with room for the
    KV buckets, in whole GiB."""
    reserved = sum(spec.max_bytes for spec in stream_specs())
    return (reserved // _GIB + 2) * _GIB
