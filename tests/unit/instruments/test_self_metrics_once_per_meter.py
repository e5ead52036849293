"""``SelfMetrics`` (``otel_verl.instruments.self_metrics``): otel-verl's own counters reach each
meter once, whoever asks, and a meter that refuses them never breaks the process."""

from __future__ import annotations

import logging

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_verl.instruments import catalog, drops
from otel_verl.instruments.self_metrics import SelfMetrics
from otel_verl.process import overhead
from otel_verl.spool import stats


def _points(reader: InMemoryMetricReader) -> dict[str, int]:
    """Data points per metric name in one collection."""
    out: dict[str, int] = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = out.get(m.name, 0) + len(m.data.data_points)
    return out


def test_each_self_metric_is_added_once_per_meter_and_to_every_meter():
    readers = [InMemoryMetricReader(), InMemoryMetricReader()]
    meters = [MeterProvider(metric_readers=[r]).get_meter("t") for r in readers]
    calls = []
    metrics = SelfMetrics((catalog.TELEMETRY_DROPPED, lambda options: calls.append(1) or []))
    assert [metrics.register(meters[0]), metrics.register(meters[0]), metrics.register(meters[1])] == [
        True,
        False,
        True,
    ]
    readers[0].get_metrics_data()
    assert len(calls) == 1  # one instrument on the first meter, read once per collection


def test_the_three_self_metric_families_register_once_per_meter():
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("t")
    stats.count("traces", "spooled", 10)
    for register in (
        drops.register_dropped_metric,
        overhead.register_overhead_metric,
        stats.register_spool_metrics,
    ):
        assert register(meter) is True
        assert register(meter) is False
    points = _points(reader)
    assert points[catalog.TELEMETRY_DROPPED.name] == len(drops.counts())
    assert points[catalog.SPOOL_BATCHES.name] == points[catalog.SPOOL_BYTES.name] == 1
    assert points[catalog.OVERHEAD_CPU_TIME.name] >= 1


class _RefusingMeter:
    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"no {name} here")


def test_a_meter_that_refuses_them_is_said_once_and_never_raises(monkeypatch, caplog):
    metrics = SelfMetrics((catalog.SPOOL_BATCHES, lambda options: []))
    with caplog.at_level(logging.WARNING):
        assert metrics.register(_RefusingMeter()) is False
        assert metrics.register(_RefusingMeter()) is False
    said = [r for r in caplog.records if "could not be registered" in r.getMessage()]
    assert len(said) == 1 and catalog.SPOOL_BATCHES.name in said[0].getMessage()


class _Meter:
    """A meter that counts the instruments made on it."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def create_observable_counter(self, name: str, **kwargs: object) -> None:
        self.made.append(name)


def _at_the_id_of(freed: int) -> tuple[_Meter, list[_Meter]]:
    """A new meter at the address of a freed one (CPython hands a freed block out again; the meters
    made on the way stay alive, so each try is at a new address)."""
    tries: list[_Meter] = []
    for _ in range(100_000):
        meter = _Meter()
        if id(meter) == freed:
            return meter, tries
        tries.append(meter)
    raise AssertionError("no new meter came at the freed meter's id")


def test_a_new_meter_at_a_freed_meters_id_gets_them_too():
    metrics = SelfMetrics((catalog.TELEMETRY_DROPPED, lambda options: []))
    first = _Meter()
    assert metrics.register(first) is True
    freed = id(first)
    del first  # a pipeline shut down and dropped: its meter is freed
    second, _tries = _at_the_id_of(freed)
    assert metrics.register(second) is True  # remembered by id(), it would be skipped
    assert second.made == [catalog.TELEMETRY_DROPPED.name]
    assert metrics.register(second) is False
