"""The actor runtime: the JetStream feed of the actor kernel (``actors.kernel``): all of an actor's
NATS I/O (``core``), split by concern: one message's way (``delivery``), runs, their lookups and
lifecycle (``runs``), whole batches (``batch``),
observations for QoS (``observe``), a takeover's rebuild from the streams (``takeover``)."""

from actors.runtime.core import ActorRuntime
from actors.runtime.delivery import AckMetadata, Delivery, ack_metadata
from actors.runtime.observe import OBSERVE_PERIOD_S
from actors.runtime.runs import RunDirectory, RunLifecycle

__all__ = ["OBSERVE_PERIOD_S", "AckMetadata", "ActorRuntime", "Delivery", "RunDirectory", "RunLifecycle", "ack_metadata"]
