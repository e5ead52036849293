"""Read the OTLP JSON-lines files the ``otlp_json_file`` exporters write (one per process).

Used by ``otel-verl summary`` and by the tests that check a real run's telemetry.
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

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


@dataclass
class MetricPoint:
    name: str
    kind: str  # gauge | sum | histogram
    value: float | None  # gauge/sum value; histogram sum
    count: int | None  # histogram count
    attributes: dict[str, Any]
    resource: dict[str, Any]
    time_ns: int


def _lines(folder: Path, prefix: str) -> Iterator[dict[str, Any]]:
    for path in sorted(Path(folder).glob(f"{prefix}-*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                yield json.loads(line)


def read_spans(folder: str | Path) -> list[SpanRecord]:
    out: list[SpanRecord] = []
    for batch in _lines(Path(folder), "traces"):
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
                        )
                    )
    return out


def read_metric_points(folder: str | Path) -> list[MetricPoint]:
    out: list[MetricPoint] = []
    for batch in _lines(Path(folder), "metrics"):
        for rm in batch.get("resourceMetrics", []):
            resource = _attrs(rm.get("resource", {}).get("attributes"))
            for sm in rm.get("scopeMetrics", []):
                for m in sm.get("metrics", []):
                    for kind in ("gauge", "sum", "histogram"):
                        if kind not in m:
                            continue
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
                                )
                            )
    return out
