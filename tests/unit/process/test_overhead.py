"""``otel_verl.process.overhead``: otel-verl's own CPU per component, as an observable counter."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_verl import semconv
from otel_verl._safe import safe
from otel_verl.instruments import catalog
from otel_verl.process import overhead
from otel_verl.process.overhead import OverheadClock, component_of, register_overhead_metric, thread_cpu_s

# Per-thread CPU clocks are Linux's (other systems: the counter reports the hooks' share only);
# on Linux they must work, so a broken probe fails here instead of skipping the module.
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread CPU clocks are Linux's")


def test_the_thread_clocks_work_on_linux():
    assert overhead.CLOCK.thread_clocks


def _spin(seconds: float) -> None:
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        pass


@pytest.mark.parametrize(
    ("name", "component"),
    [
        ("otel-verl-record", semconv.COMPONENT_RECORDER),
        ("otel-verl-metrics", semconv.COMPONENT_EXPORTER),
        ("OtelBatchSpanRecordProcessor", semconv.COMPONENT_EXPORTER),
        ("OtelBatchLogRecordProcessor", semconv.COMPONENT_EXPORTER),
        ("otel-verl-flusher", semconv.COMPONENT_FLUSHER),
        ("otel-verl-flush", semconv.COMPONENT_FLUSHER),
        ("otel-verl-stall-watch", semconv.COMPONENT_WATCHDOG),
        ("otel-verl-stall", semconv.COMPONENT_STALL_REPORTER),
        ("otel-verl-new-thing", semconv.COMPONENT_OTHER),
        ("MainThread", None),
        ("OtelPeriodicExportingMetricReader", None),  # not one we start (Ray's or the distro's)
    ],
)
def test_threads_map_to_components(name, component):
    assert component_of(name) == component


def test_a_thread_clock_is_that_threads_cpu_and_none_once_it_ended():
    assert thread_cpu_s(threading.get_native_id()) == pytest.approx(time.thread_time(), abs=0.01)
    t = threading.Thread(target=_spin, args=(0.01,))
    t.start()
    t.join()
    deadline = time.monotonic() + 2.0  # join() returns just before the OS thread is gone
    while thread_cpu_s(t.native_id) is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert thread_cpu_s(t.native_id) is None


def test_our_threads_cpu_is_counted_by_component_and_kept_after_they_end():
    clock = OverheadClock()
    release = threading.Event()
    spun = [threading.Event(), threading.Event()]

    def work(done: threading.Event) -> None:
        _spin(0.05)
        done.set()
        release.wait(30)

    ours = threading.Thread(target=work, args=(spun[0],), name="otel-verl-record")
    theirs = threading.Thread(target=work, args=(spun[1],), name="verl-worker-thread")
    base = clock.totals()  # other tests' pipelines may have recorder threads too
    ours.start()
    theirs.start()
    assert all(e.wait(30) for e in spun)  # both have spent their CPU and are alive, waiting
    live = clock.totals()
    release.set()
    ours.join()
    theirs.join()
    ended = clock.totals()
    assert 0.05 <= live[semconv.COMPONENT_RECORDER] - base[semconv.COMPONENT_RECORDER] < 0.2  # theirs is not in it
    assert ended[semconv.COMPONENT_RECORDER] >= live[semconv.COMPONENT_RECORDER]  # monotonic
    assert set(semconv.OVERHEAD_COMPONENTS) <= set(ended)


def _points(reader: InMemoryMetricReader) -> dict[str, float]:
    out = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == semconv.M_OVERHEAD_CPU_TIME:
                    assert m.unit == "s" and m.data.is_monotonic
                    for p in m.data.data_points:
                        out[p.attributes[semconv.ATTR_OVERHEAD_COMPONENT]] = p.value
    return out


def test_the_counter_reports_every_component_and_grows_with_hook_work():
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("t")
    assert register_overhead_metric(meter) is True
    assert register_overhead_metric(meter) is False  # once per meter

    @safe("hook")
    def hook() -> None:
        _spin(0.03)

    first = _points(reader)
    assert set(first) >= set(semconv.OVERHEAD_COMPONENTS)
    t = threading.Thread(target=hook, name="verl-thread")
    t.start()
    t.join()
    second = _points(reader)
    assert second[semconv.COMPONENT_HOOKS] - first[semconv.COMPONENT_HOOKS] >= 0.03
    assert all(second[c] >= first[c] for c in first)
    assert catalog.OVERHEAD_CPU_TIME in catalog.ALL


def test_a_failing_reading_is_swallowed_and_the_rest_is_still_exported(monkeypatch):
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    meter = provider.get_meter("t")
    register_overhead_metric(meter)
    catalog.create(meter, catalog.TRAINING_STEPS).add(1)

    def broken() -> dict[str, float]:
        raise OSError("no clock")

    monkeypatch.setattr(overhead.CLOCK, "totals", broken)
    names = {m.name for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert semconv.M_TRAINING_STEPS in names


def test_the_pipeline_of_a_process_carries_the_metric(monkeypatch, tmp_path):
    from otel_verl.process.resource import Identity
    from otel_verl.process.telemetry import build_own

    for var in ("OTEL_TRACES_EXPORTER", "OTEL_LOGS_EXPORTER"):
        monkeypatch.setenv(var, "none")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp_json_file")
    monkeypatch.setenv("OTEL_VERL_FILE_DIR", str(tmp_path))
    telemetry = build_own(Identity())
    try:
        telemetry.mark_step()
        telemetry.flush(5.0)
    finally:
        telemetry.shutdown(5.0)
    from otel_verl.offline.otlp_files import read_metric_points

    points = [p for p in read_metric_points(tmp_path) if p.name == semconv.M_OVERHEAD_CPU_TIME]
    assert {p.attributes[semconv.ATTR_OVERHEAD_COMPONENT] for p in points} >= set(semconv.OVERHEAD_COMPONENTS)
    assert all(p.kind == "sum" and p.value >= 0 for p in points)
