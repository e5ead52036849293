"""hw.gpu.* gauges: NVML faked at the module boundary (a stand-in ``pynvml`` module), the rest real."""

from __future__ import annotations

import sys
import types

import pytest

from otel_verl import semconv
from otel_verl.instruments import gpu, system
from otel_verl.process import worker_metrics
from otel_verl.process.state import PROCESS

GiB = 1024**3


class NVMLError(Exception):
    pass


def fake_nvml(devices, *, fail_init=False):
    """A ``pynvml`` module: devices = list of (uuid, used, total, util_percent)."""
    mod = types.ModuleType("pynvml")
    mod.NVMLError = NVMLError
    mod.calls = []

    def init():
        if fail_init:
            raise NVMLError("NVML Shared Library Not Found")

    class Mem:
        def __init__(self, used, total):
            self.used, self.total, self.free = used, total, total - used

    class Util:
        def __init__(self, gpu_pct):
            self.gpu, self.memory = gpu_pct, 0

    mod.nvmlInit = init
    mod.nvmlDeviceGetCount = lambda: len(devices)
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetHandleByUUID = lambda u: [d[0] for d in devices].index(u)
    mod.nvmlDeviceGetUUID = lambda h: devices[h][0].encode()  # older bindings return bytes

    def mem(h):
        mod.calls.append(h)
        return Mem(devices[h][1], devices[h][2])

    mod.nvmlDeviceGetMemoryInfo = mem
    mod.nvmlDeviceGetUtilizationRates = lambda h: Util(devices[h][3])
    return mod


@pytest.fixture
def fresh(monkeypatch):
    worker_metrics._registered.clear()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    yield monkeypatch
    worker_metrics._registered.clear()
    system.stop_process_metrics()


def points(captured, name):
    return {p.attributes[semconv.ATTR_HW_ID]: p for p in captured.metric_points().get(name, [])}


def test_nvml_gauges_for_the_visible_gpus(captured, fresh):
    devices = [("GPU-aaa", 1 * GiB, 80 * GiB, 10), ("GPU-bbb", 5 * GiB, 80 * GiB, 75), ("GPU-ccc", 0, 80 * GiB, 0)]
    fresh.setitem(sys.modules, "pynvml", fake_nvml(devices))
    fresh.setenv("CUDA_VISIBLE_DEVICES", "1")  # this rank's GPU (Ray sets it per actor)
    assert worker_metrics.ensure_worker_metrics(rank=3) is True
    usage = points(captured, semconv.M_GPU_MEMORY_USAGE)
    limit = points(captured, semconv.M_GPU_MEMORY_LIMIT)
    util = points(captured, semconv.M_GPU_UTILIZATION)
    assert set(usage) == set(limit) == set(util) == {"GPU-bbb"}
    assert usage["GPU-bbb"].value == 5 * GiB
    assert limit["GPU-bbb"].value == 80 * GiB
    assert util["GPU-bbb"].value == pytest.approx(0.75)
    assert usage["GPU-bbb"].attributes[semconv.RES_RANK] == 3
    assert usage["GPU-bbb"].attributes[semconv.ATTR_HW_VENDOR] == "nvidia"
    # values are read at collection time, not frozen at registration
    devices[1] = ("GPU-bbb", 7 * GiB, 80 * GiB, 20)
    assert points(captured, semconv.M_GPU_MEMORY_USAGE)["GPU-bbb"].value == 7 * GiB
    # once per process: a second worker span registers nothing new
    assert worker_metrics.ensure_worker_metrics(rank=3) is False


def test_all_devices_when_cuda_visible_devices_unset_and_none_when_empty(captured, fresh):
    devices = [("GPU-aaa", GiB, 2 * GiB, 1), ("GPU-bbb", GiB, 2 * GiB, 1)]
    fresh.setitem(sys.modules, "pynvml", fake_nvml(devices))
    assert len(gpu.find_source(None).devices) == 2
    fresh.setenv("CUDA_VISIBLE_DEVICES", "")  # Ray: an actor without GPUs
    assert gpu.find_source(None) is None
    fresh.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbb")  # UUID form
    (dev,) = gpu.find_source(None).devices
    assert dev.attrs[semconv.ATTR_HW_ID] == "GPU-bbb"


def test_no_gpu_means_no_gpu_metrics_not_zeros(captured, fresh):
    fresh.setitem(sys.modules, "pynvml", fake_nvml([], fail_init=True))  # driver missing
    assert worker_metrics.ensure_worker_metrics(rank=0) is False  # torch here is the CPU build
    names = set(captured.metric_points())
    assert not {n for n in names if n.startswith("hw.gpu.")}


def test_nvml_read_error_is_swallowed(captured, fresh):
    mod = fake_nvml([("GPU-aaa", GiB, 2 * GiB, 1)])
    fresh.setitem(sys.modules, "pynvml", mod)
    assert worker_metrics.ensure_worker_metrics(rank=0)

    def broken(h):
        raise NVMLError("GPU is lost")

    mod.nvmlDeviceGetMemoryInfo = broken
    assert semconv.M_GPU_MEMORY_USAGE not in captured.metric_points()  # no exception, no point


def test_torch_fallback_reports_memory_of_the_device_in_use(captured, fresh):
    class Props:
        uuid = "1234"

    cuda = types.SimpleNamespace(
        is_available=lambda: True,
        is_initialized=lambda: True,
        current_device=lambda: 0,
        get_device_properties=lambda i: Props(),
        mem_get_info=lambda i: (30 * GiB, 80 * GiB),
    )
    source = gpu.TorchSource(types.SimpleNamespace(cuda=cuda), rank=1)
    gpu.register_gpu_metrics(PROCESS.telemetry.meter, source)
    usage = points(captured, semconv.M_GPU_MEMORY_USAGE)
    assert usage["GPU-1234"].value == 50 * GiB
    assert points(captured, semconv.M_GPU_MEMORY_LIMIT)["GPU-1234"].value == 80 * GiB
    assert semconv.M_GPU_UTILIZATION not in captured.metric_points()  # torch has no utilization


def test_process_metrics_are_limited_to_process_star(captured, fresh):
    pytest.importorskip("opentelemetry.instrumentation.system_metrics")
    from opentelemetry.instrumentation.system_metrics import SystemMetricsInstrumentor

    fresh.setitem(sys.modules, "pynvml", fake_nvml([], fail_init=True))
    system.stop_process_metrics()
    SystemMetricsInstrumentor().instrument()  # what opentelemetry-instrument does (global provider)
    worker_metrics.ensure_worker_metrics(rank=0)
    names = set(captured.metric_points())
    assert {"process.memory.usage", "process.cpu.time", "process.thread.count"} <= names
    assert not {n for n in names if n.startswith("system.") or n.startswith("cpython.")}
    SystemMetricsInstrumentor().uninstrument()
