"""Check otel-verl's GPU metrics against ``nvidia-smi`` on a real GPU (issue: GPU metrics by the
hardware conventions). Run on a machine with an NVIDIA GPU, torch with CUDA and nvidia-ml-py::

    bash scripts/gpu_check.sh            # prepares the pure-Python wheels, then runs this

Phases: idle (~8 s), then a torch workload that holds ``--hold-gib`` GiB and keeps the GPU busy
with matmuls (~30 s). Every second otel-verl's instruments are read through an in-memory reader
(the real ``register_gpu_metrics`` on a real SDK meter) while ``nvidia-smi --query-gpu`` samples
the same quantities. Asserted: memory usage within 1 % of nvidia-smi's, utilization near 1 while
busy and near 0 idle, power plausible and higher when busy, energy monotonic, every required
attribute present, this process's own GPU memory at least what it holds. Prints the figures as
JSON (and writes them to ``$OUT/gpu_check.json`` when ``OUT`` is set); exit 1 on a failed check.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

FIELDS = ("memory.used", "memory.total", "utilization.gpu", "power.draw", "temperature.gpu")


def smi(index: int) -> dict[str, float]:
    out = subprocess.run(
        ["nvidia-smi", f"--id={index}", f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout.strip()
    return dict(zip(FIELDS, (float(v) for v in out.split(",")), strict=True))


def read(reader, index: int) -> dict[str, object]:
    from otel_verl import semconv

    values: dict[str, object] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for p in metric.data.data_points:
                    if p.attributes.get(semconv.ATTR_GPU_INDEX) != index:
                        continue
                    task = p.attributes.get(semconv.ATTR_HW_GPU_TASK)
                    key = metric.name if task in (None, semconv.GPU_TASK_GENERAL) else f"{metric.name}[{task}]"
                    values[key] = p.value
                    values.setdefault("_attributes", dict(p.attributes))
    return values


def sample(reader, index: int, seconds: float, phase: str) -> list[dict[str, object]]:
    rows = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rows.append({"phase": phase, "t": time.time(), "otel": read(reader, index), "smi": smi(index)})
        time.sleep(1.0)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hold-gib", type=float, default=8.0)
    parser.add_argument("--busy-s", type=float, default=30.0)
    parser.add_argument("--idle-s", type=float, default=8.0)
    ns = parser.parse_args()

    try:
        import torch
    except ImportError:
        print("gpu_check: torch is not installed in this Python", file=sys.stderr)
        return 2
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from otel_verl import semconv
    from otel_verl.instruments import gpu

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; nothing to check", file=sys.stderr)
        return 2
    torch.cuda.init()
    index = torch.cuda.current_device()
    source = gpu.find_source()
    if not isinstance(source, gpu.NvmlSource):
        print("gpu_check: NVML (nvidia-ml-py) is not usable; install otel-verl[gpu]", file=sys.stderr)
        return 2
    reader = InMemoryMetricReader()
    gpu.register_gpu_metrics(MeterProvider(metric_readers=[reader]).get_meter("gpu_check"), source)

    rows = sample(reader, index, ns.idle_s, "idle")
    held = torch.empty(int(ns.hold_gib * 2**30), dtype=torch.uint8, device="cuda")
    a = torch.randn(8192, 8192, device="cuda")
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            for _ in range(10):
                a.matmul(a)
            torch.cuda.synchronize()

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    time.sleep(3)  # let utilization settle
    rows += sample(reader, index, ns.busy_s, "busy")
    stop.set()
    worker.join()
    del held

    checks: dict[str, bool] = {}
    mem_err = [
        abs(r["otel"][semconv.M_GPU_MEMORY_USAGE] / 2**20 - r["smi"]["memory.used"]) / r["smi"]["memory.total"]
        for r in rows
        if semconv.M_GPU_MEMORY_USAGE in r["otel"]
    ]
    checks["memory usage within 1% of nvidia-smi"] = bool(mem_err) and max(mem_err) <= 0.01
    util = {ph: [r["otel"].get(semconv.M_GPU_UTILIZATION) for r in rows if r["phase"] == ph] for ph in ("idle", "busy")}
    checks["utilization near 1 while busy"] = statistics.median(v for v in util["busy"] if v is not None) >= 0.9
    checks["utilization near 0 idle"] = statistics.median(v for v in util["idle"] if v is not None) <= 0.1
    power = {ph: [r["otel"].get(semconv.M_HW_POWER) for r in rows if r["phase"] == ph] for ph in ("idle", "busy")}
    busy_w, idle_w = statistics.median(power["busy"]), statistics.median(power["idle"])
    checks["power plausible and higher when busy"] = 0 < idle_w < busy_w < 2000
    energy = [r["otel"].get(semconv.M_HW_ENERGY) for r in rows]
    checks["energy monotonic"] = all(e is not None for e in energy) and all(
        b >= a for a, b in zip(energy, energy[1:], strict=False)
    )
    busy_own = [r["otel"].get(semconv.M_PROCESS_GPU_MEMORY_USAGE, 0) for r in rows if r["phase"] == "busy"]
    checks["own process memory >= held"] = min(busy_own) >= ns.hold_gib * 2**30
    attrs = rows[-1]["otel"].get("_attributes", {})
    required = (semconv.ATTR_HW_ID, semconv.ATTR_HW_TYPE, semconv.ATTR_HW_VENDOR, semconv.ATTR_HW_MODEL)
    checks["identifying attributes present"] = all(attrs.get(k) for k in required)
    result = {
        "device": attrs.get(semconv.ATTR_HW_MODEL),
        "max memory error (fraction of total)": max(mem_err) if mem_err else None,
        "utilization median idle / busy": [statistics.median(v for v in util[p] if v is not None) for p in util],
        "power median idle / busy (W)": [idle_w, busy_w],
        "energy first / last (J)": [energy[0], energy[-1]],
        "own process memory while busy (GiB)": min(busy_own) / 2**30,
        "checks": checks,
        "rows": rows,
    }
    text = json.dumps(result, indent=1, default=str)
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1, default=str))
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_check.json"), "w") as f:
            f.write(text)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
