"""The engine's Prometheus families as OTLP instruments (``otel_verl.hooks.rollout.engine_metrics``):
a real ``prometheus_client`` registry with vLLM's kinds of families, read by the SDK."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from otel_verl import semconv
from otel_verl.hooks.rollout import engine_metrics


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def engine():
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    fams = {
        "kv": Gauge("vllm:kv_cache_usage_perc", "KV cache usage", labels, registry=registry),
        "waiting": Gauge("vllm:num_requests_waiting", "waiting", labels, registry=registry),
        "preempt": Counter("vllm:num_preemptions", "preemptions", labels, registry=registry),
        "ttft": Histogram("vllm:time_to_first_token_seconds", "TTFT", labels, buckets=(0.1, 1.0), registry=registry),
        "other": Gauge("ray_something", "not an engine family", registry=registry),
    }
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    clock = _Clock()
    bridge = engine_metrics.Bridge(provider.get_meter("t"), registry, replica=1, clock=clock)
    bridge.discover(force=True)
    engine_metrics._STATE.bridge = bridge  # this process's: the readers add its histograms
    yield registry, fams, reader, bridge, clock
    provider.shutdown()


def _points(reader) -> dict[str, list]:
    """What a reader of otel-verl's pipeline exports: the collection with the engine's histograms."""
    out: dict[str, list] = {}
    data = engine_metrics.add_histograms(reader.get_metrics_data())
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


def test_each_engine_family_becomes_an_instrument_named_like_its_prometheus_series(engine):
    registry, fams, reader, bridge, clock = engine
    model = {"model_name": "tiny", "engine": "0"}
    fams["kv"].labels(**model).set(0.25)
    fams["waiting"].labels(**model).set(3)
    fams["preempt"].labels(**model).inc(2)
    for v in (0.05, 0.5, 5.0):
        fams["ttft"].labels(**model).observe(v)

    points = _points(reader)
    assert set(points) == {
        "vllm.kv_cache_usage_perc",
        "vllm.num_requests_waiting",
        "vllm.num_preemptions",
        "vllm.time_to_first_token_seconds",
    }
    want = {**model, semconv.ATTR_ROLLOUT_REPLICA: 1}
    assert [(p.value, dict(p.attributes)) for p in points["vllm.kv_cache_usage_perc"]] == [(0.25, want)]
    assert [p.value for p in points["vllm.num_requests_waiting"]] == [3]
    assert [p.value for p in points["vllm.num_preemptions"]] == [2]  # the _total series, not _created
    (ttft,) = points["vllm.time_to_first_token_seconds"]  # a real histogram: the engine's own buckets
    assert dict(ttft.attributes) == want
    assert (list(ttft.explicit_bounds), list(ttft.bucket_counts)) == ([0.1, 1.0], [1, 1, 1])
    assert ttft.count == 3 and ttft.sum == pytest.approx(5.55)
    assert ttft.min is None and ttft.max is None  # the engine does not say them


def test_values_move_between_collections_and_one_registry_read_serves_one_collection(engine):
    registry, fams, reader, bridge, clock = engine
    fams["preempt"].labels(model_name="m", engine="0").inc()
    reads = []
    collect = registry.collect
    registry.collect = lambda: (reads.append(1), list(collect()))[1]
    assert [p.value for p in _points(reader)["vllm.num_preemptions"]] == [1]
    assert len(reads) == 1  # every instrument and the histograms, one snapshot
    fams["preempt"].labels(model_name="m", engine="0").inc(4)
    assert [p.value for p in _points(reader)["vllm.num_preemptions"]] == [1]  # same snapshot within its TTL
    clock.now += engine_metrics.SNAPSHOT_TTL_S
    assert [p.value for p in _points(reader)["vllm.num_preemptions"]] == [5]


def test_a_family_registered_late_is_found_at_the_next_discovery(engine):
    registry, fams, reader, bridge, clock = engine
    late = Gauge("sglang:token_usage", "late", registry=registry)
    late.set(0.5)
    bridge.discover()
    assert "sglang.token_usage" not in _points(reader)  # not before DISCOVER_EVERY_S
    clock.now += engine_metrics.DISCOVER_EVERY_S
    bridge.discover()
    assert [p.value for p in _points(reader)["sglang.token_usage"]] == [0.5]


def test_what_is_read_is_bounded(engine, monkeypatch):
    registry, fams, reader, bridge, clock = engine
    monkeypatch.setattr(engine_metrics, "MAX_SERIES", 3)
    for i in range(10):
        fams["waiting"].labels(model_name=f"m{i}", engine="0").set(i)
    fams["kv"].labels(model_name="x" * 1000, engine="0").set(1)
    clock.now += engine_metrics.SNAPSHOT_TTL_S
    points = _points(reader)
    assert len(points["vllm.num_requests_waiting"]) == 3
    (kv,) = points["vllm.kv_cache_usage_perc"]
    assert len(kv.attributes["model_name"]) == engine_metrics.MAX_LABEL_CHARS


def test_the_catalogs_engine_names_are_what_the_bridge_makes_of_vllms_families(engine):
    """collector/ queries catalog.ENGINE's Prometheus names: the bridge must make exactly those."""
    from otel_verl.instruments import catalog

    registry, fams, reader, bridge, clock = engine
    Gauge("vllm:num_requests_running", "running", ["model_name", "engine"], registry=registry).labels("m", "0").set(1)
    model = {"model_name": "m", "engine": "0"}
    fams["kv"].labels(**model).set(0.5)
    fams["waiting"].labels(**model).set(1)
    fams["preempt"].labels(**model).inc()
    fams["ttft"].labels(**model).observe(0.2)
    clock.now += engine_metrics.DISCOVER_EVERY_S
    bridge.discover()
    from opentelemetry.sdk.metrics.export import Gauge as GaugeData
    from opentelemetry.sdk.metrics.export import Histogram as HistogramData
    from opentelemetry.sdk.metrics.export import Sum

    made = {}
    for rm in engine_metrics.add_histograms(reader.get_metrics_data()).resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                data = m.data
                kind = (
                    catalog.HISTOGRAM
                    if isinstance(data, HistogramData)
                    else catalog.OBSERVABLE_GAUGE
                    if isinstance(data, GaugeData)
                    else catalog.OBSERVABLE_COUNTER
                    if isinstance(data, Sum) and data.is_monotonic
                    else catalog.OBSERVABLE_UP_DOWN_COUNTER
                )
                made[m.name] = kind
    for spec in catalog.ENGINE:
        assert made.get(spec.name) == spec.kind, spec.name


class _Exported:
    """A push exporter that keeps what it is handed (as the OTLP exporters are handed it)."""

    def __init__(self, temporality):
        from opentelemetry.sdk.metrics import Histogram as HistogramInstrument
        from opentelemetry.sdk.metrics.export import MetricExporter

        class Exporter(MetricExporter):
            def __init__(self):
                # as the OTLP exporters do: both preferences
                super().__init__(preferred_temporality={HistogramInstrument: temporality}, preferred_aggregation={})
                self.batches = []

            def export(self, metrics_data, timeout_millis=10_000, **kwargs):
                from opentelemetry.sdk.metrics.export import MetricExportResult

                self.batches.append(metrics_data)
                return MetricExportResult.SUCCESS

            def force_flush(self, timeout_millis=10_000):
                return True

            def shutdown(self, timeout_millis=30_000, **kwargs):
                pass

        self.exporter = Exporter()

    def ttft(self):
        """(temporality, per-bucket counts, count, sum) of the last batch's TTFT point."""
        for rm in self.exporter.batches[-1].resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == "vllm.time_to_first_token_seconds":
                        (p,) = m.data.data_points
                        return m.data.aggregation_temporality, list(p.bucket_counts), p.count, p.sum
        return None


@pytest.mark.parametrize("delta", [False, True])
def test_the_step_reader_exports_the_engines_histogram_in_its_exporters_temporality(delta):
    """otel-verl's step reader (every push exporter's) adds the engine's histograms to each batch:
    cumulative as the engine counts, or for a delta exporter (Datadog's intake) what each export
    adds, from zero again after an engine restart."""
    from opentelemetry.sdk.metrics.export import AggregationTemporality

    from otel_verl.process.step_reader import StepMetricReader

    wanted = AggregationTemporality.DELTA if delta else AggregationTemporality.CUMULATIVE
    exported = _Exported(wanted)
    reader = StepMetricReader(exported.exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader])
    registry = CollectorRegistry()
    ttft = Histogram("vllm:time_to_first_token_seconds", "TTFT", ["engine"], buckets=(0.1, 1.0), registry=registry)
    ttft.labels(engine="0").observe(0.05)
    Gauge("vllm:num_requests_running", "running", registry=registry).set(1)  # the server always has more
    clock = _Clock()
    engine_metrics._STATE.bridge = engine_metrics.Bridge(provider.get_meter("t"), registry, 0, clock=clock)
    engine_metrics._STATE.bridge.discover(force=True)
    try:
        seen = []
        for values in ((0.5, 0.7), (), (3.0,)):
            for v in values:
                ttft.labels(engine="0").observe(v)
            clock.now += engine_metrics.SNAPSHOT_TTL_S
            reader.force_flush()
            seen.append(exported.ttft())
        registry.unregister(ttft)  # the engine starts again: its counts from zero
        again = Histogram("vllm:time_to_first_token_seconds", "TTFT", ["engine"], buckets=(0.1, 1.0), registry=registry)
        again.labels(engine="0").observe(0.2)
        clock.now += engine_metrics.SNAPSHOT_TTL_S
        reader.force_flush()
        seen.append(exported.ttft())
    finally:
        provider.shutdown()
    if delta:
        assert seen == [
            (wanted, [1, 2, 0], 3, pytest.approx(1.25)),
            (wanted, [0, 0, 0], 0, pytest.approx(0.0)),
            (wanted, [0, 0, 1], 1, pytest.approx(3.0)),
            (wanted, [0, 1, 0], 1, pytest.approx(0.2)),
        ]
    else:
        assert seen == [
            (wanted, [1, 2, 0], 3, pytest.approx(1.25)),
            (wanted, [1, 2, 0], 3, pytest.approx(1.25)),
            (wanted, [1, 2, 1], 4, pytest.approx(4.25)),
            (wanted, [0, 1, 0], 1, pytest.approx(0.2)),
        ]


def test_a_histogram_the_engine_garbled_is_left_out_and_the_batch_still_goes(engine):
    registry, fams, reader, bridge, clock = engine

    from types import SimpleNamespace as S

    garbled = S(
        name="vllm:odd_seconds",
        type="histogram",
        documentation="odd",
        samples=[
            S(name="vllm:odd_seconds_bucket", labels={"le": "1.0"}, value=5),
            S(name="vllm:odd_seconds_bucket", labels={"le": "+Inf"}, value=2),  # a cumulative count that falls
            S(name="vllm:odd_seconds_sum", labels={}, value=1.0),
        ],
    )

    class Collector:
        def collect(self):
            return [garbled]

    registry.register(Collector())
    fams["kv"].labels(model_name="m", engine="0").set(0.5)
    clock.now += engine_metrics.DISCOVER_EVERY_S
    bridge.discover()
    points = _points(reader)
    assert "vllm.odd_seconds" not in points
    assert [p.value for p in points["vllm.kv_cache_usage_perc"]] == [0.5]
