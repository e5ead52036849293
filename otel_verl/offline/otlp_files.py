"""Read the OTLP JSON-lines files the ``otlp_json_file`` exporters write (one per process).

Used by ``otel-verl summary``/``report``/``replay`` and by the tests that check a real run's telemetry.
A line that is not valid JSON (the last line of a process killed while writing) is skipped; pass
``bad=[]`` to the readers to learn which ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _value(v: dict[str, Any]) -> Any:
    if "intValue" in v:
        return int(v["intValue"])  # OTLP JSON writes int64 as a string
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "arrayValue" in v:
        return [_value(x) for x in v["arrayValue"].get("values", [])]
    return next(iter(v.values()), None)


def _attrs(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {a["key"]: _value(a.get("value", {})) for a in items or []}


@dataclass
class SpanLink:
    """A span link (OTLP ``links`` entry): the linked span's ids and the link's attributes."""

    trace_id: str
    span_id: str
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class SpanRecord:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status: str
    events: list[dict[str, Any]] = field(default_factory=list)
    links: list[SpanLink] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def event_attributes(self, name: str) -> list[dict[str, Any]]:
        """The attributes of each event called ``name`` (events stay as OTLP JSON in ``events``)."""
        return [_attrs(e.get("attributes")) for e in self.events if e.get("name") == name]


@dataclass
class MetricPoint:
    name: str
    kind: str  # gauge | sum | histogram
    value: float | None  # gauge/sum value; histogram sum
    count: int | None  # histogram count
    attributes: dict[str, Any]
    resource: dict[str, Any]
    time_ns: int
    # histograms only: explicit bucket bounds and per-bucket counts (len(bounds) + 1)
    bounds: list[float] | None = None
    bucket_counts: list[int] | None = None
    start_ns: int = 0
    temporality: int = 0  # OTLP AggregationTemporality: 1 delta, 2 cumulative, 0 unspecified/gauge


SIGNALS = ("traces", "metrics", "logs")


def signal_files(folder: str | Path, signal: str) -> list[Path]:
    """The OTLP JSON-lines files of one signal in ``folder``, sorted (``<signal>-*.jsonl``)."""
    return sorted(Path(folder).glob(f"{signal}-*.jsonl"))


def iter_lines(path: Path, bad: list[tuple[Path, int]] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """(raw line, decoded request) for each valid non-empty line of one file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                batch = json.loads(line)
            except ValueError:
                if bad is not None:
                    bad.append((path, lineno))
                continue
            if isinstance(batch, dict):
                yield line, batch
            elif bad is not None:
                bad.append((path, lineno))


def _lines(folder: Path, prefix: str, bad: list[tuple[Path, int]] | None = None) -> Iterator[dict[str, Any]]:
    for path in signal_files(folder, prefix):
        for _, batch in iter_lines(path, bad):
            yield batch


def read_spans(folder: str | Path, bad: list[tuple[Path, int]] | None = None) -> list[SpanRecord]:
    out: list[SpanRecord] = []
    for batch in _lines(Path(folder), "traces", bad):
        for rs in batch.get("resourceSpans", []):
            resource = _attrs(rs.get("resource", {}).get("attributes"))
            for ss in rs.get("scopeSpans", []):
                for s in ss.get("spans", []):
                    out.append(
                        SpanRecord(
                            name=s["name"],
                            trace_id=s["traceId"],
                            span_id=s["spanId"],
                            parent_id=s.get("parentSpanId", ""),
                            start_ns=int(s["startTimeUnixNano"]),
                            end_ns=int(s["endTimeUnixNano"]),
                            attributes=_attrs(s.get("attributes")),
                            resource=resource,
                            status=s.get("status", {}).get("code", "STATUS_CODE_UNSET"),
                            events=s.get("events", []),
                            links=[
                                SpanLink(lk.get("traceId", ""), lk.get("spanId", ""), _attrs(lk.get("attributes")))
                                for lk in s.get("links", [])
                            ],
                        )
                    )
    return out


def read_metric_points(folder: str | Path, bad: list[tuple[Path, int]] | None = None) -> list[MetricPoint]:
    out: list[MetricPoint] = []
    for batch in _lines(Path(folder), "metrics", bad):
        for rm in batch.get("resourceMetrics", []):
            resource = _attrs(rm.get("resource", {}).get("attributes"))
            for sm in rm.get("scopeMetrics", []):
                for m in sm.get("metrics", []):
                    for kind in ("gauge", "sum", "histogram"):
                        if kind not in m:
                            continue
                        temporality = _temporality(m[kind].get("aggregationTemporality"))
                        for p in m[kind].get("dataPoints", []):
                            if kind == "histogram":
                                value, count = p.get("sum"), int(p.get("count", 0))
                            else:
                                value = p.get("asDouble", p.get("asInt"))
                                value, count = (float(value) if value is not None else None), None
                            out.append(
                                MetricPoint(
                                    m["name"],
                                    kind,
                                    value,
                                    count,
                                    _attrs(p.get("attributes")),
                                    resource,
                                    int(p.get("timeUnixNano", 0)),
                                    [float(b) for b in p.get("explicitBounds", [])] if kind == "histogram" else None,
                                    [int(c) for c in p.get("bucketCounts", [])] if kind == "histogram" else None,
                                    int(p.get("startTimeUnixNano", 0)),
                                    temporality,
                                )
                            )
    return out


def _temporality(value: Any) -> int:
    if isinstance(value, str) and not value.isdigit():  # enum name, as protojson may write it
        return {"AGGREGATION_TEMPORALITY_DELTA": 1, "AGGREGATION_TEMPORALITY_CUMULATIVE": 2}.get(value, 0)
    return int(value or 0)


def count_items(signal: str, batch: dict[str, Any]) -> int:
    """Spans, metric data points or log records in one OTLP export request."""
    if signal == "traces":
        return sum(len(ss.get("spans", [])) for rs in batch.get("resourceSpans", []) for ss in rs.get("scopeSpans", []))
    if signal == "logs":
        return sum(
            len(sl.get("logRecords", [])) for rl in batch.get("resourceLogs", []) for sl in rl.get("scopeLogs", [])
        )
    n = 0
    for rm in batch.get("resourceMetrics", []):
        for sm in rm.get("scopeMetrics", []):
            for m in sm.get("metrics", []):
                for kind in ("gauge", "sum", "histogram", "exponentialHistogram", "summary"):
                    n += len(m.get(kind, {}).get("dataPoints", []))
    return n
