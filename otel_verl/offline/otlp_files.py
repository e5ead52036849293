"""Read the OTLP JSON-lines files the ``otlp_json_file`` exporters write (one per process).

Used by ``otel-verl summary``/``report``/``replay`` and by the tests that check a real run's telemetry.
The files are written by other jobs on a shared file system, so nothing in them is trusted: a line
is used only when it is an OTLP export request of its signal, as protobuf's ``json_format`` reads
it into the opentelemetry-proto message (every field of the right type, text that is UTF-8), whose
ids are hex of their length, whose numbers are numbers and whose spans end at or after their start.

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
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_verl.commands.errors import PROBLEM, USAGE, CommandError
from otel_verl.semconv import RES_SERIES_IDENTITY as SERIES_IDENTITY

SIGNALS = ("traces", "metrics", "logs")
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
# OTLP JSON writes ids as hex (case-insensitive); the readers keep them lowercase.
_TRACE_ID = re.compile("[0-9a-f]{32}")
_SPAN_ID = re.compile("[0-9a-f]{16}")


class BadRequest(ValueError):
    """A stored request the readers do not use; the message says why (``Skipped``'s reason)."""


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


@dataclass(slots=True)
class SpanLink:
    """A span link (OTLP ``links`` entry): the linked span's ids and the link's attributes."""

    trace_id: str
    span_id: str
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
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


@dataclass(slots=True)
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


def signal_files(folder: str | Path, signal: str) -> list[Path]:
    """The OTLP JSON-lines files of one signal in ``folder``, sorted (``<signal>-*.jsonl``)."""
    return sorted(Path(folder).glob(f"{signal}-*.jsonl"))


def run_folder(folder: str | Path, signals: tuple[str, ...] = SIGNALS) -> Path:
    """``folder``, checked to be a readable folder with files of ``signals``; else a ``CommandError``."""
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
    if not any(signal_files(folder, sig) for sig in signals):
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


def iter_lines(
    path: Path,
    skipped: Skipped | None = None,
    upto: int | None = None,
    on_open: Callable[[os.stat_result], bool] | None = None,
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(line number, raw line, decoded JSON object) for each usable non-empty line of one file.

    Only a regular file is read, and only as far as it was long when opened (or ``upto`` bytes, if
    fewer): a file another job keeps writing, a FIFO or a link to ``/dev/zero`` cannot make a reader
    run forever. ``on_open`` sees the opened file's status first; False: read nothing.
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
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                skipped.line(path, number, "not UTF-8 text")
                continue
            if not text:
                continue
            try:
                batch = json.loads(text)
            except (ValueError, RecursionError):
                # the exporter ends every line with a newline: one without is a write cut short
                skipped.line(path, number, "not JSON" if complete else "cut short")
                continue
            if not isinstance(batch, dict):
                skipped.line(path, number, "not an OTLP export request")
                continue
            yield number, text, batch


def requests(
    folder: Path, signal: str, skipped: Skipped | None = None
) -> Iterator[tuple[Path, int, str, dict[str, Any]]]:
    """(file, line number, raw line, request) for every stored export request of ``signal``.

    A JSON object without the signal's top-level list (``resourceSpans``, ...) is not one: skipped.
    """
    skipped = Skipped() if skipped is None else skipped
    key = REQUEST_KEYS[signal][0]
    for path in signal_files(folder, signal):
        for number, text, batch in iter_lines(path, skipped):
            if not isinstance(batch.get(key), list):
                skipped.line(path, number, f"not an OTLP {signal} request")
                continue
            yield path, number, text, batch


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


_DECODERS: dict[str, Callable[[dict[str, Any]], list[Any]]] = {"traces": _spans, "metrics": _points, "logs": _logs}


def decode(signal: str, batch: dict[str, Any]) -> list[Any]:
    """The records (``SpanRecord``, ``MetricPoint``, ``LogEntry``) of one stored request of ``signal``.

    The one check every reader (and replay, through ``check_request``) applies: the request must be
    an OTLP export request as ``json_format`` reads it into ``REQUEST_MESSAGES[signal]`` (fields
    it does not know, from a newer exporter, are ignored), then pass the checks of its records:
    hex ids, numbers that are numbers (NaN and infinities included), spans that do not end before
    they start. Else a ``BadRequest`` naming why.
    """
    try:
        json_format.ParseDict(batch, REQUEST_MESSAGES[signal](), ignore_unknown_fields=True)
    except (json_format.ParseError, *_MALFORMED) as exc:
        if "surrogate" in str(exc):  # a lone "\ud800" escape: text no UTF-8 can hold
            raise BadRequest("text that is not UTF-8 (a lone surrogate)") from None
        raise BadRequest(f"not an OTLP {signal} request") from None
    try:
        return _DECODERS[signal](batch)
    except BadRequest:
        raise
    except _MALFORMED as exc:
        raise BadRequest(f"not an OTLP {signal} request") from exc


def check_request(signal: str, batch: dict[str, Any]) -> int:
    """The items of one stored request, checked as the readers check them (``decode``: replay sends
    exactly what summary and report read); a ``BadRequest`` (a ValueError) when they would skip it."""
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
    file's identity and length when first opened, and the lines it skipped (named once, by the first).
    A file whose identity changed in between (replaced) is read again with every check."""

    files: dict[Path, tuple[int, int, int]] = field(default_factory=dict)  # file -> (device, inode, size)
    bad: set[tuple[Path, int]] = field(default_factory=set)  # (file, line number) the first reading skipped


def file_records(
    path: Path, signal: str, skipped: Skipped, reading: Reading, again: bool = False
) -> Iterator[tuple[int, list[Any]]]:
    """(line number, records) for each usable stored request of one ``signal`` file.

    First reading (``again`` False): every line checked by ``decode``; the file's identity and the
    lines skipped go into ``reading``. Second one: the same bytes, the same lines, and the checks
    the first already made are not made twice (the records are built as before).
    """
    key = REQUEST_KEYS[signal][0]
    mark = reading.files.get(path)
    if again and mark is None:
        return
    trusted = [False]

    def opened(st: os.stat_result) -> bool:
        if not again:
            reading.files[path] = (st.st_dev, st.st_ino, st.st_size)
        else:
            trusted[0] = (st.st_dev, st.st_ino) == mark[:2]  # type: ignore[index]
        return True

    quiet = Skipped()  # a second reading's problems were the first's to name
    for number, _, batch in iter_lines(path, quiet if again else skipped, mark[2] if again else None, opened):  # type: ignore[index]
        if again and (path, number) in reading.bad:
            continue
        try:
            if not isinstance(batch.get(key), list):
                raise BadRequest(f"not an OTLP {signal} request")
            records = _DECODERS[signal](batch) if trusted[0] else decode(signal, batch)
        except BadRequest as exc:
            if not again:
                skipped.line(path, number, str(exc))
                reading.bad.add((path, number))
            continue
        except _MALFORMED:
            continue  # trusted, yet changed in place: left out
        yield number, records


def read_log_records(folder: str | Path, skipped: Skipped | None = None) -> list[LogEntry]:
    return _read(folder, "logs", skipped)


def read_spans(folder: str | Path, skipped: Skipped | None = None) -> list[SpanRecord]:
    return _read(folder, "traces", skipped)


def read_metric_points(folder: str | Path, skipped: Skipped | None = None) -> list[MetricPoint]:
    return _read(folder, "metrics", skipped)


def _temporality(value: Any) -> int:
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
