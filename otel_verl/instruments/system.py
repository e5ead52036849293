"""``process.*`` CPU / memory / thread metrics of a verl process.

From ``opentelemetry-instrumentation-system-metrics`` (extra ``otel-verl[system]``), limited to
its process metrics (``semconv.SYSTEM_METRICS_CONFIG``), on this process's own meter provider.
"""

from __future__ import annotations

from typing import Any

from otel_verl import semconv

_process_metrics: Any = None


def start_process_metrics(meter_provider: Any) -> bool:
    """Start the process metrics on ``meter_provider``; False when the package is not installed."""
    try:
        from opentelemetry.instrumentation.system_metrics import SystemMetricsInstrumentor
    except ImportError:
        return False

    class _ProcessMetrics(SystemMetricsInstrumentor):  # type: ignore[misc]
        # Its own singleton: ``opentelemetry-instrument`` may already have instrumented the
        # contrib class (entry point ``system_metrics``) with the global provider.
        _instance = None

    global _process_metrics
    if _process_metrics is None:
        _process_metrics = _ProcessMetrics(config=dict(semconv.SYSTEM_METRICS_CONFIG))
    if not _process_metrics.is_instrumented_by_opentelemetry:
        _process_metrics.instrument(meter_provider=meter_provider, skip_dep_check=True)
    return True


def stop_process_metrics() -> None:
    """Undo the process metrics (tests)."""
    if _process_metrics is not None and _process_metrics.is_instrumented_by_opentelemetry:
        _process_metrics.uninstrument()
