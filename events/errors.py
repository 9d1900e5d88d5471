"""Troupe's errors: one root and a small tree, so that a caller can catch one kind or all.

    TroupeError
    ├── DecodeError      an event, a danmaku file line or a message could not be read
    ├── ConfigError      settings, a show file, a command line, a run that does not exist
    ├── BusError         NATS: unreachable, refused, the embedded server did not start
    ├── StoreError       the event store: unreachable, locked, a run that is not recorded
    ├── BackendError     a model backend (LLM, TTS, render) failed or is not installed
    └── HandlerError     an actor's handler failed for good on one input (dead-lettered at once)

Each module raises its own subclass (``ShowError`` is a ``ConfigError``, ``TTSError`` a
``BackendError``); the CLI turns any ``TroupeError`` into one line and a non-zero exit.
"""

from __future__ import annotations


class TroupeError(Exception):
    """Root of every error Troupe raises on purpose."""


class DecodeError(TroupeError, ValueError):
    """Something could not be decoded; ``field`` names the offending field."""

    def __init__(self, reason: str, field: str | None = None) -> None:
        self.reason = reason
        self.field = field
        super().__init__(f"{field}: {reason}" if field else reason)


class ConfigError(TroupeError, ValueError):
    """A setting, a show file, an argument or a named thing is wrong; the message says which."""


class BusError(TroupeError, RuntimeError):
    """NATS is unreachable or refused a request."""


class StoreError(TroupeError, RuntimeError):
    """The event store cannot be reached or does not hold what was asked for."""


class BackendError(TroupeError, RuntimeError):
    """A model backend failed or is not available."""


class HandlerError(TroupeError):
    """A handler failed permanently on an input: dead-letter it at once, no retry."""
