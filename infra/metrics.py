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

from events.base import Event
from events.cue import ControlApplied, CueIssued, CueMerged, SegmentStarted
from events.danmaku import DanmakuRejected, DanmakuSkipped
from events.frame import FrameRendered
from events.output import OutputConnected, OutputDropped
from events.qos import ResolutionChanged
from events.role import RoleDeclared, RoleWeightsChanged
from events.show import RESOLUTIONS
from events.utterance import UtteranceDropped
from events.viseme import VisemeTrack

SKIP_REASONS = ("stale", "superseded", "user_waiting", "show_ending", "run_ending", "on_hold")  # actors.director.SKIP_DETAIL
CUE_REASONS = ("chat", "line", "brief", "follow_up", "invitation", "say")  # events.cue.CueIssued.reason
DROP_REASONS = ("deadline", "interrupted", "unknown_role", "writer_failed", "superseded", "yielded", "show_end", "other")  # a reply dropped on purpose
OUTPUTS = ("rtmp", "hls")
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


# The event types ``Metrics.show`` counts (events are final classes: no subclass is published).
_SHOWN = frozenset({
    FrameRendered, CueIssued, CueMerged, VisemeTrack, SegmentStarted, ControlApplied, DanmakuRejected,
    DanmakuSkipped, RoleWeightsChanged, ResolutionChanged, UtteranceDropped, RoleDeclared, OutputDropped,
    OutputConnected,
})


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
        self.recorder_lag = Gauge(
            "troupe_recorder_lag_seconds",
            "How far the store is behind: age of the oldest event not yet written, else of the newest at its commit", registry=r,
        )
        self.outage_retries = Counter(
            "troupe_outage_retries", "Batches tried again because something the actor needs was away (the store)",
            ["actor"], registry=r,
        )
        self.runs_held = Gauge("troupe_runs_held", "Runs whose state an actor holds", ["actor"], registry=r)
        # What the show is doing, from the events this process publishes (labels stay bounded:
        # roles come from the show file, reasons and outcomes from fixed vocabularies).
        self.role_weight = Gauge("troupe_role_weight_factor", "QoS factor on a role's weight", ["role"], registry=r)
        self.resolution = Gauge("troupe_resolution_height", "The stage's resolution (pixels high)", registry=r)
        self.frame_lateness = Histogram(
            "troupe_frame_lateness_seconds", "How late frames were drawn after their show time",
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.danmaku_outcomes = Counter(
            "troupe_danmaku_outcomes", "What became of danmaku", ["outcome", "reason"], registry=r,
        )
        self.replies_dropped = Counter("troupe_replies_dropped", "Replies dropped on purpose", ["reason"], registry=r)
        self.cues = Counter("troupe_cues", "Cues by why the stage speaks: chat, or the show's own reason",
                            ["reason"], registry=r)
        self.speech_seconds = Counter("troupe_speech_seconds", "Speech placed on the show timeline", ["role"], registry=r)
        self.silence_seconds = Histogram(
            "troupe_silence_seconds", "Silences between placed speech on the show timeline",
            buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0), registry=r,
        )
        self.segments = Counter("troupe_segments_started", "Rundown segments started, by why", ["reason"], registry=r)
        self.controls = Counter("troupe_operator_controls", "Operator controls applied", ["action"], registry=r)
        self._spoken_until: dict[str, int] = {}  # run -> end of the speech placed so far (bounded)
        self.output_drops = Counter("troupe_output_drops", "Live output connections lost or refused", ["output"], registry=r)
        self.output_reconnects = Counter("troupe_output_reconnects", "Live outputs connected again", ["output"], registry=r)
        # A platform bridge (troupe bridge): per platform, what arrived and how the connection held.
        self.bridge_connected = Gauge("troupe_bridge_connected", "1 while the bridge's platform connection is up",
                                      ["platform"], registry=r)
        self.bridge_messages = Counter("troupe_bridge_messages", "Viewers' messages a bridge received, by kind",
                                       ["platform", "kind"], registry=r)
        self.bridge_notices = Counter("troupe_bridge_notices", "Other things a platform sent (counted, not published)",
                                      ["platform", "name"], registry=r)
        self.bridge_skipped = Counter("troupe_bridge_skipped", "Messages a bridge did not publish as danmaku, by why",
                                      ["platform", "reason"], registry=r)
        self.bridge_reconnects = Counter("troupe_bridge_reconnects", "Platform connections made again after a drop",
                                         ["platform"], registry=r)
        self.bridge_lag = Histogram("troupe_bridge_lag_seconds", "From the platform's timestamp to the JetStream ack",
                                    ["platform"], buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30), registry=r)
        self.bridge_publish = Histogram("troupe_bridge_publish_seconds", "From a message read off the socket to its ack",
                                        ["platform"], buckets=_LATENCY_BUCKETS, registry=r)
        # Every bounded label set starts at 0, so a dashboard shows "none yet" rather than no data.
        for outcome in ("cue", "merged"):
            self.danmaku_outcomes.labels(outcome, "")
        for reason in SKIP_REASONS:
            self.danmaku_outcomes.labels("skipped", reason)
        for reason in DROP_REASONS:
            self.replies_dropped.labels(reason)
        for reason in CUE_REASONS:
            self.cues.labels(reason)
        for output in OUTPUTS:
            self.output_drops.labels(output)
            self.output_reconnects.labels(output)
        ProcessCollector(registry=r)  # process_resident_memory_bytes, cpu seconds, open fds
        r.register(LibraryMetrics())
        self.port: int | None = None
        self._server: object | None = None

    def show(self, event: Event) -> None:
        """Count what a published event says about the show."""
        if type(event) not in _SHOWN:  # most events say nothing here: one lookup, not fourteen checks
            return
        if isinstance(event, FrameRendered):
            self.frame_lateness.observe(max(0.0, event.late_ms) / 1000)
            self.resolution.set(event.height)
        elif isinstance(event, CueIssued):
            self.cues.labels(_bounded(event.reason) if event.reason in CUE_REASONS else "chat").inc()
            if not event.self_driven:
                self.danmaku_outcomes.labels("cue", "").inc()
        elif isinstance(event, CueMerged):
            self.danmaku_outcomes.labels("merged", "").inc()
        elif isinstance(event, VisemeTrack):
            self._placed(event)
        elif isinstance(event, SegmentStarted):
            self.segments.labels(_bounded(event.reason)).inc()
        elif isinstance(event, ControlApplied):
            self.controls.labels(_bounded(event.action)).inc()
        elif isinstance(event, (DanmakuRejected, DanmakuSkipped)):
            outcome = "rejected" if isinstance(event, DanmakuRejected) else "skipped"
            self.danmaku_outcomes.labels(outcome, _bounded(event.reason)).inc()
        elif isinstance(event, RoleWeightsChanged):
            for role, factor in event.weights.items():
                self.role_weight.labels(_bounded(role)).set(factor)
        elif isinstance(event, ResolutionChanged):
            height = RESOLUTIONS.get(event.after, (0, 0))[1]
            if height:
                self.resolution.set(height)
        elif isinstance(event, UtteranceDropped):
            self.replies_dropped.labels(drop_reason(event.reason)).inc()
        elif isinstance(event, RoleDeclared):  # the weight as declared, until QoS changes it
            self.role_weight.labels(_bounded(event.role or "")).set(1.0)
        elif isinstance(event, OutputDropped):
            self.output_drops.labels(_bounded(event.output)).inc()
        elif isinstance(event, OutputConnected) and event.attempt > 1:
            self.output_reconnects.labels(_bounded(event.output)).inc()

    def _placed(self, track: VisemeTrack) -> None:
        """Speech placed: its seconds by role, and the silence before it (tracks come in timeline order)."""
        self.speech_seconds.labels(_bounded(track.role or "")).inc(max(0, track.end_ms - track.start_ms) / 1000)
        until = self._spoken_until.get(track.run, 0)
        if track.start_ms > until:
            self.silence_seconds.observe((track.start_ms - until) / 1000)
        if track.run not in self._spoken_until and len(self._spoken_until) >= 64:
            del self._spoken_until[next(iter(self._spoken_until))]  # the oldest run: bounded
        self._spoken_until[track.run] = max(until, track.end_ms)

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


def _bounded(label: str) -> str:
    """A label value from a fixed vocabulary or a show's role id: cut short, never free text."""
    return label[:32]


def drop_reason(text: str) -> str:
    """The kind of a dropped reply's reason (its text carries numbers and ids: never a label)."""
    head = text.split(":", 1)[0]
    for kind in ("deadline", "interrupted", "superseded", "yielded"):
        if kind in head:
            return kind
    if text.startswith("the show ends"):
        return "show_end"
    if text.startswith("writer failed"):
        return "writer_failed"
    return "unknown_role" if text.startswith("role ") else "other"
