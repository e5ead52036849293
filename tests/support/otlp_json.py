"""Small OTLP JSON-lines files as the ``otlp_json_file`` exporters write them, built by hand
(the tests of ``otel_verl.offline``)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from otel_verl import semconv

T0 = 1_800_000_000 * 10**9
_ids = itertools.count(1)


def _value(v):
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list | tuple):
        return {"arrayValue": {"values": [_value(x) for x in v]}}
    return {"stringValue": str(v)}


def _attrs(d):
    return [{"key": k, "value": _value(v)} for k, v in d.items()]


def span(name, trace, start, end, parent=None, status=None, **attrs):
    """One OTLP JSON span; start/end in seconds after T0; returns (span id, dict)."""
    sid = f"{next(_ids):016x}"
    out = {
        "traceId": trace * 2,
        "spanId": sid,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(T0 + int(start * 1e9)),
        "endTimeUnixNano": str(T0 + int(end * 1e9)),
        "attributes": _attrs({k.replace("__", "."): v for k, v in attrs.items()}),
        "status": {"code": status} if status else {},
    }
    if parent:
        out["parentSpanId"] = parent
    return sid, out


def llm_call(trace, start, end, parent=None, legacy=False, **attrs):
    """One LLM call's span as otel-verl writes it: named and attributed by the GenAI conventions
    (CLIENT, ``text_completion <model>``), or as older otel-verl wrote it (``legacy``: the name
    ``verl.rollout.llm_call``, none of the attributes the predicate reads today)."""
    if legacy:
        return span(semconv.LEGACY_SPAN_ROLLOUT_LLM_CALL, trace, start, end, parent, **attrs)
    attrs = {"gen_ai__operation__name": semconv.GEN_AI_OPERATION_TEXT_COMPLETION, **attrs}
    attrs.setdefault("verl__rollout__submit_step", 1)
    sid, out = span(semconv.llm_call_span_name("Qwen/Qwen2.5-0.5B"), trace, start, end, parent, **attrs)
    out["kind"] = 3  # SPAN_KIND_CLIENT
    return sid, out


def write_spans(folder: Path, role: str, pid: int, spans: list[dict], **resource_attrs) -> None:
    resource = {"service.name": "verl", semconv.RES_ROLE: role, "process.pid": pid, semconv.RES_RUN_ID: "run-1"}
    resource.update(resource_attrs)
    line = {"resourceSpans": [{"resource": {"attributes": _attrs(resource)}, "scopeSpans": [{"spans": spans}]}]}
    with open(folder / f"traces-{role}-{pid}.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def write_metrics(folder: Path, role: str, pid: int, time_s: float, metrics: list[dict]) -> None:
    resource = {"service.name": "verl", semconv.RES_ROLE: role, "process.pid": pid, "service.instance.id": f"i-{pid}"}
    for m in metrics:
        for kind in ("gauge", "histogram"):
            for p in m.get(kind, {}).get("dataPoints", []):
                p.setdefault("timeUnixNano", str(T0 + int(time_s * 1e9)))
    line = {"resourceMetrics": [{"resource": {"attributes": _attrs(resource)}, "scopeMetrics": [{"metrics": metrics}]}]}
    with open(folder / f"metrics-{role}-{pid}.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def gauge(name, value, **attrs):
    return {"name": name, "gauge": {"dataPoints": [{"asDouble": value, "attributes": _attrs(attrs)}]}}


def traj_hist(counts, total, start_s=0.0, validate=False, temporality=2):
    bounds = [0.1, 0.5, 1.0]
    return {
        "name": semconv.M_ROLLOUT_TRAJECTORY_DURATION,
        "histogram": {
            "aggregationTemporality": temporality,
            "dataPoints": [
                {
                    "startTimeUnixNano": str(T0 + int(start_s * 1e9)),
                    "count": str(sum(counts)),
                    "sum": total,
                    "bucketCounts": [str(c) for c in counts],
                    "explicitBounds": bounds,
                    "attributes": _attrs({semconv.ATTR_ROLLOUT_VALIDATE: validate}),
                }
            ],
        },
    }


def write_logs(folder: Path, role: str, pid: int, records: list[dict], **resource_attrs) -> None:
    resource = {"service.name": "verl", semconv.RES_ROLE: role, "process.pid": pid, "host.name": "node1"}
    resource.update(resource_attrs)
    line = {"resourceLogs": [{"resource": {"attributes": _attrs(resource)}, "scopeLogs": [{"logRecords": records}]}]}
    with open(folder / f"logs-{role}-{pid}.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def log_record(event_name: str, body: str, time_s: float, trace: str = "", **attrs) -> dict:
    out = {
        "timeUnixNano": str(T0 + int(time_s * 1e9)),
        "eventName": event_name,
        "body": {"stringValue": body},
        "attributes": _attrs({k.replace("__", "."): v for k, v in attrs.items()}),
        "severityText": "WARNING",
    }
    if trace:
        out["traceId"] = trace * 2
    return out
