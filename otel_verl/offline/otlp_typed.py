"""A stored traces or metrics line of the usual shape, decoded by ``msgspec`` into typed structs in
one step (the types checked as it parses), then made into ``SpanRecord`` or ``MetricPoint``
records: the fast path of ``otlp_files.file_records``.

The structs take only what the ``otlp_json_file`` exporters write and the readers use, spelled as
they spell it: ids as lowercase hex, times as strings of digits, an attribute's value one of a
string, an integer as a string, a finite double or a bool, or an array of those, a metric one of a
gauge, a sum or a histogram (a span's status, events and links are read by the general path's
functions). A line of any other shape (a field of another type, an unknown member of an
attribute's value, a number that is not finite, ``snake_case`` names where the readers read
``camelCase``, ids in capitals, two values where a ``oneof`` takes one) is refused here (``spans``
and ``points`` return None) and read by the general path (``otlp_files.decode``, every field as
``json_format`` reads it), which names why when it refuses it. So a line gives the same records
whichever path reads it; this one only reads the usual line without a check per field in Python.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import msgspec

from otel_verl.offline.otlp_fields import I32, SPAN_ID, TRACE_ID
from otel_verl.semconv import RES_SERIES_IDENTITY

_UNSET = msgspec.UNSET
Unset = msgspec.UnsetType
# Strings of digits are checked by ``_digits`` and ``_int64`` (a pattern here costs a regular
# expression per string): fixed64 and uint64 below 2**64, int64.
Digits = str
IntText = str
Finite = Annotated[float, msgspec.Meta(ge=-sys.float_info.max, le=sys.float_info.max)]
Enum32 = Annotated[int, msgspec.Meta(ge=I32[0], le=I32[1])]


class _Scalar(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    stringValue: str | Unset = _UNSET  # noqa: N815 (OTLP JSON's names)
    intValue: IntText | Unset = _UNSET  # noqa: N815
    doubleValue: Finite | Unset = _UNSET  # noqa: N815
    boolValue: bool | Unset = _UNSET  # noqa: N815


class _Array(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    values: tuple[_Scalar, ...] = ()


class _Value(_Scalar, forbid_unknown_fields=True, frozen=True):
    arrayValue: _Array | Unset = _UNSET  # noqa: N815 (of scalars: a nested array is the general path's)


class _KeyValue(msgspec.Struct, frozen=True):
    key: str
    value: _Value


class _Resource(msgspec.Struct):
    attributes: tuple[_KeyValue, ...] = ()


class _Point(msgspec.Struct):
    attributes: tuple[_KeyValue, ...] | Unset = _UNSET
    timeUnixNano: Digits | Unset = _UNSET  # noqa: N815
    startTimeUnixNano: Digits | Unset = _UNSET  # noqa: N815
    asDouble: Finite | Unset = _UNSET  # noqa: N815
    asInt: IntText | Unset = _UNSET  # noqa: N815
    sum: Finite | Unset = _UNSET
    count: Digits | Unset = _UNSET
    explicitBounds: list[Finite] = []  # noqa: N815
    bucketCounts: list[Digits] = []  # noqa: N815


class _Data(msgspec.Struct):
    dataPoints: list[_Point] = []  # noqa: N815
    aggregationTemporality: Enum32 = 0  # noqa: N815


class _Metric(msgspec.Struct):
    name: str
    gauge: _Data | Unset = _UNSET
    sum: _Data | Unset = _UNSET
    histogram: _Data | Unset = _UNSET
    exponentialHistogram: Any = _UNSET  # noqa: N815 (a kind the readers skip: left to the general path)
    summary: Any = _UNSET


class _Scope(msgspec.Struct):
    metrics: list[_Metric] = []


class _ResourceMetrics(msgspec.Struct):
    resource: _Resource = msgspec.field(default_factory=_Resource)
    scopeMetrics: list[_Scope] = []  # noqa: N815


class _Request(msgspec.Struct):
    resourceMetrics: list[_ResourceMetrics]  # noqa: N815


_DECODER = msgspec.json.Decoder(_Request)


class _Other(Exception):
    """Not the usual shape: the general path reads the line."""


def _digits(text: str) -> int:
    """A fixed64 or uint64 as the exporter writes it: up to 19 ASCII digits."""
    if len(text) < 20 and text.isascii() and text.isdigit():
        return int(text)
    raise _Other


def _counts(texts: list[str]) -> list[int]:
    """``_digits`` of each of a histogram's bucket counts, checked together."""
    if not texts:
        return []
    joined = "".join(texts)
    if joined.isascii() and joined.isdigit() and min(map(len, texts)) > 0 and max(map(len, texts)) < 20:
        return list(map(int, texts))
    raise _Other


def _int64(text: str) -> int:
    """An int64 as the exporter writes it: up to 18 ASCII digits, a minus sign before them or not."""
    if len(text) < 19 and text.isascii() and (text.isdigit() or (text[:1] == "-" and text[1:].isdigit())):
        return int(text)
    raise _Other


MAX_CACHED = 4096  # points' attribute sets remembered decoded (a run has a few hundred series)
_cached: dict[tuple[_KeyValue, ...], dict[str, Any]] = {}


def _point_attributes(
    entries: tuple[_KeyValue, ...], resource: dict[str, Any], identity: tuple, own_attrs: Any
) -> dict[str, Any]:
    """A point's attributes, the copies of its resource's series identity (``identity``) left out:
    the dict made for an equal set before when there is one (the readers share equal attributes
    and change none)."""
    key = (entries, identity)
    found = _cached.get(key)
    if found is None:
        if len(_cached) >= MAX_CACHED:
            _cached.clear()
        found = _cached[key] = own_attrs(_attributes(entries), resource)
    return found


MAX_RESOURCES = 256  # resources remembered decoded (a run has one per process)
_resources: dict[tuple[_KeyValue, ...], dict[str, Any]] = {}


def _resource(entries: tuple[_KeyValue, ...]) -> dict[str, Any]:
    """A request's resource: the dict made for an equal one before when there is one (a process
    sends the same resource with every request; the readers change none). One holding a double is
    made anew (``0.0`` and ``-0.0`` are equal keys)."""
    found = _resources.get(entries)
    if found is None:
        found = _attributes(entries)
        if not any(type(v) is float or type(v) is tuple for v in found.values()):
            if len(_resources) >= MAX_RESOURCES:
                _resources.clear()
            _resources[entries] = found
    return found


def _scalar(v: _Scalar) -> Any:
    """One value of the four kinds (exactly one set)."""
    if v.stringValue is not _UNSET:
        if v.intValue is not _UNSET or v.doubleValue is not _UNSET or v.boolValue is not _UNSET:
            raise _Other
        return v.stringValue
    if v.intValue is not _UNSET:
        if v.doubleValue is not _UNSET or v.boolValue is not _UNSET:
            raise _Other
        return _int64(v.intValue)
    if v.doubleValue is not _UNSET:
        if v.boolValue is not _UNSET:
            raise _Other
        return v.doubleValue
    if v.boolValue is not _UNSET:
        return v.boolValue
    raise _Other  # an empty value


def _attributes(entries: tuple[_KeyValue, ...] | list[_KeyValue]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in entries:
        v = kv.value
        string, integer, double, boolean = v.stringValue, v.intValue, v.doubleValue, v.boolValue
        if v.arrayValue is not _UNSET:
            if string is not _UNSET or integer is not _UNSET or double is not _UNSET or boolean is not _UNSET:
                raise _Other
            out[kv.key] = tuple(_scalar(x) for x in v.arrayValue.values)
        elif string is not _UNSET:
            if integer is not _UNSET or double is not _UNSET or boolean is not _UNSET:
                raise _Other
            out[kv.key] = string
        elif integer is not _UNSET:
            if double is not _UNSET or boolean is not _UNSET:
                raise _Other
            # ``_int64``, inline: an attribute's value is the most common int64 of a line
            if (
                len(integer) < 19
                and integer.isascii()
                and (integer.isdigit() or (integer[:1] == "-" and integer[1:].isdigit()))
            ):
                out[kv.key] = int(integer)
            else:
                raise _Other
        elif double is not _UNSET:
            if boolean is not _UNSET:
                raise _Other
            out[kv.key] = double
        elif boolean is not _UNSET:
            out[kv.key] = boolean
        else:  # an empty value
            raise _Other
    return out


def points(text: str, own_attrs: Any, point: Any) -> list[Any] | None:
    """The records of a metrics line of the usual shape; None for any other line. ``own_attrs``
    (``otlp_files._without_identity``) and ``point`` (``MetricPoint``) are the general path's, so both
    paths make the same records."""
    try:
        request = _DECODER.decode(text)
        return _points(request, own_attrs, point)
    except (msgspec.DecodeError, _Other):
        return None


def _points(request: _Request, own_attrs: Any, point: Any) -> list[Any]:
    out: list[Any] = []
    append = out.append
    times: dict[str, int] = {}  # a request's points share a few times: each string checked once
    for rm in request.resourceMetrics:
        resource = _resource(rm.resource.attributes)
        identity = tuple(resource.get(k) for k in RES_SERIES_IDENTITY)
        for scope in rm.scopeMetrics:
            for m in scope.metrics:
                if m.exponentialHistogram is not _UNSET or m.summary is not _UNSET:
                    raise _Other
                data_of = (("gauge", m.gauge), ("sum", m.sum), ("histogram", m.histogram))
                kinds = [k for k, d in data_of if d is not _UNSET]
                if not kinds:
                    continue
                if len(kinds) > 1:
                    raise _Other
                kind = kinds[0]
                data: _Data = getattr(m, kind)
                temporality = data.aggregationTemporality
                name = m.name
                histogram = kind == "histogram"
                for p in data.dataPoints:
                    if histogram:
                        value: float | None = None if p.sum is _UNSET else float(p.sum)
                        count: int | None = 0 if p.count is _UNSET else _digits(p.count)
                        bounds: list[float] | None = [float(b) for b in p.explicitBounds]
                        buckets: list[int] | None = _counts(p.bucketCounts)
                    else:
                        count, bounds, buckets = None, None, None
                        if p.asDouble is not _UNSET:
                            if p.asInt is not _UNSET:
                                raise _Other
                            value = float(p.asDouble)
                        elif p.asInt is _UNSET:
                            value = None
                        else:
                            _int64(p.asInt)
                            value = float(p.asInt)  # "-0": -0.0
                    attrs = p.attributes
                    text = p.timeUnixNano
                    if text is _UNSET:
                        time_ns = 0
                    else:
                        time_ns = times.get(text)  # type: ignore[assignment]
                        if time_ns is None:
                            time_ns = times[text] = _digits(text)
                    text = p.startTimeUnixNano
                    if text is _UNSET:
                        start_ns = 0
                    else:
                        start_ns = times.get(text)  # type: ignore[assignment]
                        if start_ns is None:
                            start_ns = times[text] = _digits(text)
                    append(
                        point(
                            name,
                            kind,
                            value,
                            count,
                            _point_attributes(attrs, resource, identity, own_attrs) if attrs else {},
                            resource,
                            time_ns,
                            bounds,
                            buckets,
                            start_ns,
                            temporality,
                        )
                    )
    return out


class _Span(msgspec.Struct):
    name: str
    traceId: str  # noqa: N815
    spanId: str  # noqa: N815
    startTimeUnixNano: str  # noqa: N815
    endTimeUnixNano: str  # noqa: N815
    parentSpanId: str = ""  # noqa: N815
    attributes: tuple[_KeyValue, ...] | Unset = _UNSET
    status: dict[str, Any] | Unset = _UNSET
    events: list[Any] | Unset = _UNSET  # kept as OTLP JSON: checked by the general path's ``events``
    links: list[Any] | Unset = _UNSET


class _ScopeSpans(msgspec.Struct):
    spans: list[_Span] = []


class _ResourceSpans(msgspec.Struct):
    resource: _Resource = msgspec.field(default_factory=_Resource)
    scopeSpans: list[_ScopeSpans] = []  # noqa: N815


class _TraceRequest(msgspec.Struct):
    resourceSpans: list[_ResourceSpans]  # noqa: N815


_TRACE_DECODER = msgspec.json.Decoder(_TraceRequest)


def spans(text: str, record: Any, status: Any, events: Any, link: Any) -> list[Any] | None:
    """The records of a traces line of the usual shape; None for any other line. ``record``
    (``SpanRecord``), ``status``, ``events`` and ``link`` are the general path's (``otlp_files``)."""
    try:
        request = _TRACE_DECODER.decode(text)
        return _spans(request, record, status, events, link)
    except (msgspec.DecodeError, _Other):
        return None


def _spans(request: _TraceRequest, record: Any, status: Any, events: Any, link: Any) -> list[Any]:
    out: list[Any] = []
    append = out.append
    unset = status(None)  # the status of a span that has none (most)
    trace_id, span_id = TRACE_ID.fullmatch, SPAN_ID.fullmatch
    for rs in request.resourceSpans:
        resource = _resource(rs.resource.attributes)
        for scope in rs.scopeSpans:
            for s in scope.spans:
                start, end = s.startTimeUnixNano, s.endTimeUnixNano  # ``_digits``, inline
                if not (
                    0 < len(start) < 20 and 0 < len(end) < 20 and (start + end).isascii() and (start + end).isdigit()
                ):
                    raise _Other
                start, end = int(start), int(end)  # type: ignore[assignment]
                if end < start:
                    raise _Other
                parent = s.parentSpanId
                if not (trace_id(s.traceId) and span_id(s.spanId) and (not parent or span_id(parent))):
                    raise _Other  # not lowercase hex of its length
                attrs = s.attributes
                append(
                    record(
                        s.name,
                        s.traceId,
                        s.spanId,
                        parent,
                        start,
                        end,
                        _attributes(attrs) if attrs is not _UNSET else {},
                        resource,
                        unset if s.status is _UNSET else status(s.status),
                        [] if s.events is _UNSET else events({"events": s.events}),
                        [] if s.links is _UNSET else [link(lk) for lk in s.links],
                    )
                )
    return out
