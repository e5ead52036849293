"""The engine's Prometheus families as OTLP instruments (``otel_verl.instruments.engine_metrics``):
a real ``prometheus_client`` registry with vLLM's kinds of families, read by the SDK."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from otel_verl import semconv
from otel_verl.instruments import engine_metrics


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
    yield registry, fams, reader, bridge, clock
    provider.shutdown()


def _points(reader) -> dict[str, list]:
    out: dict[str, list] = {}
    data = reader.get_metrics_data()
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
    clock.now += engine_metrics.DISCOVER_EVERY_S  # a histogram's bounds are known once it has a series
    bridge.discover()

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
    (ttft,) = points["vllm.time_to_first_token_seconds"]  # a real histogram, the engine's own buckets
    assert dict(ttft.attributes) == want
    assert list(ttft.explicit_bounds) == [0.1, 1.0]
    assert list(ttft.bucket_counts) == [1, 1, 1]
    assert ttft.count == 3 and ttft.sum == pytest.approx(5.55)


def test_values_move_between_collections_and_one_registry_read_serves_one_collection(engine):
    registry, fams, reader, bridge, clock = engine
    fams["preempt"].labels(model_name="m", engine="0").inc()
    reads = []
    collect = registry.collect
    registry.collect = lambda: (reads.append(1), list(collect()))[1]
    assert [p.value for p in _points(reader)["vllm.num_preemptions"]] == [1]
    assert len(reads) == 1  # every instrument, one snapshot
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
    for rm in reader.get_metrics_data().resource_metrics:
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


def _ttft(reader):
    (point,) = _points(reader)["vllm.time_to_first_token_seconds"]
    return list(point.bucket_counts), point.count, point.sum


def test_the_engines_histogram_is_replayed_exactly_new_observations_only(engine):
    """Each collection replays what the engine counted since the last one: the exported (cumulative)
    histogram has the engine's bucket counts, count and sum, however many readers collect; an
    engine that starts again (its counts drop) is taken from zero, and the feeding instrument
    reports nothing of its own."""
    registry, fams, reader, bridge, clock = engine
    ttft = fams["ttft"].labels(model_name="m", engine="0")
    ttft.observe(0.02)
    clock.now += engine_metrics.DISCOVER_EVERY_S
    bridge.discover()
    for v in (0.03, 0.7, 0.9, 40.0):
        ttft.observe(v)
    assert _ttft(reader) == ([2, 2, 1], 5, pytest.approx(41.65))
    assert semconv.ENGINE_HISTOGRAM_FEED not in _points(reader)
    clock.now += engine_metrics.SNAPSHOT_TTL_S
    assert _ttft(reader) == ([2, 2, 1], 5, pytest.approx(41.65))  # nothing new: nothing replayed again
    for v in (0.1, 1.0, 1.5):  # on the bounds: le is inclusive
        ttft.observe(v)
    clock.now += engine_metrics.SNAPSHOT_TTL_S
    assert _ttft(reader) == ([3, 3, 2], 8, pytest.approx(44.25))
    # the engine starts again: a new registry, its counts from zero
    registry.unregister(fams["ttft"])
    again = Histogram(
        "vllm:time_to_first_token_seconds", "TTFT", ["model_name", "engine"], buckets=(0.1, 1.0), registry=registry
    )
    again.labels(model_name="m", engine="0").observe(0.5)
    clock.now += engine_metrics.SNAPSHOT_TTL_S
    assert _ttft(reader) == ([3, 4, 2], 9, pytest.approx(44.75))


@pytest.mark.parametrize(
    ("counts", "total"),
    [([3, 0, 0], 0.0), ([3, 0, 0], 0.3), ([0, 2, 0], 1.1), ([1, 1, 1], 100.0), ([0, 0, 4], 4.5), ([2, 5, 0], 4.0)],
)
def test_replayed_values_stay_in_their_buckets_and_add_up_to_the_engines_sum(counts, total):
    replay = engine_metrics.Replay(None, (0.1, 1.0))
    values = replay.values(counts, total)
    edges = [(-float("inf"), 0.1), (0.1, 1.0), (1.0, float("inf"))]
    got = [0, 0, 0]
    for value, n in values:
        (bucket,) = [i for i, (lo, hi) in enumerate(edges) if lo < value <= hi]
        got[bucket] += n
    assert got == counts
    assert sum(v * n for v, n in values) == pytest.approx(total)
