"""The readers' check as it was before ``otlp_fields`` (main at 8f9466b): protobuf's ``json_format``
over the whole request, then the readers' own checks while the records were built. Kept here as
the oracle of ``test_reader_matches_json_format.py``; not used by otel-verl."""

from __future__ import annotations

import json
import re
from typing import Any

from google.protobuf import json_format

from otel_verl.offline.otlp_fields import BadRequest
from otel_verl.offline.otlp_files import REQUEST_MESSAGES, SERIES_IDENTITY, LogEntry, MetricPoint, SpanLink, SpanRecord

CRASHED = "json_format raised SystemError"  # what a message given as a string with a lone surrogate did
_MALFORMED = (LookupError, TypeError, ValueError, AttributeError, ArithmeticError, RecursionError)
_TRACE_ID = re.compile("[0-9a-f]{32}")
_SPAN_ID = re.compile("[0-9a-f]{16}")


def check(signal: str, batch: dict[str, Any]) -> str | None:
    """Why ``json_format`` refuses ``batch`` (the reason the readers gave), or None."""
    try:
        json_format.ParseDict(batch, REQUEST_MESSAGES[signal](), ignore_unknown_fields=True)
    except SystemError:  # upb, given a name with a lone surrogate: the readers stopped here
        return CRASHED
    except (json_format.ParseError, *_MALFORMED) as exc:
        if "surrogate" in str(exc):
            return "text that is not UTF-8 (a lone surrogate)"
        return f"not an OTLP {signal} request"
    return None


def records(signal: str, batch: dict[str, Any]) -> list[Any]:
    """The readers' records of ``batch`` as they were built after ``check`` (BadRequest: refused)."""
    try:
        return {"traces": _spans, "metrics": _points, "logs": _logs}[signal](batch)
    except BadRequest:
        raise
    except _MALFORMED as exc:
        raise BadRequest(f"not an OTLP {signal} request") from exc


def _float(value: Any) -> float:
    """A double of a request. protojson writes ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``: those
    are kept, since a NaN loss or an infinite grad norm is exactly what a run's record must show (the
    guard fires on them); every chart, sum and sort downstream leaves non-finite values out."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadRequest("a number that is not a number")
    try:
        return float(value)
    except ValueError:
        raise BadRequest("a number that is not a number") from None


def _id(value: Any, pattern: re.Pattern[str], optional: bool = True) -> str:
    """A trace or span id (``pattern``: 32 or 16 hex digits), lowercase; ``""`` when ``optional`` and absent."""
    text = _str(value).lower()
    if (optional and not text) or pattern.fullmatch(text):
        return text
    raise BadRequest("an id that is not hex of its length (32 digits for a trace, 16 for a span)")


def _value(v: dict[str, Any], frozen: bool = True) -> Any:
    """An OTLP ``AnyValue``. ``frozen`` (attribute values): an array as a tuple and a map as its JSON
    text, so that any value can be a key (a stage, a process, a server); else a list and a dict."""
    if "intValue" in v:
        return int(v["intValue"])  # OTLP JSON writes int64 as a string
    if "doubleValue" in v:
        return _float(v["doubleValue"])
    if "arrayValue" in v:
        values = [_value(x, frozen) for x in v["arrayValue"].get("values", [])]
        return tuple(values) if frozen else values
    if "kvlistValue" in v:  # a map, e.g. a sampled generation's {prompt, response} body
        items = {_str(a["key"]): _value(a.get("value", {}), False) for a in v["kvlistValue"].get("values") or []}
        return _body_text(items) if frozen else items
    return next(iter(v.values()), None)


def _attrs(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Attributes: each value a str, int, float, bool, bytes' base64 text, tuple of those, or a map's JSON text."""
    return {_str(a["key"]): _value(a.get("value", {})) for a in items or []}


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _body_text(value: Any) -> str:
    """A log body as text: strings as they are, a map or a list (structured bodies) as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, default=str)
    return "" if value is None else str(value)


# The JSON file exporter writes a span's status code as its number; protojson writes the name.
_STATUS_NAMES = {0: "STATUS_CODE_UNSET", 1: "STATUS_CODE_OK", 2: "STATUS_CODE_ERROR"}


def _status(status: Any) -> str:
    """A span's status code as its OTLP name (``STATUS_CODE_ERROR``), whichever way it was written."""
    code = (status or {}).get("code", 0)
    if isinstance(code, bool) or not isinstance(code, (int, str)):
        raise TypeError(f"expected a status code, got {type(code).__name__}")
    return _STATUS_NAMES.get(code, str(code)) if isinstance(code, int) else code


def _spans(batch: dict[str, Any]) -> list[SpanRecord]:
    out: list[SpanRecord] = []
    for rs in batch["resourceSpans"]:
        resource = _attrs(rs.get("resource", {}).get("attributes"))
        for ss in rs.get("scopeSpans", []):
            for s in ss.get("spans", []):
                start, end = int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])
                if end < start:
                    raise BadRequest("a span that ends before it starts")
                out.append(
                    SpanRecord(
                        name=_str(s["name"]),
                        trace_id=_id(s["traceId"], _TRACE_ID, optional=False),
                        span_id=_id(s["spanId"], _SPAN_ID, optional=False),
                        parent_id=_id(s.get("parentSpanId", ""), _SPAN_ID),
                        start_ns=start,
                        end_ns=end,
                        attributes=_attrs(s.get("attributes")),
                        resource=resource,
                        status=_status(s.get("status")),
                        events=list(s.get("events", [])),
                        links=[
                            SpanLink(
                                _id(lk.get("traceId", ""), _TRACE_ID, optional=False),
                                _id(lk.get("spanId", ""), _SPAN_ID, optional=False),
                                _attrs(lk.get("attributes")),
                            )
                            for lk in s.get("links", [])
                        ],
                    )
                )
    return out


def _own_attrs(items: Any, resource: dict[str, Any]) -> dict[str, Any]:
    """A metric point's attributes less the copies of its resource's series identity that the
    exporting process put on every point (``process.point_identity``): here they are the resource's."""
    attrs = _attrs(items)
    return {k: v for k, v in attrs.items() if k not in SERIES_IDENTITY or resource.get(k) != v}


def _points(batch: dict[str, Any]) -> list[MetricPoint]:
    out: list[MetricPoint] = []
    for rm in batch["resourceMetrics"]:
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
                            value = _float(value) if value is not None else None
                        else:
                            value = p.get("asDouble", p.get("asInt"))
                            value, count = (_float(value) if value is not None else None), None
                        out.append(
                            MetricPoint(
                                _str(m["name"]),
                                kind,
                                value,
                                count,
                                _own_attrs(p.get("attributes"), resource),
                                resource,
                                int(p.get("timeUnixNano", 0)),
                                [_float(b) for b in p.get("explicitBounds", [])] if kind == "histogram" else None,
                                [int(c) for c in p.get("bucketCounts", [])] if kind == "histogram" else None,
                                int(p.get("startTimeUnixNano", 0)),
                                temporality,
                            )
                        )
    return out


def _logs(batch: dict[str, Any]) -> list[LogEntry]:
    out: list[LogEntry] = []
    for rl in batch["resourceLogs"]:
        resource = _attrs(rl.get("resource", {}).get("attributes"))
        for sl in rl.get("scopeLogs", []):
            for r in sl.get("logRecords", []):
                body = r.get("body") or {}
                out.append(
                    LogEntry(
                        event_name=_str(r.get("eventName", "")),
                        body=_body_text(_value(body, frozen=False)) if body else "",
                        attributes=_attrs(r.get("attributes")),
                        resource=resource,
                        trace_id=_id(r.get("traceId", ""), _TRACE_ID),
                        span_id=_id(r.get("spanId", ""), _SPAN_ID),
                        time_ns=int(r.get("timeUnixNano") or r.get("observedTimeUnixNano") or 0),
                        severity=_str(r.get("severityText", "")),
                    )
                )
    return out


def _temporality(value: Any) -> int:
    if isinstance(value, str) and not value.isdigit():  # enum name, as protojson may write it
        return {"AGGREGATION_TEMPORALITY_DELTA": 1, "AGGREGATION_TEMPORALITY_CUMULATIVE": 2}.get(value, 0)
    return int(value or 0)
