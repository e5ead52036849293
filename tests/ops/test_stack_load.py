"""Load through the real Collector: a simulated large step (>= 20,000 rollout spans, >= 1,000 metric
series) into Jaeger and Prometheus, with nothing dropped and the Collector under its memory limit.

``bench/stack_load.py`` at test size, once: the OTLP JSON files of a real 2-step v1 GRPO run (the
``verl_runs`` cache, shared with tests/e2e) are replayed with fresh trace/span ids, a fresh
``verl.run.id``/``service.name`` and every process replicated ``RANKS`` times (``verl.rank`` = the
replica), over OTLP gRPC in the SDK's batches, into the Collector of ``otel-verl stack up`` on free
ports. Asserted against the real components:

* Jaeger: the set of (trace id, span id) its query API returns for the sent trace ids (each trace
  fetched by id with ``/api/traces?traceID=...``) equals the set sent. Exact: the ids are fresh, so
  nothing else can match, and a set comparison sees a lost span that a count could hide behind a
  duplicate. Not Jaeger's own metrics: collector/jaeger/jaeger.yaml turns them off (their port
  would be the Collector's 8888), and a search (``?service=``) stops at its ``limit``.
  ``max_traces: 100000`` there does not evict this load: 5,400 traces (a trajectory is its own
  trace of about 4 spans), ~5 % of it.
* Prometheus: ``count({verl_run_id="<fresh>", __name__!="target_info"})`` equals the series sent
  (a histogram point is its buckets + ``_sum`` + ``_count``), the same count for each ``verl_rank``,
  and one ``target_info`` per simulated process.
* The Collector's own counters (its telemetry port): receiver refused/failed, exporter send and
  enqueue failed, memory_limiter's items in minus out: 0; accepted = sent = exported.
* Its peak RSS (the kernel's VmHWM) under ``memory_limiter.limit_mib`` of collector/otelcol-config.yaml.
* A control: a point Prometheus must refuse (older than its out-of-order window) does move
  ``exporter_send_failed_metric_points``, so the zero above reads a counter that counts.

About 40 s with the run cached, measured at load average 40 on 2 cores (build + stack up + load +
drains 23 s: send 1.4 s, Collector drain 2.8 s, mostly the exporters' 2 s ``flush_timeout``, Jaeger
read-back of 20k spans 12 s; the five tests, the control and stack down ~15 s); the run itself, when
no other test made it first, 1.5-5 min. Needs the binaries of ``bash scripts/backends.sh``; skips without.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from support.opskit import stack_bin_dir
from verl_cpu_harness import stack_load

pytestmark = [pytest.mark.e2e, pytest.mark.live_stack]

SPANS = 20_000  # rollout spans of the simulated step
RANKS = 6  # replicas of each of the run's 4 processes: 6 x ~174 series > 1,000
DRAIN_TIMEOUT_S = 240.0  # bound of each wait; 2 shared cores


@pytest.fixture(scope="module")
def loaded(verl_runs, tmp_path_factory) -> Iterator[tuple[dict[str, Any], stack_load.LoadResult]]:
    bin_dir = stack_bin_dir()  # skips before the verl run when the backends are not built
    started = time.monotonic()
    run = verl_runs.get("v1", "grpo", steps=2)
    assert run.returncode == 0, run.output[-3000:]
    run_s, started = time.monotonic() - started, time.monotonic()
    load = stack_load.build_load(stack_load.load_template(run.telemetry_dir), SPANS, RANKS)
    assert load.rollout_spans >= SPANS and load.otlp_series >= 1_000, (load.rollout_spans, load.otlp_series)
    with stack_load.running_stack(tmp_path_factory.mktemp("stack"), bin_dir) as info:
        result = stack_load.run_load(info, load, DRAIN_TIMEOUT_S)
        rows = [
            ("template run (~0 when cached)", f"{run_s:.1f} s"),
            ("build + stack up + load + drains", f"{time.monotonic() - started:.1f} s"),
        ]
        print("\n".join(f"{k}: {v}" for k, v in rows + stack_load.report(result)))  # the figures, with -s
        yield info, result


def test_every_span_reaches_jaeger(loaded):
    _, r = loaded
    assert not r.sent.errors and r.sent.rejected == 0, (r.sent.errors[:5], r.sent.rejected)
    assert r.sent.spans == r.load.spans
    missing, unknown = r.load.span_ids - r.spans_in_jaeger, r.spans_in_jaeger - r.load.span_ids
    assert not missing and not unknown, f"{len(missing)} spans missing, {len(unknown)} not sent, of {r.load.spans}"


def test_every_series_reaches_prometheus(loaded):
    info, r = loaded
    assert r.series_in_prometheus == r.load.prom_series
    port, run_id = info["ports"]["prometheus"], r.load.run_id
    per_rank = stack_load.prometheus_query(
        port, f'count by (verl_rank) ({{verl_run_id="{run_id}", __name__!="target_info"}})'
    )
    assert {int(x["metric"]["verl_rank"]) for x in per_rank} == set(range(RANKS))
    assert {int(x["value"][1]) for x in per_rank} == {r.load.prom_series // RANKS}, per_rank
    assert r.target_infos == len(r.load.processes)


def test_collector_drops_nothing(loaded):
    _, r = loaded
    c = r.counters
    assert {k: c[k] for k in stack_load.MUST_BE_ZERO if c[k]} == {}
    assert c["receiver_accepted_spans"] == c["exporter_sent_spans"] == r.load.spans
    assert c["receiver_accepted_metric_points"] == c["exporter_sent_metric_points"] == r.load.otlp_series


def test_collector_memory_stays_under_its_limit(loaded):
    _, r = loaded
    limit = r.limit_mib * 2**20
    assert 0 < r.hwm_bytes < limit, (r.hwm_bytes, limit)
    assert 0 < r.peak["rss_bytes"] < limit


def test_a_refused_point_moves_the_failure_counter(loaded):
    """The control: Prometheus refuses a sample older than its out-of-order window (30 min), the
    Collector's exporter counts it as failed; the counter the zero assertions read does count."""
    info, r = loaded
    metrics_url = f"http://127.0.0.1:{info['ports']['otelcol-metrics']}/metrics"
    before = stack_load.total(stack_load.scrape(metrics_url), "otelcol_exporter_send_failed_metric_points")
    old = time.time_ns() - 3 * 3600 * 10**9
    point = metrics_pb2.NumberDataPoint(time_unix_nano=old, as_double=1.0)
    request = metrics_service_pb2.ExportMetricsServiceRequest(
        resource_metrics=[
            metrics_pb2.ResourceMetrics(
                resource=resource_pb2.Resource(
                    attributes=[
                        common_pb2.KeyValue(key="service.name", value=common_pb2.AnyValue(string_value=r.load.service)),
                        common_pb2.KeyValue(key="verl.run.id", value=common_pb2.AnyValue(string_value=r.load.run_id)),
                    ]
                ),
                scope_metrics=[
                    metrics_pb2.ScopeMetrics(
                        metrics=[
                            metrics_pb2.Metric(name="verl.load.too_old", gauge=metrics_pb2.Gauge(data_points=[point]))
                        ]
                    )
                ],
            )
        ]
    )
    with grpc.insecure_channel(f"127.0.0.1:{info['ports']['otlp-grpc']}") as channel:
        export = channel.unary_unary(stack_load.METRICS_EXPORT, request_serializer=None, response_deserializer=None)
        export(request.SerializeToString(), timeout=10)  # the receiver takes it: the refusal is downstream

    def failed() -> bool:
        s = stack_load.scrape(metrics_url)
        return stack_load.total(s, "otelcol_exporter_send_failed_metric_points") > before

    stack_load.until("exporter_send_failed_metric_points to count the refused point", failed, 60.0)
