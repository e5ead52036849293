"""What telemetry costs inside a real verl run: sampled CPU share per process (py-spy).

Wall-clock comparisons of whole runs (``e2e_overhead.py``) need a quiet machine: on a shared
2-core box the step time of the *same* configuration swings by 2x with the load. This
measures the cost directly instead. One instrumented run of the real CPU trainer (test
harness); ``py-spy record`` (``pip install py-spy``) samples the TaskRunner, a worker rank,
the agent-loop worker and the rollout server at 100 Hz (``--nonblocking``: the processes are not
paused to take a sample). A busy sample (not waiting on a lock,
a queue, a socket or a sleep) is *telemetry* when its deepest frame of otel-verl / the
OpenTelemetry SDK / its exporters (gRPC, protobuf, JSON) has no verl, torch or Ray frame below
it, i.e. the CPU is spent in our wrappers, the SDK or an exporter, in any thread (training
thread, batch span processor, metric export).

Usage: ``python bench/e2e_profile.py [--variant file|dead] [--steps 8] [--driver v0] [--algo grpo]``
"""

from __future__ import annotations

import argparse
import collections
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from _util import machine, table
from e2e_overhead import _env

PROCESSES = ("TaskRunner", "WorkerDict", "AgentLoopWorker", "Server")
OURS = ("otel_verl/", "opentelemetry/", "grpc/", "google/protobuf/")
THEIRS = ("torch/", "ray/", "transformers/")
IDLE_LEAVES = (
    "wait",
    "sleep",
    "select",
    "poll",
    "_wait_for_tstate_lock",
    "recv",
    "accept",
    "get_objects",
    "_run_once",
    "run_forever",
    "acquire",
    "BatchProcessor._export",  # its leaf line is ``with self._export_lock`` (a lock wait)
)


def _is_verl(frame: str) -> bool:
    return "verl/" in frame and "otel_verl/" not in frame


def classify(path: Path) -> tuple[int, int, collections.Counter]:
    """(busy samples, telemetry samples, telemetry samples by entry point) of a py-spy raw file."""
    busy = ours = 0
    where: collections.Counter = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames or not count.isdigit():
            continue
        n = int(count)
        leaf = frames[-1].split(" (")[0]
        if leaf.endswith(IDLE_LEAVES):
            continue
        busy += n
        deepest = max((i for i, f in enumerate(frames) if any(o in f for o in OURS)), default=None)
        if deepest is None:
            continue
        if any(_is_verl(f) or any(t in f for t in THEIRS) for f in frames[deepest + 1 :]):
            continue  # our wrapper calling into verl: verl's time
        ours += n
        entry = next(f for f in frames if any(o in f for o in OURS)).split(" (")[0]
        where[f"{entry} -> {frames[deepest].split(' (')[0]}"] += n
    return busy, ours, where


def _attach(root: int, out: Path, procs: list[subprocess.Popen], stop: threading.Event) -> None:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    started: set[str] = set()
    while not stop.is_set() and len(started) < len(PROCESSES):
        try:
            children = psutil.Process(root).children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            try:
                cmd = " ".join(child.cmdline())
            except psutil.Error:
                continue
            for kind in PROCESSES:
                if kind not in started and cmd.startswith("ray::") and kind in cmd.split()[0]:
                    started.add(kind)
                    # --nonblocking: sample without pausing the process (the default stops it each time)
                    args = [py_spy, "record", "--nonblocking", "-p", str(child.pid), "-r", "100", "--format", "raw"]
                    args += ["-o", str(out / f"{kind}.txt")]
                    procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variant", choices=["file", "dead"], default="file")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--driver", default="v0")
    parser.add_argument("--algo", default="grpo")
    ns = parser.parse_args(argv)
    from verl_cpu_harness import assets, command

    root = Path(tempfile.mkdtemp(prefix="bench_profile_"))
    env, launcher = _env(ns.variant, root / "telemetry")
    made = assets.make_assets(root)
    args = command.verl_args(made, driver=ns.driver, algo=ns.algo, steps=ns.steps)
    cmd = [*(launcher.split() if launcher else []), sys.executable, "-m", "verl.trainer.main_ppo", *args]
    if launcher:
        cmd[0] = shutil.which(launcher) or str(Path(sys.executable).with_name(launcher))
    with open(root / "run.log", "w") as log:
        job = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
        procs: list[subprocess.Popen] = []
        stop = threading.Event()
        attacher = threading.Thread(target=_attach, args=(job.pid, root, procs, stop), daemon=True)
        attacher.start()
        rc = job.wait(timeout=1200)
        stop.set()
        attacher.join()
        for p in procs:  # py-spy stops when its process exits; Ray may keep a worker a while
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGINT)  # py-spy writes what it has on SIGINT
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
    if rc != 0:
        print(f"run failed (rc={rc}); see {root / 'run.log'}", file=sys.stderr)
        return 1
    rows, details = [], []
    for kind in PROCESSES:
        path = root / f"{kind}.txt"
        if not path.exists():
            rows.append([kind, "-", "-", "not sampled"])
            continue
        busy, ours, where = classify(path)
        rows.append([kind, busy, ours, f"{100 * ours / busy:.2f}%" if busy else "-"])
        details += [f"  {kind}: {n} {w}" for w, n in where.most_common(6)]
    print(
        f"# bench/e2e_profile.py  ({machine()}; {ns.driver} {ns.algo}, {ns.steps} steps, "
        f"variant {ns.variant}, py-spy 100 Hz)"
    )
    print(table(["process", "busy samples", "telemetry samples", "telemetry share of busy CPU"], rows))
    print("where (top entries):")
    print("\n".join(details))
    return 0


if __name__ == "__main__":
    sys.exit(main())
