"""Shared fixtures: in-memory exporters and an instrumented process (hermetic)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_verl import VerlInstrumentor
from otel_verl.runtime import RUNTIME


@dataclass
class Captured:
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def metric_points(self) -> dict[str, list]:
        """metric name -> its data points (last collection)."""
        out: dict[str, list] = {}
        data = self.reader.get_metrics_data()
        for rm in data.resource_metrics if data else []:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    out.setdefault(metric.name, []).extend(metric.data.data_points)
        return out


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[Captured]:
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "test-run")
    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    instrumentor = VerlInstrumentor()
    instrumentor.instrument(tracer_provider=tp, meter_provider=mp)
    try:
        yield Captured(spans, reader)
    finally:
        instrumentor.uninstrument()
        RUNTIME.use_providers(None, None)


@pytest.fixture
def v0_trainer():
    """A real v0 ``RayPPOTrainer`` object at step 3 of 2-step epochs (no workers started)."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    trainer = RayPPOTrainer.__new__(RayPPOTrainer)
    trainer.global_steps = 3
    trainer.train_dataloader = [0, 1]
    RUNTIME.trainer = trainer
    yield trainer
    RUNTIME.trainer = None
