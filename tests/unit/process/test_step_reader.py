"""The step-boundary metric reader exports as the SDK's own readers do."""

from __future__ import annotations

import pytest
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExporter, MetricExportResult

from otel_verl.process.step_reader import StepMetricReader


class _Recording(MetricExporter):
    def __init__(self) -> None:
        super().__init__()
        self.instrumented: list[bool] = []
        self.batches: list = []

    def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        self.instrumented.append(is_instrumentation_enabled())
        self.batches.append(metrics_data)
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


def test_no_two_collections_share_a_millisecond():
    """Prometheus keeps milliseconds and refuses (HTTP 400) a changed value at a timestamp it has:
    steps marked back to back, then a flush, each export their points at a later millisecond."""
    exporter = _Recording()
    reader = StepMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader])
    gauge = provider.get_meter("t").create_gauge("g")
    for step in range(5):
        gauge.set(step)
        reader.mark_step()
    assert reader.force_flush(10_000)
    provider.shutdown()
    stamps = [
        point.time_unix_nano // 1_000_000
        for batch in exporter.batches
        for resource in batch.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
    ]
    assert len(stamps) >= 6 and stamps == sorted(set(stamps)), stamps


@pytest.mark.parametrize("spool", ["on", "off"])
@pytest.mark.parametrize("preference", ["delta", "cumulative"])
def test_the_temporality_preference_of_the_environment_reaches_the_wire(monkeypatch, tmp_path, spool, preference):
    """``OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta`` (what Datadog's OTLP intake
    takes): the pipeline ``build_own`` makes from the environment, spooling or not, sends counters
    and histograms as DELTA, each step's increment alone (a collection with nothing new sends no
    point); ``cumulative`` (the default) the running sums."""
    from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality
    from support.otlp_grpc_receiver import GrpcReceiver

    from otel_verl import config, semconv
    from otel_verl.process.resource import Identity
    from otel_verl.process.telemetry import build_own

    with GrpcReceiver() as receiver:
        for name, value in {
            "OTEL_VERL_RUN_ID": "delta-run",
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": preference,
            "OTEL_METRIC_EXPORT_INTERVAL": "3600000",  # the steps alone export
            config.SPOOL: spool,
            config.SPOOL_DIR: str(tmp_path / "spool"),
        }.items():
            monkeypatch.setenv(name, value)
        config.settings.cache_clear()
        tel = build_own(Identity(role=semconv.ROLE_TASKRUNNER))
        try:
            counter = tel.meter.create_counter("t.tokens")
            histogram = tel.meter.create_histogram("t.duration")
            for _ in range(3):
                counter.add(5)
                histogram.record(1.0)
                tel.mark_step()
            tel.flush(10)
        finally:
            tel.shutdown(10)
            config.settings.cache_clear()
        seen: dict[str, list[tuple[int, float]]] = {"t.tokens": [], "t.duration": []}
        for signal, request in receiver.requests:
            for rm in request.resource_metrics if signal == "metrics" else ():
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        if m.name == "t.tokens":
                            seen[m.name] += [(m.sum.aggregation_temporality, p.as_int) for p in m.sum.data_points]
                        elif m.name == "t.duration":
                            seen[m.name] += [
                                (m.histogram.aggregation_temporality, p.count) for p in m.histogram.data_points
                            ]
    if preference == "delta":
        want = AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
        assert seen == {"t.tokens": [(want, 5)] * 3, "t.duration": [(want, 1)] * 3}, seen
    else:
        want = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
        # flush and shutdown collect again: the same sums once more
        steps = {name: points[:3] for name, points in seen.items()}
        assert steps == {"t.tokens": [(want, 5), (want, 10), (want, 15)], "t.duration": [(want, n) for n in (1, 2, 3)]}
        assert {t for points in seen.values() for t, _ in points} == {want}, seen
