"""GPU metrics of a worker rank by the OpenTelemetry hardware conventions, read at collection time.

``hw.gpu.memory.usage`` / ``hw.gpu.memory.limit`` (UpDownCounters, ``By``),
``hw.gpu.memory.utilization`` and ``hw.gpu.utilization`` (gauges, ``1``; the latter per
``hw.gpu.task``: ``general``, and ``encoder``/``decoder`` where NVML reports them), the generic
``hw.power`` (W), ``hw.energy`` (J, a counter) and ``hw.temperature`` (Cel), each with ``hw.type=gpu``
and the identifying attributes ``hw.id`` (GPU UUID), ``hw.name``, ``hw.vendor``, ``hw.model`` and
``verl.gpu.index``; and ``verl.process.gpu.memory.usage``: the memory this rank's own process holds on
the device (which rank leaks). The rank is the resource's ``verl.rank``, and the host's driver
(``hw.driver_version``) goes on the resource too (``resource_attributes``): on every point, a
driver update would start a new series of every GPU metric.

Source: NVML (``pynvml``, from ``nvidia-ml-py``, extra ``otel-verl[gpu]``) for the GPUs this process
sees (``CUDA_VISIBLE_DEVICES``); without it, ``torch.cuda`` for the device this process has already
initialised (memory only; never creates a CUDA context). A reading a GPU does not support (older
boards: no energy counter) is skipped for that GPU after its first failure. On a machine without a
GPU nothing is registered, so no zeros are exported. Names, kinds and units: ``catalog``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from otel_verl import semconv
from otel_verl._safe import warn_once
from otel_verl.instruments import catalog

_log = logging.getLogger(__name__)

Reading = Iterable[tuple[dict[str, Any], float]]


class GpuDevice:
    __slots__ = ("handle", "index", "attrs")

    def __init__(self, handle: Any, index: int | None, attrs: dict[str, Any]) -> None:
        self.handle = handle
        self.index = index
        self.attrs = attrs


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _identity(hw_id: str, index: int | None, **extra: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        semconv.ATTR_HW_ID: hw_id,
        semconv.ATTR_HW_TYPE: semconv.HW_TYPE_GPU,
        semconv.ATTR_HW_VENDOR: "nvidia",
    }
    if index is not None:
        attrs[semconv.ATTR_HW_NAME] = f"gpu{index}"
        attrs[semconv.ATTR_GPU_INDEX] = index
    attrs.update({k: v for k, v in extra.items() if v})
    return attrs


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


class GpuSource:
    """What a source can read; each method yields ``(attributes, value)`` per device."""

    devices: list[GpuDevice]
    driver_version: str | None = None

    def resource_attributes(self) -> dict[str, Any]:
        """What the process's resource carries of its GPUs: the host's driver, where known."""
        return {semconv.ATTR_HW_DRIVER_VERSION: self.driver_version} if self.driver_version else {}

    def memory(self) -> Iterable[tuple[dict[str, Any], int, int]]:
        return ()

    def utilization(self) -> Reading:
        return ()

    def power(self) -> Reading:
        return ()

    def energy(self) -> Reading:
        return ()

    def temperature(self) -> Reading:
        return ()

    def process_memory(self, pid: int) -> Reading:
        return ()


class NvmlSource(GpuSource):
    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._unsupported: set[tuple[str, int]] = set()  # (reading, id(device)) that failed once
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
        self.driver_version = self._optional(lambda: _text(nvml.nvmlSystemGetDriverVersion()))
        self.devices = []
        for ref in _visible_indices(count):
            if isinstance(ref, int):
                if ref >= count:
                    continue
                handle = nvml.nvmlDeviceGetHandleByIndex(ref)
                index: int | None = ref
            else:
                handle = nvml.nvmlDeviceGetHandleByUUID(ref)
                index = self._optional(lambda h=handle: int(nvml.nvmlDeviceGetIndex(h)))
            model = self._optional(lambda h=handle: _text(nvml.nvmlDeviceGetName(h)))
            attrs = _identity(_text(nvml.nvmlDeviceGetUUID(handle)), index, **{semconv.ATTR_HW_MODEL: model})
            self.devices.append(GpuDevice(handle, index, attrs))

    @staticmethod
    def _optional(read: Callable[[], Any]) -> Any:
        try:
            return read()
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported and friends: leave it out
            return None

    def _each(self, reading: str, read: Callable[[GpuDevice], Any]) -> Iterable[tuple[GpuDevice, Any]]:
        for dev in self.devices:
            key = (reading, id(dev))
            if key in self._unsupported:
                continue
            try:
                yield dev, read(dev)
            except Exception:  # noqa: BLE001 - not supported on this GPU (or it is lost): stop asking
                self._unsupported.add(key)
                _log.debug("NVML %s not readable on %s", reading, dev.attrs[semconv.ATTR_HW_ID], exc_info=True)

    def memory(self) -> Iterable[tuple[dict[str, Any], int, int]]:
        for dev in self.devices:  # memory is the one reading every GPU has: errors are reported
            info = self._nvml.nvmlDeviceGetMemoryInfo(dev.handle)
            yield dev.attrs, int(info.used), int(info.total)

    def utilization(self) -> Reading:
        nvml = self._nvml
        for dev, rates in self._each("utilization", lambda d: nvml.nvmlDeviceGetUtilizationRates(d.handle)):
            yield {**dev.attrs, semconv.ATTR_HW_GPU_TASK: semconv.GPU_TASK_GENERAL}, float(rates.gpu) / 100.0
        for task, fn in (
            (semconv.GPU_TASK_ENCODER, "nvmlDeviceGetEncoderUtilization"),
            (semconv.GPU_TASK_DECODER, "nvmlDeviceGetDecoderUtilization"),
        ):
            read = getattr(nvml, fn, None)
            if read is None:
                continue
            for dev, value in self._each(task, lambda d, r=read: r(d.handle)):
                percent = value[0] if isinstance(value, (list, tuple)) else value  # [utilization, period]
                yield {**dev.attrs, semconv.ATTR_HW_GPU_TASK: task}, float(percent) / 100.0

    def power(self) -> Reading:
        for dev, mw in self._each("power", lambda d: self._nvml.nvmlDeviceGetPowerUsage(d.handle)):
            yield dev.attrs, float(mw) / 1000.0

    def energy(self) -> Reading:
        for dev, mj in self._each("energy", lambda d: self._nvml.nvmlDeviceGetTotalEnergyConsumption(d.handle)):
            yield dev.attrs, float(mj) / 1000.0

    def temperature(self) -> Reading:
        nvml = self._nvml
        sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        for dev, celsius in self._each("temperature", lambda d: nvml.nvmlDeviceGetTemperature(d.handle, sensor)):
            yield dev.attrs, float(celsius)

    def process_memory(self, pid: int) -> Reading:
        read = self._nvml.nvmlDeviceGetComputeRunningProcesses
        for dev, procs in self._each("processes", lambda d: read(d.handle)):
            used = [getattr(p, "usedGpuMemory", None) for p in procs if getattr(p, "pid", None) == pid]
            used = [u for u in used if isinstance(u, int)]  # None where the driver hides it (containers)
            if used:
                yield dev.attrs, float(sum(used))


class TorchSource(GpuSource):
    """Memory of the CUDA device this process already uses (no NVML)."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self.devices = []

    def _current(self) -> list[GpuDevice]:
        cuda = self._torch.cuda
        if not self.devices and cuda.is_available() and cuda.is_initialized():
            index = cuda.current_device()
            props = cuda.get_device_properties(index)
            uuid = getattr(props, "uuid", None)
            hw_id = f"GPU-{uuid}" if uuid is not None else f"cuda:{index}"
            attrs = _identity(hw_id, None, **{semconv.ATTR_HW_MODEL: getattr(props, "name", None)})
            attrs[semconv.ATTR_HW_NAME] = f"cuda:{index}"  # the process's own (logical) index
            self.devices = [GpuDevice(index, index, attrs)]
        return self.devices

    def memory(self) -> Iterable[tuple[dict[str, Any], int, int]]:
        for dev in self._current():
            free, total = self._torch.cuda.mem_get_info(dev.handle)
            yield dev.attrs, int(total - free), int(total)

    def process_memory(self, pid: int) -> Reading:
        for dev in self._current():  # what this process's caching allocator holds
            yield dev.attrs, float(self._torch.cuda.memory_reserved(dev.handle))


def find_source() -> GpuSource | None:
    """NVML if importable and it sees a GPU, else torch.cuda if usable, else None."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            source = NvmlSource(pynvml)
            if source.devices:
                return source
        except Exception:  # noqa: BLE001 - no driver / no GPU: NVMLError
            _log.debug("NVML not usable", exc_info=True)
    torch = sys.modules.get("torch")  # never import torch just for metrics
    if torch is not None:
        try:
            if torch.cuda.is_available():
                return TorchSource(torch)
        except Exception:  # noqa: BLE001
            _log.debug("torch.cuda not usable", exc_info=True)
    return None


def _callback(name: str, read: Callable[[], Reading]) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        try:
            return [Observation(value, attrs) for attrs, value in read()]
        except Exception:  # noqa: BLE001 - a lost GPU must not break the collection of the rest
            warn_once(f"gpu-{name}", "reading GPU %s failed; that metric is skipped", name, exc_info=True)
            return []

    return observe


def register_gpu_metrics(meter: Any, source: GpuSource) -> None:
    pid = os.getpid()

    def memory() -> list[tuple[dict[str, Any], int, int]]:
        return list(source.memory())

    def utilization_of_memory() -> Reading:
        return [(attrs, used / total) for attrs, used, total in memory() if total > 0]

    readings: list[tuple[catalog.InstrumentSpec, Callable[[], Reading]]] = [
        (catalog.GPU_MEMORY_USAGE, lambda: [(a, used) for a, used, _ in memory()]),
        (catalog.GPU_MEMORY_LIMIT, lambda: [(a, total) for a, _, total in memory()]),
        (catalog.GPU_MEMORY_UTILIZATION, utilization_of_memory),
        (catalog.PROCESS_GPU_MEMORY_USAGE, lambda: source.process_memory(pid)),
    ]
    if isinstance(source, NvmlSource):  # torch.cuda has no utilization, power or temperature
        readings += [
            (catalog.GPU_UTILIZATION, source.utilization),
            (catalog.HW_POWER, source.power),
            (catalog.HW_ENERGY, source.energy),
            (catalog.HW_TEMPERATURE, source.temperature),
        ]
    for spec, read in readings:
        catalog.create_observable(meter, spec, [_callback(spec.name, read)])
