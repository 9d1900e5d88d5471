"""Prometheus metrics of one process: a registry of its own, served on an HTTP port."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12)
# Libraries whose own metrics (in prometheus_client's default registry) a process serves too.
LIBRARY_PREFIXES = ("vllm:",)


class LibraryMetrics(Collector):
    """The families a library registers in the default registry (vLLM's engine: ``vllm:*``)."""

    def __init__(self, prefixes: tuple[str, ...] = LIBRARY_PREFIXES) -> None:
        self.prefixes = prefixes

    def collect(self) -> Iterator[Metric]:
        return (family for family in REGISTRY.collect() if family.name.startswith(self.prefixes))

    def describe(self) -> list[Metric]:
        return []  # none known in advance: a library registers its metrics when it starts


class Metrics:
    """Every metric a Troupe process exports."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.processed = Counter("troupe_processed", "Inputs handled and acked", ["actor"], registry=r)
        self.failed = Counter("troupe_failed", "Inputs whose handling failed", ["actor", "reason"], registry=r)
        self.redelivered = Counter("troupe_redelivered", "Inputs seen more than once", ["actor"], registry=r)
        self.dead_lettered = Counter("troupe_dead_lettered", "Inputs terminated", ["actor"], registry=r)
        self.published = Counter("troupe_published", "Events published", ["actor", "type"], registry=r)
        self.handler_seconds = Histogram(
            "troupe_handler_seconds", "Handler time per input", ["actor"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.hop_latency = Histogram(
            "troupe_hop_latency_seconds", "From an event's emission to its handling, by hop",
            ["hop"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.queue_depth = Gauge("troupe_queue_depth", "Messages pending per consumer", ["actor", "stream"], registry=r)
        self.recorder_lag = Gauge("troupe_recorder_lag_seconds", "Age of the newest recorded event at commit", registry=r)
        self.runs_held = Gauge("troupe_runs_held", "Runs whose state an actor holds", ["actor"], registry=r)
        ProcessCollector(registry=r)  # process_resident_memory_bytes, cpu seconds, open fds
        r.register(LibraryMetrics())
        self.port: int | None = None
        self._server: object | None = None

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve /metrics on ``host`` (port 0: any free port); returns the port."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        self.port = int(server.server_address[1])
        return self.port

    def close(self) -> None:
        """Stop serving."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()  # type: ignore[attr-defined]
            server.server_close()  # type: ignore[attr-defined]
