"""GPU and process metrics of a worker process.

Observable gauges (semantic conventions ``hw.gpu.*``), read when metrics are collected:

======================  =====  =====================================================
``hw.gpu.memory.usage`` By     memory in use on the device (NVML: all processes;
                               torch fallback: total - free of ``mem_get_info``)
``hw.gpu.memory.limit`` By     device memory size
``hw.gpu.utilization``  1      fraction of time a kernel ran (NVML only)
======================  =====  =====================================================

Attributes: ``hw.id`` (GPU UUID, else ``cuda:<index>``), ``hw.vendor``, ``verl.rank``.
Source: NVML (``pynvml``, from ``nvidia-ml-py``, extra ``otel-verl[gpu]``) for the GPUs this
process sees (``CUDA_VISIBLE_DEVICES``); without it, ``torch.cuda`` for the devices this process
has already initialised (memory only; never creates a CUDA context). On a machine without a GPU
nothing is registered, so no zeros are exported.

``process.*`` CPU / memory / thread metrics come from ``opentelemetry-instrumentation-system-metrics``
(when installed), limited to the process metrics, on this process's meter provider.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from otel_verl import semconv
from otel_verl._safe import warn_once
from otel_verl.config import settings

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_registered: set[int] = set()  # id() of meters that have the gauges
_process_metrics: Any = None


class _Device:
    __slots__ = ("handle", "attrs")

    def __init__(self, handle: Any, attrs: dict[str, Any]) -> None:
        self.handle = handle
        self.attrs = attrs


def _visible_indices(count: int) -> list[Any]:
    """Physical NVML indexes (or UUIDs) of ``CUDA_VISIBLE_DEVICES``; all devices if unset."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return list(range(count))  # set but empty (Ray, num_gpus=0): no device
    out: list[Any] = []
    for part in raw.split(","):
        part = part.strip()
        if not part:
            continue
        out.append(int(part) if part.isdigit() else part)
    return out


class NvmlSource:
    vendor = "nvidia"

    def __init__(self, nvml: Any, rank: int | None) -> None:
        self._nvml = nvml
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
        self.devices: list[_Device] = []
        for ref in _visible_indices(count):
            if isinstance(ref, int):
                if ref >= count:
                    continue
                handle = nvml.nvmlDeviceGetHandleByIndex(ref)
            else:
                handle = nvml.nvmlDeviceGetHandleByUUID(ref)
            uuid = nvml.nvmlDeviceGetUUID(handle)
            if isinstance(uuid, bytes):
                uuid = uuid.decode()
            attrs: dict[str, Any] = {semconv.ATTR_HW_ID: str(uuid), semconv.ATTR_HW_VENDOR: self.vendor}
            if rank is not None:
                attrs[semconv.RES_RANK] = rank
            self.devices.append(_Device(handle, attrs))

    def memory(self) -> Iterable[tuple[dict[str, Any], int, int]]:
        for dev in self.devices:
            info = self._nvml.nvmlDeviceGetMemoryInfo(dev.handle)
            yield dev.attrs, int(info.used), int(info.total)

    def utilization(self) -> Iterable[tuple[dict[str, Any], float]]:
        for dev in self.devices:
            rates = self._nvml.nvmlDeviceGetUtilizationRates(dev.handle)
            yield dev.attrs, float(rates.gpu) / 100.0


class TorchSource:
    """Memory of the CUDA devices this process already uses (no NVML)."""

    vendor = "nvidia"

    def __init__(self, torch: Any, rank: int | None) -> None:
        self._torch = torch
        self._rank = rank
        self.devices: list[_Device] = []

    def _current(self) -> list[_Device]:
        cuda = self._torch.cuda
        if not self.devices and cuda.is_available() and cuda.is_initialized():
            index = cuda.current_device()
            uuid = getattr(cuda.get_device_properties(index), "uuid", None)
            hw_id = f"GPU-{uuid}" if uuid is not None else f"cuda:{index}"
            attrs: dict[str, Any] = {semconv.ATTR_HW_ID: hw_id, semconv.ATTR_HW_VENDOR: self.vendor}
            if self._rank is not None:
                attrs[semconv.RES_RANK] = self._rank
            self.devices = [_Device(index, attrs)]
        return self.devices

    def memory(self) -> Iterable[tuple[dict[str, Any], int, int]]:
        for dev in self._current():
            free, total = self._torch.cuda.mem_get_info(dev.handle)
            yield dev.attrs, int(total - free), int(total)

    def utilization(self) -> Iterable[tuple[dict[str, Any], float]]:
        return ()


def find_source(rank: int | None) -> Any:
    """NVML if importable and it sees a GPU, else torch.cuda if usable, else None."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            source = NvmlSource(pynvml, rank)
            if source.devices:
                return source
        except Exception:  # noqa: BLE001 - no driver / no GPU: NVMLError
            _log.debug("NVML not usable", exc_info=True)
    torch = sys.modules.get("torch")  # never import torch just for metrics
    if torch is not None:
        try:
            if torch.cuda.is_available():
                return TorchSource(torch, rank)
        except Exception:  # noqa: BLE001
            _log.debug("torch.cuda not usable", exc_info=True)
    return None


def register_gpu_metrics(meter: Any, source: Any) -> None:
    def memory_usage(options: CallbackOptions) -> Iterable[Observation]:
        try:
            return [Observation(used, attrs) for attrs, used, _ in source.memory()]
        except Exception:  # noqa: BLE001
            warn_once("gpu-memory", "reading GPU memory failed; hw.gpu.memory.* skipped", exc_info=True)
            return []

    def memory_limit(options: CallbackOptions) -> Iterable[Observation]:
        try:
            return [Observation(total, attrs) for attrs, _, total in source.memory()]
        except Exception:  # noqa: BLE001
            return []

    def utilization(options: CallbackOptions) -> Iterable[Observation]:
        try:
            return [Observation(value, attrs) for attrs, value in source.utilization()]
        except Exception:  # noqa: BLE001
            warn_once("gpu-util", "reading GPU utilization failed; hw.gpu.utilization skipped", exc_info=True)
            return []

    meter.create_observable_gauge(
        semconv.M_GPU_MEMORY_USAGE, callbacks=[memory_usage], unit="By", description="GPU memory in use"
    )
    meter.create_observable_gauge(
        semconv.M_GPU_MEMORY_LIMIT, callbacks=[memory_limit], unit="By", description="GPU memory size"
    )
    if isinstance(source, NvmlSource):
        meter.create_observable_gauge(
            semconv.M_GPU_UTILIZATION, callbacks=[utilization], unit="1", description="GPU utilization (0-1)"
        )


def _start_process_metrics(meter_provider: Any) -> None:
    try:
        from opentelemetry.instrumentation.system_metrics import SystemMetricsInstrumentor
    except ImportError:
        return

    class _ProcessMetrics(SystemMetricsInstrumentor):  # type: ignore[misc]
        # Its own singleton: ``opentelemetry-instrument`` may already have instrumented the
        # contrib class (entry point ``system_metrics``) with the global provider.
        _instance = None

    global _process_metrics
    if _process_metrics is None:
        _process_metrics = _ProcessMetrics(config=dict(semconv.SYSTEM_METRICS_CONFIG))
    if not _process_metrics.is_instrumented_by_opentelemetry:
        _process_metrics.instrument(meter_provider=meter_provider, skip_dep_check=True)


def stop_process_metrics() -> None:
    """Undo the process metrics (tests)."""
    if _process_metrics is not None and _process_metrics.is_instrumented_by_opentelemetry:
        _process_metrics.uninstrument()


def ensure_worker_metrics(rank: int | None = None) -> bool:
    """Register GPU and process metrics once per process (per meter); returns whether GPU gauges exist."""
    from otel_verl.runtime import RUNTIME

    try:
        telemetry = RUNTIME.telemetry
        with _lock:
            if id(telemetry.meter) in _registered:
                return False
            _registered.add(id(telemetry.meter))
        cfg = settings()
        if cfg.process_metrics:
            _start_process_metrics(telemetry.meter_provider)
        if not cfg.gpu_metrics:
            return False
        source = find_source(rank)
        if source is None:
            return False
        register_gpu_metrics(telemetry.meter, source)
        return True
    except Exception:  # noqa: BLE001 - metrics must never break a worker
        warn_once("worker-metrics", "GPU/process metrics could not be registered", exc_info=True)
        return False
