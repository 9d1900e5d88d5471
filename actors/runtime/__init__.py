"""The actor runtime: all of an actor's NATS I/O (``core``), split by concern: one message's way
(``delivery``), runs, their lookups and lifecycle (``runs``), the queue of scheduled actors
(``scheduled``), the clock of clocked actors (``clock``), whole batches (``batch``),
observations for QoS (``observe``); ``harness`` runs one actor in memory."""

from actors.runtime.core import ActorRuntime
from actors.runtime.delivery import AckMetadata, Delivery, ack_metadata
from actors.runtime.observe import OBSERVE_PERIOD_S
from actors.runtime.runs import RunDirectory, RunLifecycle

__all__ = ["OBSERVE_PERIOD_S", "AckMetadata", "ActorRuntime", "Delivery", "RunDirectory", "RunLifecycle", "ack_metadata"]
