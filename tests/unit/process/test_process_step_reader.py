"""The step-boundary metric reader exports as the SDK's own readers do."""

from __future__ import annotations

from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExporter, MetricExportResult

from otel_verl.process.step_reader import StepMetricReader


class _Recording(MetricExporter):
    def __init__(self) -> None:
        super().__init__()
        self.instrumented: list[bool] = []

    def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        self.instrumented.append(is_instrumentation_enabled())
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        pass


def test_exports_run_with_instrumentation_suppressed():
    """An OTLP exporter's own HTTP or gRPC call is no telemetry: with the requests, urllib3 or grpc
    instrumentation loaded (``opentelemetry-bootstrap``), each step's export would become a trace."""
    exporter = _Recording()
    reader = StepMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader, InMemoryMetricReader()])
    provider.get_meter("t").create_counter("c").add(1)
    reader.mark_step()
    assert reader.force_flush(10_000)
    provider.shutdown()
    assert exporter.instrumented and not any(exporter.instrumented)
