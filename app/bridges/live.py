"""A show's ``[[sources]]`` bridged into its run while it is on air (``troupe up``): one bridge
per source, started once the run has started and stopped before it ends, so that every message
read is published into the run (``app.bridges.run``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

from nats.js import JetStreamContext

from app.bridges.base import BridgeFatal, Connector
from app.bridges.connectors import connector_for
from app.bridges.run import Bridge, BridgeConfig, BridgeTotals
from events.sources import Source
from infra.metrics import Metrics
from infra.settings import Settings

log = logging.getLogger(__name__)


def connectors(sources: Sequence[Source], settings: Settings) -> list[tuple[Source, Connector]]:
    """Each source's connector, made before the run starts: missing credentials are one line."""
    return [(source, connector_for(source, settings)) for source in sources]


@contextlib.asynccontextmanager
async def bridged(js: JetStreamContext, run: str, made: Sequence[tuple[Source, Connector]],
                  metrics: Metrics | None = None) -> AsyncIterator[list[Bridge]]:
    """The sources' bridges into ``run`` for the block's length (a source the platform refuses is
    logged, and the show goes on without it)."""
    bridges = [Bridge(connector, js, BridgeConfig(source.label, run, source.to, source.rate), metrics)
               for source, connector in made]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(_bridge(b, stop), name=f"source-{b.config.source}") for b in bridges]
    for bridge in bridges:
        log.info("run %s: bridging %s", run, bridge.config.source)
    try:
        yield bridges
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def _bridge(bridge: Bridge, stop: asyncio.Event) -> BridgeTotals | None:
    try:
        totals = await bridge.run(stop)
    except BridgeFatal as exc:
        log.error("%s: %s: the show goes on without it", bridge.config.source, exc)
        return None
    except Exception:  # a bug: the show goes on, the traceback is logged
        log.exception("%s: the bridge failed", bridge.config.source)
        return None
    log.info("%s: %s", bridge.config.source, totals.line())
    return totals
