"""Read the OTLP JSON-lines files the ``otlp_json_file`` exporters write (one per process).

Used by ``otel-verl summary``/``report``/``replay`` and by the tests that check a real run's telemetry.
The files are written by other jobs on a shared file system, so nothing in them is trusted: a line
is used only when it is an OTLP export request of its signal whose every field the readers read is
as protobuf's ``json_format`` reads it into the opentelemetry-proto message (of the right type,
text that is UTF-8), whose ids are hex of their length, whose numbers are numbers and whose spans
end at or after their start (``otlp_fields``: each field checked once, where it is read). Replay
checks a line whole with ``json_format`` before it sends it (``check_request``). A traces or
metrics line of the usual shape is decoded into typed structs first (``otlp_typed``: the same
records, fewer checks in Python); any other line goes the general way.

Whatever cannot be used is left out and noted in a ``Skipped`` (pass one to the readers): a line
that is not JSON (the last line of a process killed while writing is cut short), not UTF-8 text,
longer than ``MAX_LINE_BYTES``, or not such a request; a file that cannot be opened or is not a
regular file (a FIFO or a device would never end). A file is read up to the size it had when
it was opened. Nothing here writes to the folder. A metric point's copies of its resource's series
identity (``process.point_identity``) are left to the resource.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_verl.exits import PROBLEM, USAGE, CommandError
from otel_verl.offline import otlp_fields as fields
from otel_verl.offline import otlp_typed
from otel_verl.offline.otlp_fields import BadRequest
from otel_verl.semconv import DISTRO_FILE_PREFIX, RES_SERIES_IDENTITY

SIGNALS = ("traces", "metrics", "logs")
SERIES_IDENTITY = frozenset(RES_SERIES_IDENTITY)
# signal -> (the request's list of resources, each resource's list of scopes, each scope's items)
REQUEST_KEYS = {
    "traces": ("resourceSpans", "scopeSpans", "spans"),
    "metrics": ("resourceMetrics", "scopeMetrics", "metrics"),
    "logs": ("resourceLogs", "scopeLogs", "logRecords"),
}
# The message each signal's lines are, as OTLP/HTTP takes them (the shape a line is checked against).
REQUEST_MESSAGES: dict[str, type[Message]] = {
    "traces": ExportTraceServiceRequest,
    "metrics": ExportMetricsServiceRequest,
    "logs": ExportLogsServiceRequest,
}
# A stored line is one export batch: a few MB at most (the BatchSpanProcessor sends up to 512
# spans; each attribute is bounded). Longer lines are not read, so a stray file cannot exhaust memory.
MAX_LINE_BYTES = 256 * 1024 * 1024
# Errors a malformed request raises while it is decoded (missing key, wrong JSON type, bad number).
_MALFORMED = (LookupError, TypeError, ValueError, AttributeError, ArithmeticError, RecursionError)


@dataclass
class Skipped:
    """What the readers left out, so that whoever shows the rest can say so in one line."""

    lines: dict[Path, list[tuple[int, str]]] = field(default_factory=dict)  # file -> [(line number, why)]
    files: dict[Path, str] = field(default_factory=dict)  # file -> why it could not be read

    def line(self, path: Path, number: int, why: str) -> None:
        self.lines.setdefault(path, []).append((number, why))

    def file(self, path: Path, why: str) -> None:
        self.files[path] = why

    def __bool__(self) -> bool:
        return bool(self.lines or self.files)

    @property
    def line_count(self) -> int:
        return sum(len(v) for v in self.lines.values())

    def describe(self, most: int = 6) -> str:
        """``skipped 2 lines and 1 file: traces-a.jsonl line 4 (cut short), ...``: at most ``most`` places."""
        places = [f"{p.name} ({why})" for p, why in self.files.items()]
        for path, bad in self.lines.items():
            reasons = sorted({why for _, why in bad})
            where = f"line {bad[0][0]}" if len(bad) == 1 else f"{len(bad)} lines from line {bad[0][0]}"
            places.append(f"{path.name} {where} ({'; '.join(reasons)})")
        counts = []
        if self.line_count:
            counts.append(f"{self.line_count} line{'s' if self.line_count != 1 else ''}")
        if self.files:
            counts.append(f"{len(self.files)} unreadable file{'s' if len(self.files) != 1 else ''}")
        more = f", and {len(places) - most} more files" if len(places) > most else ""
        return f"skipped {' and '.join(counts)}: {', '.join(places[:most])}{more}"


def size(n: int) -> str:
    """``256 MiB``, ``4096 bytes``."""
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n} bytes"


# The JSON file exporter writes a span's status code as its number; protojson writes the name.
_STATUS_NAMES = {0: "STATUS_CODE_UNSET", 1: "STATUS_CODE_OK", 2: "STATUS_CODE_ERROR"}
_STATUS_ENUM = frozenset(_STATUS_NAMES.values())
_TEMPORALITY_ENUM = frozenset(
    {"AGGREGATION_TEMPORALITY_UNSPECIFIED", "AGGREGATION_TEMPORALITY_DELTA", "AGGREGATION_TEMPORALITY_CUMULATIVE"}
)


def _status(status: Any) -> str:
    """A span's status code as its OTLP name (``STATUS_CODE_ERROR``), whichever way it was written."""
    if not status and (status is None or type(status) is dict):
        return "STATUS_CODE_UNSET"
    code = (fields.optional_message(status) or {}).get("code", 0)
    if isinstance(code, bool) or not isinstance(code, (int, str)):
        raise TypeError(f"expected a status code, got {type(code).__name__}")
    fields.enum(code, _STATUS_ENUM)
    return _STATUS_NAMES.get(code, str(code)) if isinstance(code, int) else code


@dataclass(slots=True)
class SpanLink:
    """A span link (OTLP ``links`` entry): the linked span's ids and the link's attributes."""

    trace_id: str
    span_id: str
    attributes: dict[str, Any] = field(default_factory=dict)


class SpanRecord(msgspec.Struct):
    """One stored span with its resource (a ``msgspec.Struct``: a long run's reading makes millions
    of records, each made in one call to C)."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status: str
    events: list[dict[str, Any]] = msgspec.field(default_factory=list)
    links: list[SpanLink] = msgspec.field(default_factory=list)

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def event_attributes(self, name: str) -> list[dict[str, Any]]:
        """The attributes of each event called ``name`` (events stay as OTLP JSON in ``events``)."""
        depth = fields.DEPTH_EVENT
        return [fields.attributes(e.get("attributes"), depth) for e in self.events if e.get("name") == name]


class MetricPoint(msgspec.Struct):
    """One stored metric data point with its resource (a ``msgspec.Struct``, as ``SpanRecord``)."""

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


@dataclass(slots=True)
class LogEntry:
    """One stored log record (OTLP ``logRecords`` entry) with its resource."""

    event_name: str
    body: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    trace_id: str
    span_id: str
    time_ns: int
    severity: str


def signal_files(folder: str | Path, signal: str, *, theirs: bool = False) -> list[Path]:
    """The OTLP JSON-lines files of one signal in ``folder``, sorted (``<signal>-*.jsonl``); ``theirs``:
    with the files of the global providers a distro built (``distro-<signal>-*.jsonl``: no run identity)."""
    found = sorted(Path(folder).glob(f"{signal}-*.jsonl"))
    return found + sorted(Path(folder).glob(f"{DISTRO_FILE_PREFIX}{signal}-*.jsonl")) if theirs else found


def run_folder(folder: str | Path, signals: tuple[str, ...] = SIGNALS, *, theirs: bool = False) -> Path:
    """``folder``, checked to be a readable folder with files of ``signals`` (``theirs``:
    ``signal_files``); else a ``CommandError``."""
    folder = Path(folder)
    if not folder.exists():
        raise CommandError(f"{folder} does not exist", USAGE)
    if not folder.is_dir():
        raise CommandError(
            f"{folder} is not a folder: give the run's telemetry folder (the one OTEL_VERL_FILE_DIR named)", USAGE
        )
    try:
        with os.scandir(folder):
            pass
    except OSError as exc:
        raise CommandError(f"cannot read {folder}: {exc.strerror or exc}") from None
    if not any(signal_files(folder, sig, theirs=theirs) for sig in signals):
        names = ", ".join(f"{sig}-*.jsonl" for sig in signals)
        below = _telemetry_below(folder, signals)
        hint = f"; {below} under it has them: pass that folder" if below is not None else ""
        raise CommandError(f"no telemetry files ({names}) in {folder}{hint}", PROBLEM)
    return folder


MAX_SUBFOLDERS = 64  # looked into for a telemetry folder, when the one given has no files


def _telemetry_below(folder: Path, signals: tuple[str, ...]) -> Path | None:
    """A folder right under ``folder`` that holds telemetry files (``telemetry/`` first, as the
    CPU demo writes it; then the others by name, at most ``MAX_SUBFOLDERS``); None when none does."""
    try:
        with os.scandir(folder) as entries:
            names = [e.name for e in itertools.islice(entries, MAX_SUBFOLDERS) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return None
    for name in sorted(names, key=lambda n: (n != "telemetry", n)):
        try:
            if any(signal_files(folder / name, sig) for sig in signals):
                return folder / name
        except OSError:
            continue
    return None


# What a run folder's entry is when it is not a regular file (st_mode tests, in the order tried).
_SPECIAL = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _open_regular(path: Path) -> tuple[Any, os.stat_result]:
    """``path`` open for reading, and its status then; OSError (``strerror`` says why) when it cannot
    be opened or is not a regular file. A FIFO opens without waiting for a writer (O_NONBLOCK)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)  # of what was opened: a name swapped after the listing is checked too
        if stat.S_ISDIR(st.st_mode):
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR))
        if not stat.S_ISREG(st.st_mode):
            what = next((name for test, name in _SPECIAL if test(st.st_mode)), "of another kind")
            raise OSError(errno.EINVAL, f"not a regular file ({what})")
        return os.fdopen(fd, "rb"), st
    except BaseException:
        os.close(fd)
        raise


def _lines(f: Any, size: int) -> Iterator[bytes | None]:
    """The lines of the first ``size`` bytes of ``f``, each read up to ``MAX_LINE_BYTES`` (None for
    a longer one, whose rest is read past in pieces and never held)."""
    left = size
    while left > 0:
        raw = f.readline(min(MAX_LINE_BYTES + 1, left))
        if not raw:
            return
        left -= len(raw)
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while left > 0:
                rest = f.readline(min(2**20, left))
                left -= len(rest)
                if not rest or rest.endswith(b"\n"):
                    break
            yield None
            continue
        yield raw


class Decoded(list):  # type: ignore[type-arg]
    """A line's records, made by a fast path (``otlp_typed``) instead of its JSON object."""


def iter_lines(
    path: Path,
    skipped: Skipped | None = None,
    upto: int | None = None,
    on_open: Callable[[os.stat_result], bool] | None = None,
    fast: Callable[[str], Decoded | None] | None = None,
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(line number, raw line, decoded JSON object) for each usable non-empty line of one file.

    Only a regular file is read, and only as far as it was long when opened (or ``upto`` bytes, if
    fewer): a file another job keeps writing, a FIFO or a link to ``/dev/zero`` cannot make a reader
    run forever. ``on_open`` sees the opened file's status first; False: read nothing. ``fast``: a
    line's records (``Decoded``, given in place of the object, its line as read, whitespace and all)
    or None, tried before the JSON parser.
    """
    skipped = Skipped() if skipped is None else skipped
    try:
        f, st = _open_regular(path)
    except OSError as exc:
        skipped.file(path, f"cannot read: {exc.strerror or exc}")
        return
    length = st.st_size if upto is None else min(st.st_size, upto)
    with f:
        if on_open is not None and not on_open(st):
            return
        number = 0
        lines = _lines(f, length)
        while True:
            try:
                raw = next(lines, b"")
            except OSError as exc:
                skipped.file(path, f"cannot read: {exc.strerror or exc}")
                return
            if raw == b"":
                return
            number += 1
            if raw is None:
                skipped.line(path, number, f"longer than {size(MAX_LINE_BYTES)}")
                continue
            complete = raw.endswith(b"\n")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                skipped.line(path, number, "not UTF-8 text")
                continue
            if not text or text.isspace():
                continue
            if fast is not None:  # JSON's own whitespace around the line is the fast path's (no copy made)
                records = fast(text)
                if records is not None:
                    yield number, text, records  # type: ignore[misc]
                    continue
            text = text.strip()
            try:
                batch = fields.parse(text)
            except (ValueError, RecursionError):
                # the exporter ends every line with a newline: one without is a write cut short
                skipped.line(path, number, "not JSON" if complete else "cut short")
                continue
            if not isinstance(batch, dict):
                skipped.line(path, number, "not an OTLP export request")
                continue
            yield number, text, batch


def requests(
    folder: Path, signal: str, skipped: Skipped | None = None, *, theirs: bool = False
) -> Iterator[tuple[Path, int, str, dict[str, Any]]]:
    """(file, line number, raw line, request) for every stored export request of ``signal``
    (``theirs``: ``signal_files``).

    A JSON object without the signal's top-level list (``resourceSpans``, ...) is not one: skipped.
    """
    skipped = Skipped() if skipped is None else skipped
    key = REQUEST_KEYS[signal][0]
    for path in signal_files(folder, signal, theirs=theirs):
        for number, text, batch in iter_lines(path, skipped):
            if not isinstance(batch.get(key), list):
                skipped.line(path, number, f"not an OTLP {signal} request")
                continue
            yield path, number, text, batch


def _resource(r: dict[str, Any], depth: int = fields.DEPTH_RESOURCE) -> dict[str, Any]:
    """A ResourceSpans' (or -Metrics', -Logs') resource attributes."""
    if type(r) is not dict:
        raise TypeError("a resource's entry that is not an object")
    resource = r.get("resource", {})
    if type(resource) is not dict:
        raise TypeError("a resource that is not an object")
    return fields.attributes(resource.get("attributes"), depth)


def _scoped(batch: dict[str, Any], signal: str) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(resource attributes, item) for each item of a request: spans, metrics or log records."""
    resources_key, scopes_key, items_key = REQUEST_KEYS[signal]
    for r in batch[resources_key]:
        resource = _resource(r)
        for scope in fields.items(r, scopes_key):
            if type(scope) is not dict:
                raise TypeError("a scope's entry that is not an object")
            for item in fields.items(scope, items_key):
                if type(item) is not dict:
                    raise TypeError("an item that is not an object")
                yield resource, item


def _events(span: dict[str, Any]) -> list[dict[str, Any]]:
    """A span's events, kept as OTLP JSON; what ``event_attributes`` reads of them is checked here."""
    events = fields.items(span, "events")
    for e in events:
        if type(e) is not dict:
            raise TypeError("an event that is not an object")
        if e.get("name") is not None:
            fields.text(e["name"])
        fields.attributes(e.get("attributes"), fields.DEPTH_EVENT)
    return list(events)


def _link(lk: Any) -> SpanLink:
    if type(lk) is not dict:
        raise TypeError("a link that is not an object")
    return SpanLink(
        fields.hex_id(lk.get("traceId", ""), fields.TRACE_ID, optional=False),
        fields.hex_id(lk.get("spanId", ""), fields.SPAN_ID, optional=False),
        fields.attributes(lk.get("attributes"), fields.DEPTH_EVENT),
    )


def _spans(batch: dict[str, Any]) -> list[SpanRecord]:
    out: list[SpanRecord] = []
    nanos, hex_id, trace_id, span_id = fields.nanos, fields.hex_id, fields.TRACE_ID, fields.SPAN_ID
    for resource, s in _scoped(batch, "traces"):
        start, end = nanos(s["startTimeUnixNano"]), nanos(s["endTimeUnixNano"])
        if end < start:
            raise BadRequest("a span that ends before it starts")
        name = s["name"]
        out.append(
            SpanRecord(
                name=name if type(name) is str else fields.text(name),
                trace_id=hex_id(s["traceId"], trace_id, optional=False),
                span_id=hex_id(s["spanId"], span_id, optional=False),
                parent_id=hex_id(s.get("parentSpanId", ""), span_id),
                start_ns=start,
                end_ns=end,
                attributes=fields.attributes(s.get("attributes"), fields.DEPTH_ITEM),
                resource=resource,
                status=_status(s.get("status")),
                events=_events(s) if "events" in s else [],
                links=[_link(lk) for lk in fields.items(s, "links")] if "links" in s else [],
            )
        )
    return out


def _own_attrs(items: Any, resource: dict[str, Any]) -> dict[str, Any]:
    """A metric point's attributes less the copies of its resource's series identity that the
    exporting process put on every point (``process.point_identity``): here they are the resource's."""
    if items is None:
        return {}
    return _without_identity(fields.attributes(items, fields.DEPTH_POINT), resource)


def _without_identity(attrs: dict[str, Any], resource: dict[str, Any]) -> dict[str, Any]:
    if SERIES_IDENTITY.isdisjoint(attrs):
        return attrs
    return {k: v for k, v in attrs.items() if k not in SERIES_IDENTITY or resource.get(k) != v}


_INF = float("inf")
KINDS = frozenset({"gauge", "sum", "histogram"})  # the kinds of metric the readers read
_DATA = frozenset({*KINDS, "exponentialHistogram", "summary"})  # a Metric's data: one of these (a oneof)


def _kind(m: dict[str, Any]) -> str | None:
    """Which of ``KINDS`` metric ``m`` is (None: another, or none)."""
    found = _DATA.intersection(m)
    if len(found) == 1:
        (kind,) = found
        return kind if kind in KINDS else None
    found = {k for k in found if k in KINDS or m[k] is not None}  # json_format: null is unset
    if len(found) > 1:
        raise ValueError("a metric of two kinds")
    return next((k for k in found if k in KINDS), None)


def _number_value(p: dict[str, Any]) -> float | None:
    """A gauge's or a sum's point value: ``asDouble`` or ``asInt`` (a oneof), as a float."""
    as_double, as_int = p.get("asDouble"), p.get("asInt")
    if as_int is not None:
        if as_double is not None:
            raise ValueError("a point with two values")
        fields.check_integer(as_int)  # sfixed64
    if as_double is not None:
        return fields.double(as_double)
    if "asDouble" in p or as_int is None:
        return None
    return fields.number(as_int)


def _points(batch: dict[str, Any]) -> list[MetricPoint]:
    out: list[MetricPoint] = []
    nanos_of = fields.nanos_of
    for resource, m in _scoped(batch, "metrics"):
        name = m.get("name")
        if name is not None and type(name) is not str:
            fields.text(name)
        kind = _kind(m)
        if kind is None:
            continue
        data = m[kind]
        if type(data) is not dict:
            raise TypeError("a metric's data that is not an object")
        temporality = _temporality(data.get("aggregationTemporality"), checked=kind != "gauge")
        for p in fields.items(data, "dataPoints"):
            if type(p) is not dict:
                raise TypeError("a point that is not an object")
            if kind == "histogram":
                total = p.get("sum")
                value, count = (fields.double(total) if total is not None else None), nanos_of(p, "count")
                bounds = [fields.double(b) for b in fields.items(p, "explicitBounds")]
                buckets = [fields.nanos(c) for c in fields.items(p, "bucketCounts")]
            else:
                value, count, bounds, buckets = p.get("asDouble"), None, None, None
                if not (type(value) is float and -_INF < value < _INF and "asInt" not in p):  # else as written
                    value = _number_value(p)
            attrs = p.get("attributes")
            time_ns = p.get("timeUnixNano")
            if not (type(time_ns) is str and len(time_ns) < 20 and time_ns.isascii() and time_ns.isdigit()):
                time_ns = nanos_of(p, "timeUnixNano")  # else read below, as written: digits below 2**64
            out.append(
                MetricPoint(
                    name if type(name) is str else fields.text(m["name"]),
                    kind,
                    value,
                    count,
                    _own_attrs(attrs, resource) if attrs is not None else {},
                    resource,
                    int(time_ns),
                    bounds,
                    buckets,
                    nanos_of(p, "startTimeUnixNano") if "startTimeUnixNano" in p else 0,
                    temporality,
                )
            )
    return out


def _logs(batch: dict[str, Any]) -> list[LogEntry]:
    out: list[LogEntry] = []
    for resource, r in _scoped(batch, "logs"):
        body = fields.optional_message(r.get("body"))
        time_ns, observed_ns = r.get("timeUnixNano"), r.get("observedTimeUnixNano")
        for value in (time_ns, observed_ns):
            if value is not None:
                fields.check_integer(value, 0, fields.U64)  # fixed64
        out.append(
            LogEntry(
                event_name=fields.text(r.get("eventName", "")),
                body=fields.body_text(fields.any_value(body, fields.DEPTH_BODY, frozen=False)) if body else "",
                attributes=fields.attributes(r.get("attributes"), fields.DEPTH_ITEM),
                resource=resource,
                trace_id=fields.hex_id(r.get("traceId", ""), fields.TRACE_ID),
                span_id=fields.hex_id(r.get("spanId", ""), fields.SPAN_ID),
                time_ns=int(time_ns or observed_ns or 0),
                severity=fields.text(r.get("severityText", "")),
            )
        )
    return out


_DECODERS: dict[str, Callable[[dict[str, Any]], list[Any]]] = {"traces": _spans, "metrics": _points, "logs": _logs}


def decode(signal: str, batch: dict[str, Any]) -> list[Any]:
    """The records (``SpanRecord``, ``MetricPoint``, ``LogEntry``) of one stored request of ``signal``.

    The one check every reader applies (``otlp_fields``): each field a record is made of must be as
    ``json_format`` reads it into ``REQUEST_MESSAGES[signal]``, and usable: hex ids, numbers that
    are numbers (NaN and infinities included), text that is UTF-8, spans that do not end before
    they start. Fields no reader uses are not looked at. Else a ``BadRequest`` naming why.
    """
    try:
        return _DECODERS[signal](batch)
    except BadRequest:
        raise
    except _MALFORMED as exc:
        raise BadRequest(f"not an OTLP {signal} request") from exc


def check_request(signal: str, batch: dict[str, Any]) -> int:
    """The items of one stored request that replay may send: one the readers read (``decode``) and
    an OTLP endpoint takes whole, every field as ``json_format`` reads it into
    ``REQUEST_MESSAGES[signal]`` (fields it does not know, from a newer exporter, are ignored);
    else a ``BadRequest`` (a ValueError) naming why."""
    try:
        json_format.ParseDict(batch, REQUEST_MESSAGES[signal](), ignore_unknown_fields=True)
    except SystemError:  # upb, asked for a field named by a lone surrogate (a message given as text)
        raise BadRequest(f"not an OTLP {signal} request") from None
    except (json_format.ParseError, *_MALFORMED) as exc:
        if "surrogate" in str(exc):  # a lone "\ud800" escape: text no UTF-8 can hold
            raise BadRequest(fields.SURROGATE) from None
        raise BadRequest(f"not an OTLP {signal} request") from None
    decode(signal, batch)
    return count_items(signal, batch)


def _read(folder: str | Path, signal: str, skipped: Skipped | None) -> list[Any]:
    """Every item of ``signal`` in ``folder``; a request ``decode`` refuses is skipped (and noted)."""
    out: list[Any] = []
    skipped = Skipped() if skipped is None else skipped
    for path, number, _, batch in requests(Path(folder), signal, skipped):
        try:
            out.extend(decode(signal, batch))
        except BadRequest as exc:
            skipped.line(path, number, str(exc))
    return out


@dataclass
class Reading:
    """What the first reading of a folder saw, so that a second one reads exactly the same: each
    file's length when first opened, and the lines it skipped (named once, by the first)."""

    files: dict[Path, tuple[int, int, int]] = field(default_factory=dict)  # file -> (device, inode, size)
    bad: set[tuple[Path, int]] = field(default_factory=set)  # (file, line number) the first reading skipped


def file_records(
    path: Path, signal: str, skipped: Skipped, reading: Reading, again: bool = False
) -> Iterator[tuple[int, list[Any]]]:
    """(line number, records) for each usable stored request of one ``signal`` file.

    Every line is checked by ``decode``. First reading (``again`` False): the file's identity and
    length and the lines skipped go into ``reading``. Second one: as far as the first read, the
    lines it skipped left out, and the problems named by the first only.
    """
    key = REQUEST_KEYS[signal][0]
    mark = reading.files.get(path)
    if again and mark is None:
        return

    def opened(st: os.stat_result) -> bool:
        if not again:
            reading.files[path] = (st.st_dev, st.st_ino, st.st_size)
        return True

    quiet = Skipped()  # a second reading's problems were the first's to name
    general, fast = _FAST.get(signal, (None, None))
    if _DECODERS[signal] is not general:  # another decoder put in the general one's place: every line to it
        fast = None
    for number, _, batch in iter_lines(path, quiet if again else skipped, mark[2] if again else None, opened, fast):  # type: ignore[index]
        if again and (path, number) in reading.bad:
            continue
        if type(batch) is Decoded:
            yield number, batch
            continue
        try:
            if not isinstance(batch.get(key), list):
                raise BadRequest(f"not an OTLP {signal} request")
            records = decode(signal, batch)
        except BadRequest as exc:
            if not again:
                skipped.line(path, number, str(exc))
                reading.bad.add((path, number))
            continue
        yield number, records


def _fast_metrics(text: str) -> Decoded | None:
    """A metrics line's records by ``otlp_typed`` when it is of the usual shape (else None)."""
    records = otlp_typed.points(text, _without_identity, MetricPoint)
    return None if records is None else Decoded(records)


def _fast_spans(text: str) -> Decoded | None:
    """A traces line's records by ``otlp_typed`` when it is of the usual shape (else None); its
    status, events and links read by the general path's functions."""
    try:
        records = otlp_typed.spans(text, SpanRecord, _status, _events, _link)
    except _MALFORMED:  # the general path names why
        return None
    return None if records is None else Decoded(records)


# signal -> (the general decoder, the fast path that makes its records from the usual line)
_FAST: dict[str, tuple[Callable[[dict[str, Any]], list[Any]], Callable[[str], Decoded | None]]] = {
    "metrics": (_points, _fast_metrics),
    "traces": (_spans, _fast_spans),
}


def read_log_records(folder: str | Path, skipped: Skipped | None = None) -> list[LogEntry]:
    return _read(folder, "logs", skipped)


def read_spans(folder: str | Path, skipped: Skipped | None = None) -> list[SpanRecord]:
    return _read(folder, "traces", skipped)


def read_metric_points(folder: str | Path, skipped: Skipped | None = None) -> list[MetricPoint]:
    return _read(folder, "metrics", skipped)


def _temporality(value: Any, checked: bool = True) -> int:
    """A sum's or histogram's ``aggregationTemporality`` (its number or name; ``checked``: a field
    of the message, which a gauge's is not)."""
    if type(value) is int and fields.I32[0] <= value <= fields.I32[1]:  # as the exporter writes it
        return value
    if checked and value is not None:
        fields.enum(value, _TEMPORALITY_ENUM)
    if isinstance(value, str) and not value.isdigit():  # enum name, as protojson may write it
        return {"AGGREGATION_TEMPORALITY_DELTA": 1, "AGGREGATION_TEMPORALITY_CUMULATIVE": 2}.get(value, 0)
    return int(value or 0)


def count_items(signal: str, batch: dict[str, Any]) -> int:
    """Spans, metric data points or log records in one OTLP export request (ValueError: not one)."""
    resources_key, scopes_key, items_key = REQUEST_KEYS[signal]
    try:
        if signal != "metrics":
            return sum(len(sc.get(items_key, [])) for r in batch[resources_key] for sc in r.get(scopes_key, []))
        n = 0
        for r in batch[resources_key]:
            for sc in r.get(scopes_key, []):
                for m in sc.get(items_key, []):
                    for kind in ("gauge", "sum", "histogram", "exponentialHistogram", "summary"):
                        n += len(m.get(kind, {}).get("dataPoints", []))
        return n
    except _MALFORMED as exc:
        raise ValueError(f"not an OTLP {signal} request") from exc
