"""Memory soak: a long synthetic training run in one process with otel-verl active (prints a table).

Each step drives verl's own code the way the TaskRunner does: ``marked_timer("step")`` around 10
``marked_timer`` stages (-> ``verl.utils.profiler.performance._timer``, wrapped by otel-verl), three
of them with a driver worker-group call (``verl.wg.*`` client span through otel-verl's
``func_generator`` proxy) and ``Tracking.log`` of 100 numeric keys (gauges, stage histogram,
step-boundary metric export). Per step: 14 spans, 100+ metric values, one metric batch.

Cases, each in its own process (clean RSS):

* ``dead``: OTLP/gRPC exporters (traces, metrics, logs) to a port that refuses connections, the
  on-disk spool off (``OTEL_VERL_SPOOL=off``: the in-memory queues' bound is what is measured);
* ``file``: the ``otlp_json_file`` exporters (a temporary folder, removed afterwards);
* ``off``: the same loop without otel-verl: verl's own growth (``codetiming``'s global ``Timer.timers``
  keeps every timing verl measures, ~0.4 KiB per step here, instrumented or not).

RSS (``/proc/self/statm``) and the length of every otel-verl/SDK queue are sampled every
``--every`` steps. Usage: ``nice python bench/soak_memory.py [--steps 10000] [--every 1000]``.
The loop itself is ``verl_cpu_harness.soak`` (shared with ``tests/unit/process/test_memory_bound.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from _util import machine, table
from verl_cpu_harness import soak


def _run_case(case: str, steps: int, every: int) -> list[dict]:
    folder = tempfile.mkdtemp(prefix=f"soak-{case}-")
    try:
        cmd = [sys.executable, "-m", "verl_cpu_harness.soak", case, "--steps", str(steps), "--every", str(every)]
        proc = subprocess.run(cmd, env=soak.env(case, folder), capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-3000:])
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)) if case == "file" else 0
        samples = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        for s in samples:
            s["file_mib"] = size / 2**20
        return samples
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=1000)
    parser.add_argument("--cases", default="off,dead,file")
    ns = parser.parse_args(argv)
    rows, detail = [], []
    for case in ns.cases.split(","):
        samples = _run_case(case, ns.steps, ns.every)
        by_step = {s["step"]: s for s in samples}
        first, last = by_step[ns.every], by_step[ns.steps]
        prev = by_step[ns.steps - ns.every]
        peak = max(s["rss_mib"] for s in samples)
        worst = last["worst"]
        bounds = (
            ", ".join(
                f"{k} {worst[k]}/{worst[k + '_max']}" for k in sorted(worst) if not k.endswith(("_max", "_dropped"))
            )
            or "-"
        )
        rows.append(
            [
                case,
                f"{by_step[1]['rss_mib']:.1f}",
                f"{first['rss_mib']:.1f}",
                f"{last['rss_mib']:.1f}",
                f"{last['rss_mib'] - first['rss_mib']:+.1f}",
                f"{last['rss_mib'] - prev['rss_mib']:+.1f}",
                f"{peak:.1f}",
                f"{last['s'] / ns.steps * 1e3:.2f}",
                bounds,
                str(sum(v for k, v in worst.items() if k.endswith("_dropped"))),
            ]
        )
        detail.append(f"{case}: " + " ".join(f"{s['step']}:{s['rss_mib']:.1f}" for s in samples))
    print(f"# bench/soak_memory.py  ({machine()}; {ns.steps} steps, sample every {ns.every})")
    header = [
        "case",
        "RSS step 1 MiB",
        f"RSS step {ns.every}",
        f"RSS step {ns.steps}",
        f"growth {ns.every}->{ns.steps}",
        "growth last interval",
        "peak",
        "ms/step",
        "queue worst/max",
        "metric batches dropped",
    ]
    print(table(header, rows))
    print("\n".join(detail))
    print(os.popen("uptime").read().rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
