"""In-memory traces, metrics and logs for the log and sample tests (hermetic)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.test.test_base import TestBase

from otel_verl import VerlInstrumentor, config
from otel_verl.process.state import PROCESS


@dataclass
class Logged:
    spans: InMemorySpanExporter
    logs: InMemoryLogRecordExporter
    instrumentor: VerlInstrumentor

    def records(self):
        return [r.log_record for r in self.logs.get_finished_logs()]


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> Iterator[Logged]:
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "test-run")
    for name in ("OTEL_VERL_LOG_LEVEL", "OTEL_VERL_SAMPLES", "OTEL_VERL_SAMPLES_EVERY_N_STEPS"):
        monkeypatch.delenv(name, raising=False)
    config.settings.cache_clear()
    tp, spans = TestBase.create_tracer_provider()  # opentelemetry-test-utils' in-memory pipelines
    mp, _ = TestBase.create_meter_provider()
    logs = InMemoryLogRecordExporter()  # test-utils has no log pipeline: the SDK's own exporter
    lp = LoggerProvider()
    lp.add_log_record_processor(SimpleLogRecordProcessor(logs))
    instrumentor = VerlInstrumentor()
    instrumentor.instrument(tracer_provider=tp, meter_provider=mp, logger_provider=lp)
    try:
        yield Logged(spans, logs, instrumentor)
    finally:
        instrumentor.uninstrument()
        PROCESS.use_providers(None, None)
        config.settings.cache_clear()
