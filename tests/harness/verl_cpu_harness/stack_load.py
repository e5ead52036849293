"""One simulated large training step through the real Collector, into Jaeger and Prometheus.

The load generator behind ``bench/stack_load.py`` (which prints its figures) and
``tests/ops/test_stack_load.py`` (which asserts nothing was lost, at test size). A real run's OTLP
JSON files are the template; ``build_load`` makes one large step of it with fresh ids,
``run_load`` sends it over OTLP gRPC the way the SDK does into ``otel-verl stack``'s Collector and
measures what the backends hold and when (``bench/stack_load.py``'s docstring has the detail).
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml
from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_verl import stack
from otel_verl.offline.otlp_files import iter_lines, signal_files
from otel_verl.semconv import RES_SERIES_IDENTITY
from verl_cpu_harness.ports import free_ports

REPO = Path(__file__).resolve().parents[3]

OTELCOL_CONFIG = REPO / "collector" / "otelcol-config.yaml"
DEMO_DIR = REPO / ".work" / "demo" / "telemetry"
SDK_BATCH = 512  # BatchSpanProcessor's default max_export_batch_size (OTEL_BSP_MAX_EXPORT_BATCH_SIZE)
EXPORT_TIMEOUT_S = 10.0  # the OTLP exporters' default timeout
RETRIES = 5  # the SDK retries UNAVAILABLE / RESOURCE_EXHAUSTED with backoff; counted, not hidden
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.DEADLINE_EXCEEDED}
TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
METRICS_EXPORT = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
ROLLOUT_ROOTS = ("verl.rollout.trajectory", "verl.rollout.tail")
JAEGER_IDS_PER_QUERY = 200  # trace ids per /api/traces?traceID=... request (URL of ~7 KiB)
SAMPLE_S = 0.2


# ---------------------------------------------------------------------------------------------
# The template: a real run's files


@dataclass
class TemplateProcess:
    key: str  # service.instance.id of the real process
    resource: dict[str, Any]  # OTLP JSON resource
    spans: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)  # (scope, span)
    # (scope, metric without points, kind) -> {attributes key: latest point}
    series: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    metric_shells: dict[tuple[str, str, str], tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=dict)


@dataclass
class Template:
    folder: Path
    processes: dict[str, TemplateProcess]
    traces: dict[str, list[tuple[str, dict[str, Any], dict[str, Any]]]]  # trace id -> (process, scope, span)
    newest_ns: int

    def roots(self, name: str) -> list[str]:
        return [t for t, spans in self.traces.items() if any(s["name"] == name and not _parent(s) for _, _, s in spans)]


def _parent(span: dict[str, Any]) -> str:
    return span.get("parentSpanId") or ""


def _instance(resource: dict[str, Any]) -> str:
    for a in resource.get("attributes", []):
        if a["key"] == "service.instance.id":
            return next(iter(a["value"].values()))
    return json.dumps(resource, sort_keys=True)


def load_template(folder: Path) -> Template:
    """Every span and every metric series (its latest point) of the run in ``folder``, per process."""
    processes: dict[str, TemplateProcess] = {}
    traces: dict[str, list[tuple[str, dict[str, Any], dict[str, Any]]]] = defaultdict(list)
    newest = 0
    for path in signal_files(folder, "traces"):
        for _, _, batch in iter_lines(path):
            for rs in batch.get("resourceSpans", []):
                key = _instance(rs.get("resource", {}))
                proc = processes.setdefault(key, TemplateProcess(key, rs.get("resource", {})))
                for ss in rs.get("scopeSpans", []):
                    scope = ss.get("scope", {})
                    for span in ss.get("spans", []):
                        proc.spans.append((scope, span))
                        traces[span["traceId"]].append((key, scope, span))
                        newest = max(newest, int(span["endTimeUnixNano"]))
    for path in signal_files(folder, "metrics"):
        for _, _, batch in iter_lines(path):
            for rm in batch.get("resourceMetrics", []):
                key = _instance(rm.get("resource", {}))
                proc = processes.setdefault(key, TemplateProcess(key, rm.get("resource", {})))
                for sm in rm.get("scopeMetrics", []):
                    scope = sm.get("scope", {})
                    for metric in sm.get("metrics", []):
                        for kind in ("gauge", "sum", "histogram"):
                            if kind not in metric:
                                continue
                            mkey = (json.dumps(scope, sort_keys=True), metric["name"], kind)
                            shell = {k: v for k, v in metric.items() if k != kind}
                            shell[kind] = {k: v for k, v in metric[kind].items() if k != "dataPoints"}
                            proc.metric_shells[mkey] = (scope, shell)
                            points = proc.series.setdefault(mkey, {})
                            for p in metric[kind].get("dataPoints", []):
                                akey = json.dumps(p.get("attributes", []), sort_keys=True)
                                old = points.get(akey)
                                if old is None or int(p.get("timeUnixNano", 0)) >= int(old.get("timeUnixNano", 0)):
                                    points[akey] = p
                                newest = max(newest, int(p.get("timeUnixNano", 0)))
    if not traces or not any(p.series for p in processes.values()):
        raise SystemExit(f"{folder}: no traces or no metrics: not the OTLP JSON files of an instrumented run")
    return Template(folder, processes, dict(traces), newest)


# ---------------------------------------------------------------------------------------------
# The load: fresh ids, fan-out, serialized requests


def _id(n: int) -> bytes:
    # First byte non-zero: Jaeger's JSON writes ids without leading zeros, ours compare as text.
    return bytes([secrets.randbelow(255) + 1]) + secrets.token_bytes(n - 1)


def _b64_ids(obj: Any) -> Any:
    """OTLP JSON (hex ids) -> the protobuf JSON mapping (base64 bytes), for json_format."""
    import base64

    if isinstance(obj, dict):
        return {
            k: (
                base64.b64encode(bytes.fromhex(v)).decode()
                if k in ("traceId", "spanId", "parentSpanId")
                else _b64_ids(v)
            )
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_b64_ids(v) for v in obj]
    return obj


def _attr(key: str, value: str | int) -> common_pb2.KeyValue:
    v = common_pb2.AnyValue(int_value=value) if isinstance(value, int) else common_pb2.AnyValue(string_value=value)
    return common_pb2.KeyValue(key=key, value=v)


@dataclass
class SimProcess:
    name: str  # role-replica, for the report
    resource: resource_pb2.Resource
    span_requests: list[tuple[bytes, int]] = field(default_factory=list)  # (serialized request, spans)
    metric_request: bytes = b""
    points: int = 0


@dataclass
class Load:
    run_id: str
    service: str
    processes: list[SimProcess]
    span_ids: set[tuple[str, str]]  # (trace id, span id), hex
    trace_ids: list[str]
    rollout_spans: int
    otlp_series: int  # (resource, metric, attributes) series sent
    prom_series: int  # the Prometheus series they become (a histogram: buckets + _sum + _count)
    build_s: float = 0.0

    @property
    def spans(self) -> int:
        return len(self.span_ids)


def _own_identity(point: Any, template: dict[str, Any], identity: list[Any]) -> None:
    """``point`` with the template process's copies of its identity (``point_identity``) replaced by
    the simulated process's ``identity``; an identity attribute of the point's own is kept."""
    own = [a for a in point.attributes if template.get(a.key) != a.value]
    keys = {a.key for a in own}
    del point.attributes[:]
    point.attributes.extend([a for a in identity if a.key not in keys] + own)


def build_load(template: Template, rollout_spans: int, ranks: int) -> Load:
    """One large step from ``template``: >= ``rollout_spans`` rollout spans, every process x ``ranks``."""
    started = time.perf_counter()
    run_id = uuid.uuid4().hex
    service = f"verl-load-{run_id[:8]}"
    shift = time.time_ns() - template.newest_ns  # the step ends now
    procs: dict[tuple[str, int], SimProcess] = {}
    roles: dict[str, str] = {}
    for key, tp in template.processes.items():
        role = next(
            (
                next(iter(a["value"].values()))
                for a in tp.resource.get("attributes", [])
                if a["key"] == "verl.process.role"
            ),
            "process",
        )
        roles[key] = str(role)
        for r in range(ranks):
            res = json_format.ParseDict(_b64_ids(tp.resource), resource_pb2.Resource())
            keep = [
                a
                for a in res.attributes
                if a.key not in {"service.instance.id", "service.name", "verl.run.id", "verl.rank", "process.pid"}
            ]
            del res.attributes[:]
            res.attributes.extend(keep)
            res.attributes.extend(
                [
                    _attr("service.name", service),
                    _attr("service.instance.id", f"{run_id}-{role}-{key[-6:]}-r{r}"),
                    _attr("verl.run.id", run_id),
                    _attr("verl.rank", r),
                    _attr("process.pid", 100000 + len(procs)),
                ]
            )
            procs[(key, r)] = SimProcess(f"{role}-r{r}", res)

    # Spans: (process, rank) -> [(scope, Span)]
    out: dict[tuple[str, int], list[tuple[dict[str, Any], trace_pb2.Span]]] = defaultdict(list)
    parsed: dict[str, trace_pb2.Span] = {}

    def proto(span: dict[str, Any]) -> trace_pb2.Span:
        sid = span["spanId"]
        if sid not in parsed:
            parsed[sid] = json_format.ParseDict(_b64_ids(span), trace_pb2.Span())
        return parsed[sid]

    span_ids: set[tuple[str, str]] = set()
    trace_ids: list[str] = []

    def copy(trace: str, rank_of: Callable[[str], int], link_to: bytes | None) -> dict[bytes, bytes]:
        tid = _id(16)
        trace_ids.append(tid.hex())
        spans = template.traces[trace]
        fresh = {bytes.fromhex(s["spanId"]): _id(8) for _, _, s in spans}
        for key, scope, span in spans:
            s = trace_pb2.Span()
            s.CopyFrom(proto(span))
            s.trace_id, s.span_id = tid, fresh[s.span_id]
            if s.parent_span_id:
                s.parent_span_id = fresh.get(s.parent_span_id, s.parent_span_id)
            s.start_time_unix_nano += shift
            s.end_time_unix_nano += shift
            for e in s.events:
                e.time_unix_nano += shift
            if link_to is not None:
                for link in s.links:  # the rollout's link to its step: to the fresh step trace
                    link.trace_id, link.span_id = step_trace, link_to
            out[(key, rank_of(key))].append((scope, s))
            span_ids.add((tid.hex(), s.span_id.hex()))
        return fresh

    steps = template.roots("verl.step")
    step_trace, gen_span = b"", None
    if steps:
        step = max(steps, key=lambda t: max(int(s["endTimeUnixNano"]) for _, _, s in template.traces[t]))
        fresh = copy(step, lambda _k: 0, None)
        step_trace = bytes.fromhex(trace_ids[-1])
        gen = [s for _, _, s in template.traces[step] if s["name"] == "verl.gen"]
        gen_span = fresh[bytes.fromhex(gen[0]["spanId"])] if gen else None
    rollouts = [t for name in ROLLOUT_ROOTS for t in template.roots(name)]
    if not rollouts:
        raise SystemExit(f"{template.folder}: no rollout traces ({', '.join(ROLLOUT_ROOTS)}) in this run")
    rollout = 0
    i = 0
    while rollout < rollout_spans:
        trace = rollouts[i % len(rollouts)]
        copy(trace, lambda _k, r=i % ranks: r, gen_span)  # rollout i on rank i % ranks
        rollout += len(template.traces[trace])
        i += 1

    # Requests as the SDK builds them: one resource, its scopes, at most SDK_BATCH spans each.
    for pk, spans in out.items():
        proc = procs[pk]
        for lo in range(0, len(spans), SDK_BATCH):
            chunk = spans[lo : lo + SDK_BATCH]
            by_scope: dict[str, trace_pb2.ScopeSpans] = {}
            rs = trace_pb2.ResourceSpans(resource=proc.resource)
            for scope, s in chunk:
                sk = json.dumps(scope, sort_keys=True)
                if sk not in by_scope:
                    by_scope[sk] = rs.scope_spans.add(
                        scope=json_format.ParseDict(scope, common_pb2.InstrumentationScope())
                    )
                by_scope[sk].spans.append(s)
            req = trace_service_pb2.ExportTraceServiceRequest(resource_spans=[rs])
            proc.span_requests.append((req.SerializeToString(), len(chunk)))

    # Metrics: every series of the process, its latest point moved to now, once per replica.
    otlp_series = prom_series = 0
    for (key, _r), proc in procs.items():
        tp = template.processes[key]
        rm = metrics_pb2.ResourceMetrics(resource=proc.resource)
        # the series identity otel-verl copies onto every point: the simulated process's, not the template's
        template_identity = {
            a.key: a.value
            for a in json_format.ParseDict(_b64_ids(tp.resource), resource_pb2.Resource()).attributes
            if a.key in RES_SERIES_IDENTITY
        }
        identity = [a for a in proc.resource.attributes if a.key in RES_SERIES_IDENTITY]
        scopes: dict[str, metrics_pb2.ScopeMetrics] = {}
        for mkey, points in tp.series.items():
            scope, shell = tp.metric_shells[mkey]
            kind = mkey[2]
            if mkey[0] not in scopes:
                scopes[mkey[0]] = rm.scope_metrics.add(
                    scope=json_format.ParseDict(scope, common_pb2.InstrumentationScope())
                )
            metric = json_format.ParseDict(
                _b64_ids({**shell, kind: {**shell[kind], "dataPoints": list(points.values())}}), metrics_pb2.Metric()
            )
            for p in getattr(metric, kind).data_points:
                _own_identity(p, template_identity, identity)
                p.time_unix_nano += shift
                if p.start_time_unix_nano:
                    p.start_time_unix_nano += shift
                for ex in p.exemplars:
                    ex.time_unix_nano += shift
                otlp_series += 1
                prom_series += len(p.bucket_counts) + 2 if kind == "histogram" else 1
                proc.points += 1
            scopes[mkey[0]].metrics.append(metric)
        proc.metric_request = metrics_service_pb2.ExportMetricsServiceRequest(resource_metrics=[rm]).SerializeToString()
    load = Load(run_id, service, list(procs.values()), span_ids, trace_ids, rollout, otlp_series, prom_series)
    load.build_s = time.perf_counter() - started
    return load


# ---------------------------------------------------------------------------------------------
# Sending


@dataclass
class SendResult:
    spans: int = 0  # in requests answered OK
    points: int = 0
    requests: int = 0
    retries: int = 0
    rejected: int = 0  # partial_success rejected spans/points
    errors: list[str] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0

    @property
    def wall_s(self) -> float:
        return self.ended - self.started


def send(load: Load, endpoint: str) -> SendResult:
    """Every simulated process from its own thread and channel: its span batches, then its metrics."""
    result = SendResult()
    lock = threading.Lock()

    def export(call: Any, body: bytes, parse: Callable[[bytes], Any]) -> Any:
        for attempt in range(RETRIES + 1):
            try:
                return parse(call(body, timeout=EXPORT_TIMEOUT_S))
            except grpc.RpcError as exc:
                if exc.code() in RETRYABLE and attempt < RETRIES:
                    with lock:
                        result.retries += 1
                    time.sleep(min(0.25 * 2**attempt, 4.0))
                    continue
                raise
        raise AssertionError("unreachable")

    def process(proc: SimProcess) -> None:
        with grpc.insecure_channel(endpoint) as channel:
            traces = channel.unary_unary(TRACE_EXPORT, request_serializer=None, response_deserializer=None)
            metrics = channel.unary_unary(METRICS_EXPORT, request_serializer=None, response_deserializer=None)
            try:
                for body, n in proc.span_requests:
                    answer = export(traces, body, trace_service_pb2.ExportTraceServiceResponse.FromString)
                    with lock:
                        result.requests += 1
                        result.spans += n
                        result.rejected += answer.partial_success.rejected_spans
                answer = export(
                    metrics, proc.metric_request, metrics_service_pb2.ExportMetricsServiceResponse.FromString
                )
                with lock:
                    result.requests += 1
                    result.points += proc.points
                    result.rejected += answer.partial_success.rejected_data_points
            except grpc.RpcError as exc:
                with lock:
                    result.errors.append(f"{proc.name}: {exc.code().name} {exc.details()}")

    threads = [threading.Thread(target=process, args=(p,), name=p.name) for p in load.processes]
    result.started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.ended = time.monotonic()
    return result


# ---------------------------------------------------------------------------------------------
# Watching the Collector

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def scrape(url: str) -> dict[str, float]:
    """Prometheus text -> {'name{labels}': value} (names without _total, so both spellings match)."""
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - 127.0.0.1
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            name = m.group(1).removesuffix("_total")
            out[name + (m.group(2) or "")] = float(m.group(3))
    return out


def total(sample: dict[str, float], name: str, **labels: str) -> float:
    """Sum of ``name`` over every label set holding ``labels``."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for k, v in sample.items() if k.split("{")[0] == name and all(w in k for w in want))


def _vm_kib(pid: int, field_name: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class CollectorWatch:
    """Samples the Collector's self-metrics and /proc every SAMPLE_S s in a thread; keeps the peaks."""

    def __init__(self, metrics_url: str, pid: int) -> None:
        self.url, self.pid = metrics_url, pid
        self.peak: dict[str, float] = defaultdict(float)
        self.last: dict[str, float] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="collector-watch", daemon=True)

    def _sample(self) -> None:
        try:
            s = scrape(self.url)
        except (OSError, ValueError):
            return
        gauges = {
            "rss_bytes": total(s, "otelcol_process_memory_rss"),
            "heap_bytes": total(s, "otelcol_process_runtime_heap_alloc_bytes"),
            "queue_traces": total(s, "otelcol_exporter_queue_size", data_type="traces"),
            "queue_metrics": total(s, "otelcol_exporter_queue_size", data_type="metrics"),
        }
        with self._lock:
            self.last = s
            self.samples += 1
            for k, v in gauges.items():
                self.peak[k] = max(self.peak[k], v)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._sample()

    def start(self) -> CollectorWatch:
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._sample()

    def now(self) -> dict[str, float]:
        with self._lock:
            return dict(self.last)

    def hwm_bytes(self) -> int:
        """The kernel's peak RSS of the Collector since it started (VmHWM)."""
        return _vm_kib(self.pid, "VmHWM") * 1024


def collector_counters(s: dict[str, float]) -> dict[str, float]:
    """The Collector's counters of what it took, refused, failed and sent, summed over its components."""
    out: dict[str, float] = {}
    for item in ("spans", "metric_points"):
        for what in ("receiver_accepted", "receiver_refused", "receiver_failed"):
            out[f"{what}_{item}"] = total(s, f"otelcol_{what}_{item}")
        for what in ("exporter_sent", "exporter_send_failed", "exporter_enqueue_failed"):
            out[f"{what}_{item}"] = total(s, f"otelcol_{what}_{item}")
    # memory_limiter's refusals: the processor's own counters (older names) and items in vs out.
    out["processor_refused"] = sum(v for k, v in s.items() if k.startswith("otelcol_processor_") and "refused" in k)
    out["processor_dropped"] = sum(v for k, v in s.items() if k.startswith("otelcol_processor_") and "dropped" in k)
    for sig in ("traces", "metrics"):
        incoming = total(s, "otelcol_processor_incoming_items", otel_signal=sig)
        outgoing = total(s, "otelcol_processor_outgoing_items", otel_signal=sig)
        out[f"processor_in_minus_out_{sig}"] = incoming - outgoing
    return out


# Counters that must stay 0 for "nothing dropped".
MUST_BE_ZERO = (
    "receiver_refused_spans",
    "receiver_failed_spans",
    "exporter_send_failed_spans",
    "exporter_enqueue_failed_spans",
    "receiver_refused_metric_points",
    "receiver_failed_metric_points",
    "exporter_send_failed_metric_points",
    "exporter_enqueue_failed_metric_points",
    "processor_refused",
    "processor_dropped",
    "processor_in_minus_out_traces",
    "processor_in_minus_out_metrics",
)


def memory_limit_mib(config: Path = OTELCOL_CONFIG) -> tuple[int, int]:
    """(limit_mib, spike_limit_mib) of the Collector's memory_limiter."""
    ml = yaml.safe_load(config.read_text(encoding="utf-8"))["processors"]["memory_limiter"]
    return int(ml["limit_mib"]), int(ml.get("spike_limit_mib", 0))


# ---------------------------------------------------------------------------------------------
# Reading back


def _get_json(url: str, timeout: float = 60.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - 127.0.0.1
        return json.loads(resp.read())


def jaeger_spans(port: int, trace_ids: list[str]) -> set[tuple[str, str]]:
    """(trace id, span id) of every span Jaeger's query API returns for ``trace_ids``, fetched by id
    (``/api/traces?traceID=a&traceID=b...``): exact, unlike a search, which stops at its limit."""
    found: set[tuple[str, str]] = set()
    for lo in range(0, len(trace_ids), JAEGER_IDS_PER_QUERY):
        ids = trace_ids[lo : lo + JAEGER_IDS_PER_QUERY]
        query = urllib.parse.urlencode([("traceID", t) for t in ids])
        try:
            data = _get_json(f"http://127.0.0.1:{port}/api/traces?{query}").get("data") or []
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # none of these traces is there yet
                continue
            raise
        for trace in data:
            for span in trace.get("spans", []):
                found.add((span["traceID"].rjust(32, "0"), span["spanID"].rjust(16, "0")))
    return found


def prometheus_query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    return _get_json(url)["data"]["result"]


def prometheus_series(port: int, run_id: str) -> int:
    """Series of the run in Prometheus's head, ``target_info`` (one per resource) left out."""
    result = prometheus_query(port, f'count({{verl_run_id="{run_id}", __name__!="target_info"}})')
    return int(float(result[0]["value"][1])) if result else 0


class PrometheusWatch(threading.Thread):
    """Counts the run's series in Prometheus every 0.2 s until all are there (or the deadline)."""

    def __init__(self, port: int, load: Load, t0: float, timeout_s: float) -> None:
        super().__init__(name="prometheus-watch", daemon=True)
        self.port, self.load, self.t0, self.timeout_s = port, load, t0, timeout_s
        self.series = 0
        self.drain_s = math.nan

    def start(self) -> PrometheusWatch:
        super().start()
        return self

    def run(self) -> None:
        while time.monotonic() - self.t0 < self.timeout_s:
            try:
                self.series = prometheus_series(self.port, self.load.run_id)
            except (OSError, ValueError):
                pass  # busy: ask again
            if self.series >= self.load.prom_series:
                self.drain_s = time.monotonic() - self.t0
                return
            time.sleep(0.2)


def until(what: str, probe: Callable[[], bool], timeout_s: float, every_s: float = 0.25) -> float:
    """Seconds until ``probe()`` is true (bounded polling); AssertionError after ``timeout_s``."""
    started = time.monotonic()
    while True:
        try:
            if probe():
                return time.monotonic() - started
        except (OSError, ValueError) as exc:
            last = exc
        else:
            last = None
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"{what}: not after {timeout_s:g} s (last error {last!r})")
        time.sleep(every_s)


# ---------------------------------------------------------------------------------------------
# The whole load test


@contextmanager
def running_stack(data_dir: Path, bin_dir: Path | None = None) -> Iterator[dict[str, Any]]:
    """``otel-verl stack up`` on free ports with its data in ``data_dir``; down afterwards."""
    ports = free_ports(list(stack.ports.DEFAULT_PORTS))
    lines: list[str] = []
    try:
        stack.supervisor.up(bin_dir, data_dir, ports, timeout_s=120, out=lines.append)
    except Exception:
        for log in sorted((data_dir / "logs").glob("*.log")):
            print(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}", file=sys.stderr)
        raise
    try:
        comps = stack.supervisor._load_state(data_dir)["components"]
        yield {"ports": ports, "data_dir": data_dir, "pids": {n: c["pid"] for n, c in comps.items()}}
    finally:
        stack.supervisor.down(data_dir, out=lines.append)


@dataclass
class LoadResult:
    load: Load
    sent: SendResult
    spans_in_jaeger: set[tuple[str, str]]
    series_in_prometheus: int
    target_infos: int
    counters: dict[str, float]
    collector_drain_s: float  # last Export answered -> exporters sent everything the receiver took
    jaeger_drain_s: float  # ... -> Jaeger's query API returns every span
    prometheus_drain_s: float  # ... -> Prometheus holds every series
    poll_round_s: float  # the last Jaeger read-back round: the resolution of jaeger_drain_s
    peak: dict[str, float]
    hwm_bytes: int
    limit_mib: int
    spike_mib: int
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    watch_samples: int

    @property
    def spans_per_s(self) -> float:
        return self.sent.spans / self.sent.wall_s if self.sent.wall_s else 0.0


def run_load(stack_info: dict[str, Any], load: Load, timeout_s: float = 300.0) -> LoadResult:
    """Send ``load`` into the running stack, wait (bounded) until both backends hold it, measure."""
    ports, pid = stack_info["ports"], stack_info["pids"]["otelcol"]
    limit, spike = memory_limit_mib()
    before = os.getloadavg()
    watch = CollectorWatch(f"http://127.0.0.1:{ports['otelcol-metrics']}/metrics", pid).start()
    try:
        sent = send(load, f"127.0.0.1:{ports['otlp-grpc']}")
        t_sent = time.monotonic()
        prom = PrometheusWatch(ports["prometheus"], load, t_sent, timeout_s).start()

        def collector_drained() -> bool:
            # Everything sent reached the receiver (taken, refused or failed) and the exporters
            # finished with what it took: a refusal ends the wait too, and shows in the counters.
            c = collector_counters(watch.now())
            done = True
            for item, want in (("spans", sent.spans), ("metric_points", sent.points)):
                received = sum(c[f"receiver_{w}_{item}"] for w in ("accepted", "refused", "failed"))
                exported = c[f"exporter_sent_{item}"] + c[f"exporter_send_failed_{item}"]
                done &= received >= want and exported >= c[f"receiver_accepted_{item}"]
            return done

        try:
            collector_drain = until("the Collector's exporters to send everything", collector_drained, timeout_s)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; its counters: {collector_counters(watch.now())}") from None
        # Jaeger: every trace fetched by id, again for those still incomplete, until all are there;
        # its drain time is the end of that round, so it includes one read-back (its length is
        # reported: the resolution). Prometheus: a cheap count, polled in a thread meanwhile.
        expected: dict[str, set[str]] = defaultdict(set)
        for tid, sid in load.span_ids:
            expected[tid].add(sid)
        in_jaeger: set[tuple[str, str]] = set()
        jaeger_drain = math.nan
        rounds: list[float] = []
        deadline = t_sent + timeout_s
        while math.isnan(jaeger_drain) and time.monotonic() < deadline:
            round_start = time.monotonic()
            have: dict[str, set[str]] = defaultdict(set)
            for tid, sid in in_jaeger:
                have[tid].add(sid)
            try:
                in_jaeger |= jaeger_spans(ports["jaeger"], [t for t in load.trace_ids if not expected[t] <= have[t]])
            except (OSError, ValueError):
                pass  # Jaeger busy under the load: the next round asks again
            if load.span_ids <= in_jaeger:
                jaeger_drain = time.monotonic() - t_sent
            rounds.append(time.monotonic() - round_start)
            if math.isnan(jaeger_drain):
                time.sleep(0.1)
        prom.join(max(0.0, deadline - time.monotonic()))
        prom_drain, series = prom.drain_s, prom.series
        target_infos = len(prometheus_query(ports["prometheus"], f'target_info{{verl_run_id="{load.run_id}"}}'))
    finally:
        watch.stop()
    return LoadResult(
        load,
        sent,
        in_jaeger,
        series,
        target_infos,
        collector_counters(watch.now()),
        collector_drain,
        jaeger_drain,
        prom_drain,
        rounds[-1] if rounds else 0.0,
        dict(watch.peak),
        watch.hwm_bytes(),
        limit,
        spike,
        before,
        os.getloadavg(),
        watch.samples,
    )


def report(r: LoadResult) -> list[tuple[str, str]]:
    mib = 2**20
    c = r.counters
    missing = len(r.load.span_ids - r.spans_in_jaeger)
    requests = sum(len(p.span_requests) for p in r.load.processes)
    rows = [
        (
            "machine load (1/5/15 min) before -> after",
            f"{'/'.join(f'{x:.2f}' for x in r.load_before)} -> {'/'.join(f'{x:.2f}' for x in r.load_after)}",
        ),
        ("simulated processes (gRPC senders)", f"{len(r.load.processes)}"),
        (
            "spans sent (rollout spans)",
            f"{r.load.spans} ({r.load.rollout_spans}) in {requests} requests, {len(r.load.trace_ids)} traces",
        ),
        ("metric series sent (Prometheus series)", f"{r.load.otlp_series} ({r.load.prom_series})"),
        ("send wall time", f"{r.sent.wall_s:.2f} s"),
        ("spans/s accepted (send wall time)", f"{r.spans_per_s:,.0f}"),
        ("client retries / errors / rejected", f"{r.sent.retries} / {len(r.sent.errors)} / {r.sent.rejected}"),
        ("drain: Collector exporters sent all", f"{r.collector_drain_s:.2f} s (counters sampled every {SAMPLE_S:g} s)"),
        (
            "drain: Jaeger returns every span",
            f"{r.jaeger_drain_s:.2f} s ({len(r.spans_in_jaeger & r.load.span_ids)}/{r.load.spans}, {missing} missing)",
        ),
        (
            "drain: Prometheus holds every series",
            f"{r.prometheus_drain_s:.2f} s ({r.series_in_prometheus}/{r.load.prom_series}; "
            f"target_info {r.target_infos})",
        ),
        ("drain: Jaeger read-back round (its resolution)", f"{r.poll_round_s:.2f} s (Prometheus polled every 0.2 s)"),
        (
            "spans/s into Jaeger's receiver (send + drain)",
            f"{r.load.spans / (r.sent.wall_s + r.collector_drain_s):,.0f}",
        ),
        (
            "Collector peak RSS (VmHWM)",
            f"{r.hwm_bytes / mib:.0f} MiB (memory_limiter limit_mib {r.limit_mib}, spike {r.spike_mib})",
        ),
        (
            "Collector peak otelcol_process_memory_rss",
            f"{r.peak.get('rss_bytes', 0) / mib:.0f} MiB ({r.watch_samples} samples)",
        ),
        ("Collector peak heap alloc", f"{r.peak.get('heap_bytes', 0) / mib:.0f} MiB"),
        (
            "Collector peak queue size traces / metrics",
            f"{r.peak.get('queue_traces', 0):.0f} / {r.peak.get('queue_metrics', 0):.0f} (capacity 5000 requests)",
        ),
        (
            "receiver accepted spans / metric points",
            f"{c['receiver_accepted_spans']:.0f} / {c['receiver_accepted_metric_points']:.0f}",
        ),
        (
            "exporter sent spans / metric points",
            f"{c['exporter_sent_spans']:.0f} / {c['exporter_sent_metric_points']:.0f}",
        ),
    ]
    rows += [(f"counter {k}", f"{c[k]:.0f}") for k in MUST_BE_ZERO]
    return rows
