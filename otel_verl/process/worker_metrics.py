"""A verl process's own gauges: ``process.*`` and ``otel_verl.overhead.cpu_time`` in every verl
process, ``hw.gpu.*`` in worker ranks.

Registered once per process (per meter), by the first hook that knows the process's role:
the trainer's ``__init__`` (TaskRunner), the first worker span (a rank), the first rollout
hook (agent-loop worker). Collected at step boundaries (a worker rank's: when its driver calls
pause, at most once a second, ``idle_export``) and every ``OTEL_METRIC_EXPORT_INTERVAL``.
"""

from __future__ import annotations

from otel_verl import per_process
from otel_verl._safe import safe, warn_once
from otel_verl.config import settings
from otel_verl.instruments import gpu, system
from otel_verl.instruments.self_metrics import Meters
from otel_verl.process.overhead import register_overhead_metric
from otel_verl.process.state import PROCESS

_registered = Meters()  # the meters that have the gauges
per_process.register(__name__, reset=_registered.clear)


@safe("worker-metrics", default=False)  # and its CPU (the pipeline build on first use) counts as hooks
def ensure_worker_metrics() -> bool:
    """Register GPU and process metrics once per process (per meter); returns whether GPU gauges exist."""
    try:
        cfg = settings()
        # a process's first call comes before its resource is made: the GPUs' driver goes on it
        early = cfg.gpu_metrics and not PROCESS.built
        source = gpu.find_source() if early else None
        if source is not None:
            PROCESS.identity.extra.update(source.resource_attributes())
        telemetry = PROCESS.telemetry
        if not _registered.first(telemetry.meter):
            return False
        register_overhead_metric(telemetry.meter)  # otel-verl's own CPU, in every verl process
        if cfg.process_metrics:
            system.start_process_metrics(telemetry.meter_provider)
        if not cfg.gpu_metrics:
            return False
        if not early:
            source = gpu.find_source()
        if source is None:
            return False
        gpu.register_gpu_metrics(telemetry.meter, source)
        return True
    except Exception:  # noqa: BLE001 - metrics must never break a worker
        warn_once("worker-metrics", "GPU/process metrics could not be registered", exc_info=True)
        return False
