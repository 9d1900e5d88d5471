"""NATS users and subject permissions for a deployment where each service has credentials of its own.

Generated from what the actors declare (``consumes``, ``emits``, whether their runtime publishes
observations: ``app.registry``), so there is one source of truth: ``troupe nats-config`` prints
the server config, and ``infra/nats/nats.conf`` is its output (a test keeps the two equal).

- an actor may publish only the event types it emits (plus its runtime's ``qos.observed`` and
  ``error.dead_lettered``), and read only through its own durable consumers on the families it
  consumes (plus the run directory: the ``run.started``/``run.ended`` lookups);
- the recorder reads every family and publishes nothing;
- ``producer`` may only publish danmaku (never a moderator line, which has a subject of its
  own: ``events.subjects.MODERATOR``), and reads no stream;
- ``bridge`` (``troupe bridge``: a platform's chat) publishes danmaku like a producer, and its
  connection gaps (``danmaku.gap``) and what it capped (``danmaku.skipped``); it looks up runs and
  which is on air, and hears the replies (to post them back into the platform's chat);
- ``moderator`` may publish danmaku, moderator lines and the operator's controls
  (``danmaku.control``: say, segment, hold, resume), which the preview page also sends for its
  token holder;
- ``show`` (``troupe up --actors none``: starts runs, plays the show's danmaku script, ends
  runs and waits for the actors) publishes runs, roles and danmaku, and provisions the streams;
- anonymous connections are refused (every user has a password; no ``no_auth_user``).

Passwords are read by nats-server from its environment: ``$TROUPE_NATS_PASS_<USER>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from actors.base import Actor
from actors.runtime.owners import MEMBER, OWN
from app.registry import ACTORS
from events.base import registry
from events.error import DeadLettered
from events.qos import QosObserved
from events.run import RunOwned
from events.subjects import (
    CONTROL,
    FAMILIES,
    MODERATED,
    MODERATOR,
    PREFIX,
    family_filter,
    family_of,
    file_store_bytes,
    stream_name,
)
from infra.lease import BUCKET as LEASES
from infra.lease import ON_AIR

API = "$JS.API"
INBOX = "_INBOX.>"


@dataclass(frozen=True, slots=True)
class User:
    name: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...] = (INBOX,)

    @property
    def password_variable(self) -> str:
        return f"TROUPE_NATS_PASS_{self.name.upper()}"


def _events(types: Iterable[str]) -> list[str]:
    """Publish rights for event types, with or without a role token."""
    out: list[str] = []
    for t in types:
        out += [f"{PREFIX}.*.{t}", f"{PREFIX}.*.{t}.*"]
    return out


def _consumers(durable: str, families: Sequence[str]) -> list[str]:
    """What reading through one's own durable consumers takes (create, inspect, fetch, ack)."""
    out: list[str] = []
    for family in families:
        stream, name = stream_name(family), f"{durable}_{family}"
        out += [
            f"{API}.CONSUMER.INFO.{stream}.{name}", f"{API}.CONSUMER.CREATE.{stream}.{name}",
            f"{API}.CONSUMER.CREATE.{stream}.{name}.>", f"{API}.CONSUMER.DURABLE.CREATE.{stream}.{name}",
            f"{API}.CONSUMER.MSG.NEXT.{stream}.{name}", f"$JS.ACK.{stream}.{name}.>",
        ]
    return out


def _run_directory() -> list[str]:
    """Looking up a run's start and end (every actor's context)."""
    run = stream_name("run")
    return [f"{API}.STREAM.MSG.GET.{run}", f"{API}.DIRECT.GET.{run}", f"{API}.DIRECT.GET.{run}.>"]


def _stream_info() -> list[str]:
    return [f"{API}.INFO", *(f"{API}.STREAM.INFO.{stream_name(f)}" for f in FAMILIES)]


def _erase() -> list[str]:
    """Erasing single messages from the streams that hold a viewer's personal text (``!forget``)."""
    families = sorted({family_of(t) for t in registry.types() if registry.lookup(t).personal})
    return [f"{API}.STREAM.MSG.DELETE.{stream_name(f)}" for f in families]


def _provision() -> list[str]:
    return [f"{API}.STREAM.{op}.{stream_name(f)}" for f in FAMILIES for op in ("CREATE", "UPDATE")]


def _lease_bucket() -> list[str]:
    """Creating, adjusting and reading the lease bucket (who holds which key)."""
    kv = f"KV_{LEASES}"
    return [f"{API}.STREAM.INFO.{kv}", f"{API}.STREAM.CREATE.{kv}", f"{API}.STREAM.UPDATE.{kv}",
            f"{API}.STREAM.MSG.GET.{kv}", f"{API}.DIRECT.GET.{kv}", f"{API}.DIRECT.GET.{kv}.>"]


def _takeover(name: str, cls: type[Actor]) -> list[str]:
    """What an actor that takes over needs: its lease (a key in the lease bucket), re-making its
    consumers from their ack floor, and reading back the streams of what it consumes and emits."""
    # Its lease, or with TROUPE_SPREAD=on its runs' keys and its membership among the kind's
    # processes; a consumer per run (any name on these streams: a subject token has no prefix
    # match), and the run.owned events that say which process holds each run.
    out = [f"$KV.{LEASES}.{name}", f"$KV.{LEASES}.{OWN}.{name}.*", f"$KV.{LEASES}.{MEMBER}.{name}.*",
           *_lease_bucket(), *_events([RunOwned.type])]
    families = sorted({i.family for i in cls.inputs} | {e.type.split(".", 1)[0] for e in cls.emits} | {"run"})
    for stream in map(stream_name, families):
        out += [f"{API}.CONSUMER.CREATE.{stream}", f"{API}.CONSUMER.CREATE.{stream}.>",
                f"{API}.CONSUMER.MSG.NEXT.{stream}.*", f"{API}.CONSUMER.DELETE.{stream}.*",
                f"{API}.CONSUMER.INFO.{stream}.*", f"$JS.ACK.{stream}.*.>",
                f"{API}.STREAM.MSG.GET.{stream}", f"{API}.DIRECT.GET.{stream}", f"{API}.DIRECT.GET.{stream}.>"]
    return out


def actor_user(name: str, cls: type[Actor]) -> User:
    emitted = [e.type for e in cls.emits]
    if cls.observed:
        emitted.append(QosObserved.type)
    if name != "recorder":  # the recorder publishes nothing; others dead-letter what they cannot take
        emitted.append(DeadLettered.type)
    publish = [*_events(sorted(set(emitted))), *_stream_info(), *_run_directory(),
               *_consumers(name, [i.family for i in cls.inputs])]
    if cls.takes_over:
        publish += _takeover(name, cls)
    subscribe: tuple[str, ...] = (INBOX,)
    if name == "memory":  # a viewer's !forget: the projector it runs erases their messages
        publish += _erase()
    if name == "preview":  # its page's input box sends danmaku like any producer (never a
        # moderator line), its buttons the operator's controls (for the token holder), and it
        # waits for their answers, from families it consumes anyway
        publish += [f"{PREFIX}.*.{MODERATED}", f"{PREFIX}.*.{CONTROL}"]
        subscribe += tuple(family_filter(f) for f in ("danmaku", "cue"))
    return User(name, tuple(publish), subscribe)


def users() -> list[User]:
    """Every service's user: the actors (from the registry), then the show, producer and moderator."""
    out = [actor_user(name, entry.load()) for name, entry in ACTORS.items()]
    danmaku = [f"{PREFIX}.*.{MODERATED}"]
    out.append(User("show", (
        *_events(["run.started", "run.ended", "role.declared"]), *danmaku, f"{PREFIX}.*.{MODERATED}.{MODERATOR}",
        *_stream_info(), *_provision(), *_run_directory(), f"{API}.CONSUMER.INFO.*.*",
        f"$KV.{LEASES}.{ON_AIR}.*", *_lease_bucket(),  # its runs' on-air keys
    )))
    out.append(User("producer", tuple(danmaku)))
    # A platform bridge (troupe bridge): a producer that also records its gaps and what it capped,
    # finds the run on air, and (posting replies back) hears the replies.
    out.append(User("bridge", (*danmaku, *_events(["danmaku.gap", "danmaku.skipped"]), *_run_directory(),
                               f"{API}.STREAM.INFO.KV_{LEASES}"),
                    (INBOX, f"{PREFIX}.*.utterance.completed.*")))
    # The operator's commands (troupe say, segment, hold, resume) check the run and read the answer.
    out.append(User("moderator", (*danmaku, f"{PREFIX}.*.{MODERATED}.{MODERATOR}", f"{PREFIX}.*.{CONTROL}",
                                  *_run_directory()),
                    (INBOX, *(family_filter(f) for f in ("danmaku", "cue")))))
    return out


def _list(items: Sequence[str], indent: str) -> str:
    return "[\n" + "".join(f'{indent}  "{i}"\n' for i in items) + f"{indent}]"


def server_config(port: int = 4222, monitor_port: int = 8222, store_dir: str = "/data") -> str:
    """The nats-server config: JetStream, and one user per service with its permissions."""
    lines = [
        "# Generated by `troupe nats-config` from the actors' declarations: do not edit by hand.",
        "# Each service has a user; passwords come from the server's environment",
        "# (TROUPE_NATS_PASS_<USER>). Anonymous connections are refused.",
        f"port: {port}",
        f"http_port: {monitor_port}",
        "max_payload: 8MB  # frames and oversized comments (as troupe up's embedded server)",
        f'jetstream {{ store_dir: "{store_dir}", max_file_store: {file_store_bytes()} }}'
        "  # what the streams reserve; unset, 75% of the disk free at start",
        "authorization {",
        "  users: [",
    ]
    for user in users():
        lines += [
            f"    {{ user: {user.name}, password: ${user.password_variable}, permissions: {{",
            f"      publish: {{ allow: {_list(user.publish, '      ')} }}",
            f"      subscribe: {{ allow: {_list(user.subscribe, '      ')} }}",
            "    } }",
        ]
    lines += ["  ]", "}", ""]
    return "\n".join(lines)
