"""``hw.gpu.*`` observable gauges of a worker rank, read when metrics are collected.

Source: NVML (``pynvml``, from ``nvidia-ml-py``, extra ``otel-verl[gpu]``) for the GPUs this
process sees (``CUDA_VISIBLE_DEVICES``); without it, ``torch.cuda`` for the devices this process
has already initialised (memory only; never creates a CUDA context). On a machine without a GPU
nothing is registered, so no zeros are exported. Names and units: ``catalog``; attributes
``hw.id`` (GPU UUID, else ``cuda:<index>``), ``hw.vendor``, ``verl.rank``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from otel_verl import semconv
from otel_verl._safe import warn_once
from otel_verl.instruments import catalog

_log = logging.getLogger(__name__)


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

    catalog.create_observable(meter, catalog.GPU_MEMORY_USAGE, [memory_usage])
    catalog.create_observable(meter, catalog.GPU_MEMORY_LIMIT, [memory_limit])
    if isinstance(source, NvmlSource):
        catalog.create_observable(meter, catalog.GPU_UTILIZATION, [utilization])
