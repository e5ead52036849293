"""GPU metrics by the hardware conventions: NVML faked at the module boundary (a stand-in
``pynvml`` module with NVML's function names and units), the OpenTelemetry SDK real."""

from __future__ import annotations

import os
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


def fake_nvml(devices, *, fail_init=False, pid=None, unsupported=()):
    """A ``pynvml`` module: devices = list of (uuid, used, total, util_percent).

    Power 250.5 W + 10 W per index, energy 1e6 mJ + 1000 per read, 60 + index Cel, encoder 5 %,
    decoder 7 %; ``pid`` holds 3 GiB on every device; ``unsupported``: readings that raise."""
    mod = types.ModuleType("pynvml")
    mod.NVMLError = NVMLError
    mod.NVML_TEMPERATURE_GPU = 0
    mod.calls = []
    mod.energy_reads = 0

    def init():
        if fail_init:
            raise NVMLError("NVML Shared Library Not Found")

    class Mem:
        def __init__(self, used, total):
            self.used, self.total, self.free = used, total, total - used

    class Util:
        def __init__(self, gpu_pct):
            self.gpu, self.memory = gpu_pct, 0

    class Proc:
        def __init__(self, proc_pid, used):
            self.pid, self.usedGpuMemory = proc_pid, used

    def maybe(name, fn):
        def read(*args):
            if name in unsupported:
                raise NVMLError(f"{name}: Not Supported")
            return fn(*args)

        return read

    def energy(h):
        mod.energy_reads += 1
        return 1_000_000 + 1000 * mod.energy_reads

    mod.nvmlInit = init
    mod.nvmlSystemGetDriverVersion = lambda: b"550.54.15"
    mod.nvmlDeviceGetCount = lambda: len(devices)
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetHandleByUUID = lambda u: [d[0] for d in devices].index(u)
    mod.nvmlDeviceGetIndex = lambda h: h
    mod.nvmlDeviceGetUUID = lambda h: devices[h][0].encode()  # older bindings return bytes
    mod.nvmlDeviceGetName = lambda h: "NVIDIA H200"

    def mem(h):
        mod.calls.append(h)
        return Mem(devices[h][1], devices[h][2])

    mod.nvmlDeviceGetMemoryInfo = mem
    mod.nvmlDeviceGetUtilizationRates = maybe("utilization", lambda h: Util(devices[h][3]))
    mod.nvmlDeviceGetEncoderUtilization = maybe("encoder", lambda h: [5, 167000])
    mod.nvmlDeviceGetDecoderUtilization = maybe("decoder", lambda h: [7, 167000])
    mod.nvmlDeviceGetPowerUsage = maybe("power", lambda h: 250_500 + 10_000 * h)  # mW
    mod.nvmlDeviceGetTotalEnergyConsumption = maybe("energy", energy)  # mJ
    mod.nvmlDeviceGetTemperature = maybe("temperature", lambda h, sensor: 60 + h)
    mod.nvmlDeviceGetComputeRunningProcesses = maybe(
        "processes", lambda h: [Proc(1, GiB), Proc(pid, 3 * GiB)] if pid is not None else [Proc(1, GiB)]
    )
    return mod


def fake_torch(free=30 * GiB, total=80 * GiB, reserved=12 * GiB):
    """A ``torch`` whose CUDA device 0 (UUID 1234, an H200) is initialised in this process."""
    props = types.SimpleNamespace(uuid="1234", name="NVIDIA H200")
    cuda = types.SimpleNamespace(
        is_available=lambda: True,
        is_initialized=lambda: True,
        current_device=lambda: 0,
        get_device_properties=lambda i: props,
        mem_get_info=lambda i: (free, total),
        memory_reserved=lambda i: reserved,
    )
    return types.SimpleNamespace(cuda=cuda)


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    yield monkeypatch
    system.stop_process_metrics()


def points(captured, name):
    """hw.id -> point (``hw.gpu.utilization``: the ``general`` task's)."""
    return {
        p.attributes[semconv.ATTR_HW_ID]: p
        for p in captured.metric_points().get(name, [])
        if p.attributes.get(semconv.ATTR_HW_GPU_TASK, semconv.GPU_TASK_GENERAL) == semconv.GPU_TASK_GENERAL
    }


def test_nvml_gauges_for_the_visible_gpus(captured, fresh):
    devices = [("GPU-aaa", 1 * GiB, 80 * GiB, 10), ("GPU-bbb", 5 * GiB, 80 * GiB, 75), ("GPU-ccc", 0, 80 * GiB, 0)]
    fresh.setitem(sys.modules, "pynvml", fake_nvml(devices))
    fresh.setenv("CUDA_VISIBLE_DEVICES", "1")  # this rank's GPU (Ray sets it per actor)
    assert worker_metrics.ensure_worker_metrics() is True
    usage = points(captured, semconv.M_GPU_MEMORY_USAGE)
    limit = points(captured, semconv.M_GPU_MEMORY_LIMIT)
    util = points(captured, semconv.M_GPU_UTILIZATION)
    assert set(usage) == set(limit) == set(util) == {"GPU-bbb"}
    assert usage["GPU-bbb"].value == 5 * GiB
    assert limit["GPU-bbb"].value == 80 * GiB
    assert util["GPU-bbb"].value == pytest.approx(0.75)
    assert semconv.RES_RANK not in usage["GPU-bbb"].attributes  # the resource's, not again on each point
    assert usage["GPU-bbb"].attributes[semconv.ATTR_HW_VENDOR] == "nvidia"
    # values are read at collection time, not frozen at registration
    devices[1] = ("GPU-bbb", 7 * GiB, 80 * GiB, 20)
    assert points(captured, semconv.M_GPU_MEMORY_USAGE)["GPU-bbb"].value == 7 * GiB
    # once per process: a second worker span registers nothing new
    assert worker_metrics.ensure_worker_metrics() is False


def test_all_devices_when_cuda_visible_devices_unset_and_none_when_empty(captured, fresh):
    devices = [("GPU-aaa", GiB, 2 * GiB, 1), ("GPU-bbb", GiB, 2 * GiB, 1)]
    fresh.setitem(sys.modules, "pynvml", fake_nvml(devices))
    assert len(gpu.find_source().devices) == 2
    fresh.setenv("CUDA_VISIBLE_DEVICES", "")  # Ray: an actor without GPUs
    assert gpu.find_source() is None
    fresh.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbb")  # UUID form
    (dev,) = gpu.find_source().devices
    assert dev.attrs[semconv.ATTR_HW_ID] == "GPU-bbb"


def test_no_gpu_means_no_gpu_metrics_not_zeros(captured, fresh):
    fresh.setitem(sys.modules, "pynvml", fake_nvml([], fail_init=True))  # driver missing
    assert worker_metrics.ensure_worker_metrics() is False  # torch here is the CPU build
    names = set(captured.metric_points())
    assert not {n for n in names if n.startswith("hw.gpu.")}


def test_nvml_read_error_is_swallowed(captured, fresh):
    mod = fake_nvml([("GPU-aaa", GiB, 2 * GiB, 1)])
    fresh.setitem(sys.modules, "pynvml", mod)
    assert worker_metrics.ensure_worker_metrics()

    def broken(h):
        raise NVMLError("GPU is lost")

    mod.nvmlDeviceGetMemoryInfo = broken
    assert semconv.M_GPU_MEMORY_USAGE not in captured.metric_points()  # no exception, no point


def test_torch_fallback_reports_memory_of_the_device_in_use(captured, fresh):
    source = gpu.TorchSource(fake_torch())
    gpu.register_gpu_metrics(PROCESS.telemetry.meter, source)
    usage = points(captured, semconv.M_GPU_MEMORY_USAGE)
    assert usage["GPU-1234"].value == 50 * GiB
    assert points(captured, semconv.M_GPU_MEMORY_LIMIT)["GPU-1234"].value == 80 * GiB
    assert semconv.M_GPU_UTILIZATION not in captured.metric_points()  # torch has no utilization


def test_process_metrics_are_limited_to_process_star(captured, fresh):
    from opentelemetry.instrumentation.system_metrics import SystemMetricsInstrumentor

    fresh.setitem(sys.modules, "pynvml", fake_nvml([], fail_init=True))
    system.stop_process_metrics()
    SystemMetricsInstrumentor().instrument()  # what opentelemetry-instrument does (global provider)
    worker_metrics.ensure_worker_metrics()
    names = set(captured.metric_points())
    assert {"process.memory.usage", "process.cpu.time", "process.thread.count"} <= names
    assert not {n for n in names if n.startswith("system.") or n.startswith("cpython.")}
    SystemMetricsInstrumentor().uninstrument()


def data(captured, name):
    """The metric ``name`` as collected (its data object: Sum or Gauge), or None."""
    from otel_verl.process.state import PROCESS as _P

    _P.telemetry.drain()
    got = captured.reader.get_metrics_data()
    for rm in got.resource_metrics if got else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == name:
                    return metric
    return None


def test_kinds_and_units_follow_the_hardware_conventions(captured, fresh):
    from opentelemetry.sdk.metrics.export import Gauge, Sum

    fresh.setitem(sys.modules, "pynvml", fake_nvml([("GPU-aaa", GiB, 4 * GiB, 50)], pid=os.getpid()))
    assert worker_metrics.ensure_worker_metrics()
    expected = {
        semconv.M_GPU_MEMORY_USAGE: (Sum, False, "By"),
        semconv.M_GPU_MEMORY_LIMIT: (Sum, False, "By"),
        semconv.M_PROCESS_GPU_MEMORY_USAGE: (Sum, False, "By"),
        semconv.M_HW_ENERGY: (Sum, True, "J"),
        semconv.M_GPU_MEMORY_UTILIZATION: (Gauge, None, "1"),
        semconv.M_GPU_UTILIZATION: (Gauge, None, "1"),
        semconv.M_HW_POWER: (Gauge, None, "W"),
        semconv.M_HW_TEMPERATURE: (Gauge, None, "Cel"),
    }
    for name, (kind, monotonic, unit) in expected.items():
        metric = data(captured, name)
        assert metric is not None, name
        assert isinstance(metric.data, kind), (name, type(metric.data))
        assert metric.unit == unit, name
        if monotonic is not None:
            assert metric.data.is_monotonic is monotonic, name


def test_every_gpu_metric_carries_the_identifying_attributes(captured, fresh):
    devices = [("GPU-aaa", GiB, 4 * GiB, 10), ("GPU-bbb", 2 * GiB, 4 * GiB, 90)]
    fresh.setitem(sys.modules, "pynvml", fake_nvml(devices, pid=os.getpid()))
    fresh.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert worker_metrics.ensure_worker_metrics()
    names = [
        semconv.M_GPU_MEMORY_USAGE,
        semconv.M_GPU_MEMORY_LIMIT,
        semconv.M_GPU_MEMORY_UTILIZATION,
        semconv.M_GPU_UTILIZATION,
        semconv.M_HW_POWER,
        semconv.M_HW_ENERGY,
        semconv.M_HW_TEMPERATURE,
        semconv.M_PROCESS_GPU_MEMORY_USAGE,
    ]
    for name in names:
        pts = captured.metric_points()[name]
        assert pts, name
        for p in pts:
            a = p.attributes
            assert a[semconv.ATTR_HW_ID] == "GPU-bbb", name  # required
            assert a[semconv.ATTR_HW_TYPE] == "gpu", name
            assert (a[semconv.ATTR_HW_VENDOR], a[semconv.ATTR_HW_MODEL]) == ("nvidia", "NVIDIA H200"), name
            assert (a[semconv.ATTR_HW_NAME], a[semconv.ATTR_GPU_INDEX]) == ("gpu1", 1), name
            # on the resource: a driver update must not start new series, the rank is there already
            assert semconv.ATTR_HW_DRIVER_VERSION not in a and semconv.RES_RANK not in a, name


def test_readings_convert_nvml_units(captured, fresh):
    fresh.setitem(sys.modules, "pynvml", fake_nvml([("GPU-aaa", GiB, 4 * GiB, 50)], pid=os.getpid()))
    assert worker_metrics.ensure_worker_metrics()
    pts = captured.metric_points()
    assert pts[semconv.M_HW_POWER][0].value == pytest.approx(250.5)  # mW -> W
    assert pts[semconv.M_HW_TEMPERATURE][0].value == 60
    assert pts[semconv.M_GPU_MEMORY_UTILIZATION][0].value == pytest.approx(0.25)
    assert pts[semconv.M_PROCESS_GPU_MEMORY_USAGE][0].value == 3 * GiB  # only this process's entry
    util = {p.attributes[semconv.ATTR_HW_GPU_TASK]: p.value for p in pts[semconv.M_GPU_UTILIZATION]}
    assert util == {"general": pytest.approx(0.5), "encoder": pytest.approx(0.05), "decoder": pytest.approx(0.07)}
    first = pts[semconv.M_HW_ENERGY][0].value
    assert first == pytest.approx(1001.0)  # mJ -> J
    later = captured.metric_points()[semconv.M_HW_ENERGY][0].value
    assert later > first  # a counter: it only grows


def test_unsupported_readings_are_left_out_and_not_asked_again(captured, fresh):
    mod = fake_nvml([("GPU-aaa", GiB, 4 * GiB, 50)], unsupported=("energy", "encoder", "decoder", "processes"))
    fresh.setitem(sys.modules, "pynvml", mod)
    assert worker_metrics.ensure_worker_metrics()
    for _ in range(2):
        pts = captured.metric_points()
        assert semconv.M_HW_ENERGY not in pts
        assert semconv.M_PROCESS_GPU_MEMORY_USAGE not in pts
        assert {p.attributes[semconv.ATTR_HW_GPU_TASK] for p in pts[semconv.M_GPU_UTILIZATION]} == {"general"}
        assert pts[semconv.M_HW_POWER][0].value == pytest.approx(250.5)  # the rest still reports
    assert mod.energy_reads == 0


def test_torch_fallback_reports_the_process_allocator(captured, fresh):
    gpu.register_gpu_metrics(PROCESS.telemetry.meter, gpu.TorchSource(fake_torch()))
    pts = captured.metric_points()
    (mine,) = pts[semconv.M_PROCESS_GPU_MEMORY_USAGE]
    assert mine.value == 12 * GiB and mine.attributes[semconv.ATTR_HW_MODEL] == "NVIDIA H200"
    assert pts[semconv.M_GPU_MEMORY_UTILIZATION][0].value == pytest.approx(50 / 80)
    assert semconv.M_HW_POWER not in pts  # torch has no power reading


def test_the_driver_and_the_rank_are_on_the_workers_resource(fresh, tmp_path):
    """A worker rank's first call finds its GPUs before its telemetry is made: the host's driver
    joins the resource, beside the rank (``hw.*`` points then carry neither)."""
    from otel_verl import config
    from otel_verl.process.state import ProcessState

    for signal in ("TRACES", "METRICS", "LOGS"):
        fresh.setenv(f"OTEL_{signal}_EXPORTER", "none")
    fresh.setenv("OTEL_VERL_FILE_DIR", str(tmp_path))
    config.settings.cache_clear()
    fresh.setitem(sys.modules, "pynvml", fake_nvml([("GPU-aaa", GiB, 4 * GiB, 10)]))
    process = ProcessState()
    fresh.setattr(worker_metrics, "PROCESS", process)
    process.identify(role=semconv.ROLE_WORKER, rank=4)
    try:
        assert worker_metrics.ensure_worker_metrics()
        resource = process.telemetry.tracer_provider.resource.attributes
        assert resource[semconv.ATTR_HW_DRIVER_VERSION] == "550.54.15"
        assert resource[semconv.RES_RANK] == 4
    finally:
        process.telemetry.shutdown(5)
        config.settings.cache_clear()
