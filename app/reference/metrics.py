"""The metrics page, from the prometheus-client registry a Troupe process builds (``infra.metrics``)."""

from __future__ import annotations

from prometheus_client.metrics import MetricWrapperBase

from app.reference.markdown import cell, code, header, table
from infra.metrics import LIBRARY_PREFIXES, Metrics

_SERIES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
           "gauge": ("",), "summary": ("", "_sum", "_count", "_created")}


def families() -> list[tuple[str, str, tuple[str, ...], str]]:
    """Every metric of ``Metrics``: name, type, label names, help."""
    metrics = Metrics()
    out = []
    for metric in vars(metrics).values():
        if isinstance(metric, MetricWrapperBase):
            [family] = metric.describe()
            # prometheus-client keeps the label names private; they are the metric's schema.
            out.append((family.name, family.type, tuple(metric._labelnames), family.documentation))  # noqa: SLF001
    return out


def _label_values() -> dict[str, dict[str, list[str]]]:
    """The label values a process exports from its start (the fixed vocabularies), by metric."""
    found: dict[str, dict[str, list[str]]] = {}
    for family in Metrics().registry.collect():
        for sample in family.samples:
            for label, v in sample.labels.items():
                if label != "le" and v:
                    seen = found.setdefault(family.name, {}).setdefault(label, [])
                    if v not in seen:
                        seen.append(v)
    return found


def page() -> str:
    """``docs/reference/metrics.md``."""
    lines = header("Metrics", "the registry in `infra/metrics.py`",
                   "Every Troupe process serves Prometheus metrics on `/metrics` (`TROUPE_METRICS_PORT`, "
                   "`TROUPE_METRICS_HOST`). A process exports the metrics of the actors it runs; a label whose "
                   "values come from a fixed vocabulary starts at 0 for each, so a dashboard shows \"none yet\" "
                   "rather than no data.")
    values = _label_values()
    rows = []
    for name, kind, labels, help_ in families():
        series = ", ".join(code(name + s) for s in _SERIES[kind])
        known = "; ".join(f"{label}: " + ", ".join(code(v) for v in vs) for label, vs in values.get(name, {}).items())
        rows.append([code(name), kind, ", ".join(code(label) for label in labels), cell(help_), series, known])
    lines += table(["metric", "type", "labels", "what it counts", "series", "label values from the start"], rows)
    lines += ["Besides these, each process serves prometheus-client's `process_*` metrics (memory, CPU "
              "seconds, open files) and the metrics a library registers whose names start with "
              + ", ".join(code(p) for p in LIBRARY_PREFIXES) + " (vLLM's engine, in an llm worker running it).", ""]
    return "\n".join(lines)
