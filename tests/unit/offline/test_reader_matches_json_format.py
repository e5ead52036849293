"""The readers judge a stored line by the fields they read, each as protobuf's ``json_format`` reads
it, where the line used to go through ``json_format`` whole first (``otlp_reference``, the oracle):
for the lines the SDK's file exporters write, and for each of them with one value replaced by a
hostile one (or removed), the reader keeps and refuses the same lines, for the same reason, with
the same records. Where they differ, by design:

- a line ``json_format`` refused only for a field no reader reads is now read, as the readers
  read the rest of it;
- a line is refused that was kept with an item the readers cannot read: an item given as a string
  or a list where an object goes (a metric ``"gauge"`` once matched as a substring), or a span
  event whose attributes are not attributes (read later, by ``event_attributes``, they stopped
  summary and report);
- a message given as a string holding a lone surrogate, or such an enum, made ``json_format``
  raise SystemError, which stopped summary and report: the line is refused."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.exporter.otlp.json.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.exporter.otlp.json.file._log_exporter import FileLogExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link, Status, StatusCode
from support import otlp_reference as reference

from otel_verl.offline import otlp_fields, otlp_files
from otel_verl.offline.otlp_fields import BadRequest

RESOURCE = Resource({"service.name": "verl", "verl.process.role": "taskrunner", "process.pid": 7})
ATTRS = {"s": "x", "i": 3, "f": 0.5, "b": True, "ls": ("a", "b"), "li": (1, 2)}


def _spans() -> list[str]:
    out = io.StringIO()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(stream=out)))
    tracer = provider.get_tracer("t", "1.0")
    with tracer.start_as_current_span("verl.step", attributes={"verl.step": 1}) as root:
        link = Link(root.get_span_context(), {"k": 1})
        with tracer.start_as_current_span("verl.gen", attributes=ATTRS, links=[link]) as child:
            child.add_event("verl.tail", {"n": 2, "name": "e"})
            child.set_status(Status(StatusCode.ERROR, "boom"))
    provider.shutdown()
    return out.getvalue().splitlines()


def _metrics() -> list[str]:
    reader = InMemoryMetricReader()
    meter = MeterProvider(resource=RESOURCE, metric_readers=[reader]).get_meter("m", "1.0")
    meter.create_counter("verl.count").add(3, {"a": "x"})
    meter.create_up_down_counter("verl.float_sum").add(1.5)
    meter.create_gauge("verl.gauge").set(0.25, {"verl.training.step": 1})
    meter.create_histogram("verl.hist").record(0.7, {"b": True})
    return [json.dumps(encode_metrics(reader.get_metrics_data()).to_dict(), separators=(",", ":"))]


def _logs() -> list[str]:
    out = io.StringIO()
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(SimpleLogRecordProcessor(FileLogExporter(stream=out)))
    logger = provider.get_logger("l", "1.0")
    stalled = {"event_name": "verl.training.stalled", "attributes": {"verl.step": 2}, "trace_id": 1, "span_id": 2}
    warn = {"severity_text": "WARN", "severity_number": SeverityNumber.WARN}
    logger.emit(LogRecord(timestamp=5, body="stalled", **warn, **stalled))
    logger.emit(LogRecord(observed_timestamp=6, body={"prompt": "p", "n": [1, 2]}, event_name="verl.rollout.sample"))
    provider.shutdown()
    return out.getvalue().splitlines()


# What the readers read of a request, as paths of keys (list indices left out); everything under
# an attribute list or a log body is read (an AnyValue's first member is its value).
READ = {
    signal: {
        keys[: i + 1]
        for keys in paths
        for i in range(len(keys))
    }
    for signal, paths in {
        "traces": [
            ("resourceSpans", "resource", "attributes"),
            *[("resourceSpans", "scopeSpans", "spans", k) for k in (
                "name", "traceId", "spanId", "parentSpanId", "startTimeUnixNano", "endTimeUnixNano", "attributes")],
            ("resourceSpans", "scopeSpans", "spans", "status", "code"),
            ("resourceSpans", "scopeSpans", "spans", "events", "name"),
            ("resourceSpans", "scopeSpans", "spans", "events", "attributes"),
            *[("resourceSpans", "scopeSpans", "spans", "links", k) for k in ("traceId", "spanId", "attributes")],
        ],
        "metrics": [
            ("resourceMetrics", "resource", "attributes"),
            ("resourceMetrics", "scopeMetrics", "metrics", "name"),
            *[("resourceMetrics", "scopeMetrics", "metrics", kind, "dataPoints", k)
              for kind in ("gauge", "sum", "histogram")
              for k in ("asDouble", "asInt", "timeUnixNano", "startTimeUnixNano", "attributes", "sum", "count",
                        "explicitBounds", "bucketCounts")],
            *[("resourceMetrics", "scopeMetrics", "metrics", kind, "aggregationTemporality")
              for kind in ("sum", "histogram")],
        ],
        "logs": [
            ("resourceLogs", "resource", "attributes"),
            *[("resourceLogs", "scopeLogs", "logRecords", k) for k in (
                "eventName", "body", "attributes", "traceId", "spanId", "timeUnixNano", "observedTimeUnixNano",
                "severityText")],
        ],
    }.items()
}  # fmt: skip
WHOLE = {"attributes", "body"}

HOSTILE = [
    None, True, False, 0, -1, 7, 1.5, 2.0, 2**63, -(2**63) - 1, 2**64, 1e300, math.nan, math.inf,
    "", "x", "0", "-5", "1.0", "1e3", " 1", "NaN", "nan", "Infinity", "ab" * 16, "AB" * 8, "zz" * 8, "\ud800",
    "STATUS_CODE_OK", "AGGREGATION_TEMPORALITY_DELTA", [], ["x"], [None], [1], {}, {"stringValue": "s"},
]  # fmt: skip
GONE = object()  # the key removed


def _paths(node: Any, at: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    if at:
        yield at, node
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        yield from _paths(child, (*at, key))


def _replaced(batch: dict[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    copy = json.loads(json.dumps(batch))
    node = copy
    for key in path[:-1]:
        node = node[key]
    if value is GONE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return copy


def _is_read(signal: str, path: tuple) -> bool:
    keys = tuple(k for k in path if isinstance(k, str))
    for i in range(len(keys)):
        if keys[: i + 1] not in READ[signal]:
            return False
        if keys[i] in WHOLE:
            return True
    return True


def _outcome(result: Any) -> str:
    return repr(result)  # NaN equals NaN, an int is not a float, a str subclass reads as a str


def _stricter(path: tuple, was: Any, value: Any, old: str, new: str) -> bool:
    """A line kept before and refused now, by design (the second case of the module's list)."""
    keys = [k for k in path if isinstance(k, str)]
    strings = isinstance(value, list) and any(isinstance(v, str | list) for v in value)
    item = isinstance(value, str | list) and isinstance(was, dict) or isinstance(was, list) and strings
    return old.startswith("[") and new.startswith("not an OTLP") and (item or "events" in keys)


def _new(signal: str, text: str) -> str:
    try:
        return _outcome(otlp_files.decode(signal, otlp_fields.parse(text)))
    except BadRequest as exc:
        return str(exc)


def _old(signal: str, text: str, path: tuple) -> tuple[str, bool]:
    """What the readers made of ``text`` before, and whether ``json_format`` refused it; a refusal
    only for a field no reader reads is now the readers' outcome on the rest (``json_format`` is not
    asked about that field)."""
    batch = json.loads(text)
    reason = reference.check(signal, batch)
    if reason is not None and _is_read(signal, path):
        # a message given as a string with a lone surrogate stopped summary and report: now refused
        return (f"not an OTLP {signal} request" if reason == reference.CRASHED else reason), True
    try:
        return _outcome(reference.records(signal, json.loads(text))), reason is not None
    except BadRequest as exc:
        return str(exc), reason is not None


def _cases(signal: str, lines: list[str]) -> Iterator[tuple[tuple, Any, Any, str]]:
    """(path, value there, value put there, line) for each line and each of its hostile variants
    (of the spans, the first line's only: the child span, with an event, a link and a status)."""
    for n, line in enumerate(lines):
        batch = json.loads(line)
        yield (), None, None, line
        if signal == "traces" and n:
            continue
        for path, was in _paths(batch):
            if "resource" in path and any(isinstance(k, int) and k > 0 for k in path):
                continue  # the resource's other attributes are as its first
            for value in [*HOSTILE, *([GONE] if isinstance(path[-1], str) else [])]:
                mutated = _replaced(batch, path, value)
                if isinstance(mutated.get(otlp_files.REQUEST_KEYS[signal][0]), list):  # else: not a request
                    yield path, was, value, json.dumps(mutated)


@pytest.mark.parametrize("signal, lines", [("traces", _spans), ("metrics", _metrics), ("logs", _logs)])
def test_the_reader_keeps_and_refuses_what_json_format_did_of_what_it_reads(signal, lines):
    lines = lines()
    assert lines and all(_new(signal, line).startswith("[") for line in lines)  # the exporter's lines are read
    differ, refused, read_anyway, stricter = [], 0, 0, 0
    for path, was, value, text in _cases(signal, lines):
        (old, json_refused), new = _old(signal, text, path), _new(signal, text)
        if old != new and _stricter(path, was, value, old, new):
            stricter += 1
        elif old != new:
            differ.append((path, value, old[:100], new[:100]))
        refused += not old.startswith("[")
        read_anyway += json_refused and old.startswith("[")
    assert not differ, "\n".join(map(repr, differ[:20])) + f"\n... {len(differ)} cases differ"
    assert refused > 100 and read_anyway > 10  # the corpus refuses much, and reaches past json_format too
    assert stricter < refused / 4


def test_the_fast_metrics_path_makes_the_general_paths_records_or_leaves_the_line_to_it():
    """``otlp_typed`` (the metrics lines' fast path): the exporter's line is read by it; of every
    hostile variant, the ones it reads give the records the general path gives, to the bit (so it
    never reads a line the general path refuses), and the rest are left to the general path."""
    lines = _metrics()
    assert all(otlp_files._fast_metrics(line) is not None for line in lines)
    base = json.loads(lines[0])
    metrics = base["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
    point = ("resourceMetrics", 0, "scopeMetrics", 0, "metrics", 0, "sum", "dataPoints", 0)
    added = [  # a member added where the corpus only replaces: two of a oneof, another kind, another value
        _replaced(base, (*point, "asDouble"), 1.5),
        _replaced(base, (*point, "asInt"), "12.0"),
        _replaced(base, (*point, "attributes", 0, "value", "intValue"), "4"),
        _replaced(base, (*point, "attributes", 0, "value", "arrayValue"), {"values": []}),
        _replaced(base, ("resourceMetrics", 0, "scopeMetrics", 0, "metrics", 0, "gauge"), metrics[0]["sum"]),
        _replaced(base, ("resourceMetrics", 0, "scopeMetrics", 0, "metrics", 0, "summary"), {}),
        _replaced(base, ("resourceMetrics", 0, "scopeMetrics", 0, "metrics", 0, "exponentialHistogram"), None),
    ]
    fast = left = 0
    for _, _, _, text in [*_cases("metrics", lines), *(((), None, None, json.dumps(b)) for b in added)]:
        records = otlp_files._fast_metrics(text)
        if records is None:
            left += 1
            continue
        fast += 1
        assert _outcome(list(records)) == _new("metrics", text), text
    assert fast > 50 and left > 100  # both paths are taken by the corpus


def test_the_fast_traces_path_makes_the_general_paths_records_or_leaves_the_line_to_it():
    """``otlp_typed`` for traces, as for metrics: the exporter's lines are read by it; of every
    hostile variant of the child span (an event, a link, a status, arrays) and of a few added
    members, the ones it reads give the general path's records, the rest are left to it."""
    lines = _spans()
    assert all(otlp_files._fast_spans(line) is not None for line in lines)
    base = json.loads(lines[0])
    span = ("resourceSpans", 0, "scopeSpans", 0, "spans", 0)
    added = [
        _replaced(base, (*span, "attributes", 0, "value", "intValue"), "4"),
        _replaced(base, (*span, "attributes", 0, "value", "arrayValue"), {"values": []}),
        _replaced(base, (*span, "attributes", 0, "value"), {"arrayValue": {"values": [{"arrayValue": {}}]}}),
        _replaced(base, (*span, "attributes", 0, "value"), {"arrayValue": {"values": [{}]}}),
        _replaced(base, (*span, "attributes", 0, "value"), {"arrayValue": {}}),
        _replaced(base, (*span, "parentSpanId"), ""),
        _replaced(base, (*span, "endTimeUnixNano"), "1"),
    ]
    fast = left = 0
    for _, _, _, text in [*_cases("traces", lines), *(((), None, None, json.dumps(b)) for b in added)]:
        records = otlp_files._fast_spans(text)
        if records is None:
            left += 1
            continue
        fast += 1
        assert _outcome(list(records)) == _new("traces", text), text
    assert fast > 50 and left > 100


def test_odd_but_valid_spellings_are_read_as_json_format_read_them():
    """Ids in capitals, int64 as JSON numbers, doubles as strings, enums by name, a bare NaN (a
    line only ``json.loads`` parses): each is read as it was; each refusal for the same reason."""
    base = json.loads(_spans()[0])
    span = base["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    variants = [
        {"traceId": span["traceId"].upper()},
        {"status": {"code": "STATUS_CODE_ERROR"}},
        {"status": {"code": 2, "message": "x"}},
        {"startTimeUnixNano": int(span["startTimeUnixNano"]), "endTimeUnixNano": float(span["endTimeUnixNano"])},
        {"attributes": [{"key": "d", "value": {"doubleValue": v}} for v in ("NaN", "-Infinity", "1e3", math.nan)]},
        {"attributes": [{"key": "i", "value": {"intValue": v}} for v in (-(2**63), 2**63 - 1, "-7", 1.0, "1.0")]},
        {"attributes": [{"key": "a", "value": {"intValue": "1", "stringValue": "x"}}]},  # two values of a oneof
        {"attributes": [{"key": "deep", "value": {"arrayValue": {"values": [{"arrayValue": {}}]}}}]},
        {"attributes": [{"key": "kv", "value": {"kvlistValue": {"values": [{"key": "\ud800"}]}}}]},
        {"name": "\ud83d\ude00"},  # a pair of surrogates: one character
    ]
    deep = {"stringValue": "bottom"}
    for _ in range(60):  # past json_format's depth of 100 messages
        deep = {"arrayValue": {"values": [deep]}}
    variants.append({"attributes": [{"key": "deeper", "value": deep}]})
    for change in variants:
        batch = json.loads(json.dumps(base))
        batch["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(change)
        text = json.dumps(batch)
        name = ("resourceSpans", 0, "scopeSpans", 0, "spans", 0, "name")
        assert _new("traces", text) == _old("traces", text, name)[0]


def test_msgspec_parses_as_json_loads_does():
    """The lines are parsed by msgspec where it can: the same values as ``json.loads``, to the bit."""
    texts = [*_spans(), *_metrics(), *_logs()]
    numbers = ["0.1", "1e-320", "2.2250738585072011e-308", "1.7976931348623157e308", "-0.0", "123456789012345678901",
               "-9223372036854775809", "18446744073709551616", "4.35", "0.30000000000000004", "5e-324"]  # fmt: skip
    texts.append("[" + ",".join(numbers) + "]")
    for text in texts:
        assert repr(otlp_fields.parse(text)) == repr(json.loads(text))
