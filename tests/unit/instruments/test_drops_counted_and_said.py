"""What a full queue drops is visible: ``otel_verl.telemetry.dropped{otel_verl.dropped.kind}`` and
one warning per kind and process, from each queue of data (the step recorder, the step metric
reader's exports); the span flusher's coalesced requests are no loss and say nothing."""

from __future__ import annotations

import logging
import threading

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExporter, MetricExportResult
from opentelemetry.sdk.trace import TracerProvider

DROPPED = "otel_verl.telemetry.dropped"
KIND = "otel_verl.dropped.kind"


def _dropped_points(reader: InMemoryMetricReader) -> dict[str, int]:
    data = reader.get_metrics_data()
    out: dict[str, int] = {}
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == DROPPED:
                    out.update({p.attributes[KIND]: p.value for p in metric.data.data_points})
    return out


def _drop_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "otel_verl" and DROPPED in r.getMessage()]


def test_steps_the_recorder_drops_are_counted_and_said_once(caplog):
    from otel_verl.process.telemetry import MAX_PENDING_STEPS, Telemetry

    reader = InMemoryMetricReader()
    tel = Telemetry(TracerProvider(), MeterProvider(metric_readers=[reader]))
    before = _dropped_points(reader).get("step", 0)
    gate, started = threading.Event(), threading.Event()

    def blocked() -> None:
        started.set()
        gate.wait(30)

    tel.submit(blocked)
    assert started.wait(30)  # the recorder holds step 0: the queue is empty and bounded
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        for _ in range(MAX_PENDING_STEPS + 3):
            tel.submit(lambda: None)
    gate.set()
    assert tel.drain(timeout_s=30)
    assert tel.dropped_steps == 3
    assert _dropped_points(reader)["step"] == before + 3
    (message,) = _drop_warnings(caplog)
    assert "step's metrics were dropped" in message and f"{KIND}=step" in message


def test_metric_batches_the_export_queue_drops_are_counted_and_said_once(caplog):
    from otel_verl.process.step_reader import MAX_PENDING, StepMetricReader

    gate, started = threading.Event(), threading.Event()

    class Stuck(MetricExporter):  # a hung endpoint
        def export(self, metrics_data, timeout_millis=10_000, **kwargs):
            started.set()
            gate.wait(30)
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis=10_000):
            return True

        def shutdown(self, timeout_millis=30_000, **kwargs):
            pass

    step_reader = StepMetricReader(Stuck(), export_interval_millis=600_000)
    seen = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[step_reader, seen])
    from otel_verl.instruments import drops

    drops.register_dropped_metric(provider.get_meter("t"))
    provider.get_meter("t").create_counter("c").add(1)
    before = _dropped_points(seen).get("metric_export", 0)
    step_reader.mark_step()
    assert started.wait(30)  # the export thread is stuck in the first batch
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        for _ in range(MAX_PENDING + 2):
            step_reader.mark_step()
    assert step_reader.dropped == 2
    assert _dropped_points(seen)["metric_export"] == before + 2
    (message,) = _drop_warnings(caplog)
    assert "metric batch was dropped" in message and f"{KIND}=metric_export" in message
    gate.set()
    provider.shutdown(timeout_millis=5_000)


def test_coalesced_flush_requests_are_no_loss(caplog):
    from otel_verl.process.background import OrderedWorker

    gate, started = threading.Event(), threading.Event()

    def flush(_):
        started.set()
        gate.wait(30)

    worker: OrderedWorker[None] = OrderedWorker("otel-verl-flusher", flush, 1)  # like Telemetry's
    worker.put(None)
    assert started.wait(30)
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        for _ in range(5):
            worker.put(None)
    gate.set()
    worker.stop(30)
    assert worker.dropped == 4 and _drop_warnings(caplog) == []
