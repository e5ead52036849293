"""Whole-job CPU of the real verl trainer on CPU: what telemetry adds per step and at start.

The decisive end-to-end figure (issue 14, part 2). Each job is one ``python -m verl.trainer.main_ppo``
of the test harness (v0 GRPO by default) under ``perf stat -e task-clock``, which follows every
child process: the driver, Ray's daemons, every actor. Variants:

* ``plain``: no ``opentelemetry-instrument``, no ``OTEL_*`` variables (otel-verl's verl plugin off);
* ``file``: ``opentelemetry-instrument``, OTLP JSON file exporters;
* ``collector``: ``opentelemetry-instrument``, OTLP/gRPC to a live Collector (``otel-verl stack up``
  with the binaries of ``scripts/backends.sh``, on free ports; the stack's own CPU is not in the job's
  tree, so it is not counted);
* ``dead``: ``opentelemetry-instrument``, OTLP/gRPC to a port nobody listens on;
* ``bootstrap``: as ``file``, plus every instrumentation ``opentelemetry-bootstrap -a install``
  picks for this venv (``verl_cpu_harness.bootstrap_site``) on the job's ``PYTHONPATH``.

Every round runs every variant at two lengths (``--short`` and ``--long`` training steps), in a
rotated order, so slow drifts of this shared machine's load hit every variant alike. Per round and
variant, the marginal CPU per step is (CPU of the long job - CPU of the short one) / (long - short),
which cancels everything paid once (start-up, model load, validation, shutdown); the start-up is
the short job's CPU minus ``short`` x that marginal. Added cost = the variant's figure minus plain's
of the same round (paired). Printed: median over rounds, min..max, and a 95% t-interval of the
mean of the paired differences. Next to it, what otel-verl's own self-metric
(``otel_verl.overhead.cpu_time``, ``otel-verl summary``'s "telemetry cost per step") said for the
file variant's long jobs.

Usage: ``python bench/job_cpu.py [--rounds 3] [--short 2] [--long 12] [--variants plain,file,collector,dead]``
(``--short 0``: long jobs only, for the in-job figure).

In-job figure: a second table reads the CPU of the job's whole process tree (``/proc``, its session)
the moment verl logs each training step (``StepClock``: verl's own ``file`` logger), and divides
what it used from step 2 to the last step by the steps: per-step CPU without anything paid once,
so far less noisy than whole-job differences.

Start-up wall: a third table, the wall time from the job's launch to verl logging its first
training step (Ray up, workers and model loaded, validation before training, step 1), paired with
plain's of the same round: what a user waits longer before training runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from _util import machine, table
from e2e_overhead import _closed_port

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("plain", "file", "collector", "dead", "bootstrap")
LABELS = {
    "plain": "not instrumented",
    "file": "instrumented, OTLP JSON files",
    "collector": "instrumented, OTLP gRPC to a live Collector",
    "dead": "instrumented, OTLP gRPC to a dead endpoint",
    "bootstrap": "instrumented, OTLP JSON files, opentelemetry-bootstrap's instrumentations",
}
# Two-sided 95% Student t quantiles by degrees of freedom (rounds - 1).
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def _env(variant: str, folder: Path, otlp_port: int | None) -> tuple[dict[str, str], str | None]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if variant == "plain":
        env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "verl"  # the verl.plugins entry point stays off
        return env, None
    env.update({"OTEL_SERVICE_NAME": "bench-job-cpu", "OTEL_VERL_FILE_DIR": str(folder)})
    if variant == "bootstrap":
        from verl_cpu_harness import bootstrap_site

        site, _ = bootstrap_site.build()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    if variant in ("file", "bootstrap"):
        for signal in ("TRACES", "METRICS", "LOGS"):
            env[f"OTEL_{signal}_EXPORTER"] = "otlp_json_file"
    else:
        port = otlp_port if variant == "collector" else _closed_port()
        env.update({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "otlp", "OTEL_LOGS_EXPORTER": "otlp"})
        env.update({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"})
    return env, "opentelemetry-instrument"


_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(session: int) -> float:
    """CPU seconds (user + system, with reaped children) of every process in ``session`` so far."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 14 and int(fields[3]) == session:
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / _TICK


def _find_session(pid: int) -> int | None:
    """The session of our child ``pid``'s job (``run_verl`` starts it as a session leader)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            # our child that leads its own session and runs the trainer (not the stack's binaries)
            if int(fields[1]) == pid and int(fields[3]) == int(entry.name):
                try:
                    if b"verl.trainer.main_ppo" in (entry / "cmdline").read_bytes():
                        return int(entry.name)
                except OSError:
                    continue
    return None


class StepClock(threading.Thread):
    """The job tree's CPU (every process of its session: driver, Ray daemons, every actor) at the
    moment verl logs each training step.

    verl's ``file`` logger (``trainer.logger`` with ``file``, path ``VERL_FILE_LOGGER_PATH``) writes
    one JSON line per ``Tracking.log`` unbuffered, in the TaskRunner, at the step's end; this
    thread watches the file every 5 ms and reads ``/proc`` when a line appears. (verl's console
    lines reach the launcher through Ray's log monitor, late and in bursts: per-step figures taken
    at their arrival came out 0.18 and 0.72 CPU-s for the same plain job.) Per-step CPU from two
    readings inside one job leaves out everything paid once (start-up, model load, validation,
    shutdown), which is what makes whole-job differences so noisy."""

    def __init__(self, path: Path) -> None:
        super().__init__(name="step-clock", daemon=True)
        self.path = path
        self.at: dict[int, float] = {}  # step -> tree CPU seconds when verl logged it
        self.wall_at: dict[int, float] = {}  # step -> time.monotonic() then
        self.done = threading.Event()
        self._session: int | None = None
        self._pos = 0
        self._tail = b""

    def run(self) -> None:
        me = os.getpid()
        while not self.done.is_set():
            self._poll(me)
            time.sleep(0.005)
        self._poll(me)

    def _poll(self, me: int) -> None:
        try:
            size = self.path.stat().st_size
        except OSError:
            return
        if size <= self._pos:
            return
        now = time.monotonic()
        self._session = self._session or _find_session(me)
        cpu = tree_cpu_s(self._session) if self._session is not None else None
        with open(self.path, "rb") as f:
            f.seek(self._pos)
            chunk = self._tail + f.read(size - self._pos)
        self._pos = size
        *lines, self._tail = chunk.split(b"\n")
        for line in lines:
            try:
                step = json.loads(line)["data"].get("training/global_step")
            except (ValueError, KeyError, AttributeError):
                continue
            if isinstance(step, int) and step not in self.wall_at:
                self.wall_at[step] = now
                if cpu is not None:
                    self.at[step] = cpu

    def per_step(self, first: int = 2) -> float | None:
        """CPU seconds per step from the end of step ``first`` to the last step (step 1 warms up)."""
        steps = sorted(n for n in self.at if n >= first)
        if len(steps) < 2:
            return None
        return (self.at[steps[-1]] - self.at[steps[0]]) / (steps[-1] - steps[0])


def _task_clock_s(path: Path) -> float:
    for line in path.read_text().splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith("task-clock"):
            return float(fields[0]) / 1000.0
    raise ValueError(f"no task-clock in {path}: {path.read_text()!r}")


def run_job(workdir: Path, variant: str, steps: int, driver: str, algo: str, otlp_port: int | None) -> dict:
    from verl_cpu_harness import run_verl

    perf_out = workdir / "perf.csv"
    env, launcher = _env(variant, workdir / "telemetry", otlp_port)
    words = ["perf", "stat", "-e", "task-clock", "-x", ",", "-o", str(perf_out), "--"]
    if launcher:
        words.append(shutil.which(launcher) or str(Path(sys.executable).with_name(launcher)))
    workdir.mkdir(parents=True, exist_ok=True)
    clock = StepClock(workdir / "steps.jsonl")
    env["VERL_FILE_LOGGER_PATH"] = str(clock.path)
    clock.start()
    try:
        result = run_verl(
            workdir,
            driver=driver,
            algo=algo,
            steps=steps,
            launcher=words,
            env=env,
            stream=None,
            timeout=1200,
            extra=["trainer.logger=[console,file]"],  # the harness's [console], plus verl's file logger
        )
    finally:
        clock.done.set()
        clock.join()
    launched = time.monotonic() - result.wall_s  # the trainer's start (run_verl makes its assets first)
    out = {"rc": result.returncode, "wall_s": result.wall_s, "steps_logged": len(result.metrics)}
    out["in_job"] = clock.per_step()
    if clock.wall_at:
        out["first_step_wall"] = clock.wall_at[min(clock.wall_at)] - launched
    if result.returncode == 0:
        out["cpu_s"] = _task_clock_s(perf_out)
    return out


def self_metric(folder: Path) -> float | None:
    """otel-verl's own figure: mean CPU-s per step over all processes (``otel-verl summary``)."""
    from otel_verl.offline.run.model import build

    try:
        rep = build(folder)
    except Exception:  # noqa: BLE001 - a bench: report and go on
        return None
    return rep.overhead.mean() if rep.overhead else None


def interval(values: list[float]) -> str:
    if len(values) < 2:
        return "-"
    half = T95.get(len(values) - 1, 2.0) * statistics.stdev(values) / math.sqrt(len(values))
    mean = statistics.fmean(values)
    return f"{mean:+.3f} +- {half:.3f}"


def _spread(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "-"
    med = fmt.format(statistics.median(values))
    return med if len(values) == 1 else f"{med} ({fmt.format(min(values))}..{fmt.format(max(values))})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--short", type=int, default=2)
    parser.add_argument("--long", type=int, default=12)
    parser.add_argument("--driver", default="v0")
    parser.add_argument("--algo", default="grpo")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--workdir", type=Path, default=None)
    ns = parser.parse_args(argv)
    variants = [v for v in ns.variants.split(",") if v in VARIANTS]
    if "plain" not in variants:
        variants.insert(0, "plain")
    if shutil.which("perf") is None:
        print("perf is not installed (Debian: apt-get install linux-perf)", file=sys.stderr)
        return 2
    root = ns.workdir or Path(tempfile.mkdtemp(prefix="bench_job_cpu_"))
    stack_dir, otlp_port = None, None
    if "collector" in variants:
        stack_dir, otlp_port = _stack_up(root)
        if otlp_port is None:
            variants.remove("collector")
    loads: list[float] = []
    # (variant, round) -> {"short": job, "long": job}
    jobs: dict[tuple[str, int], dict[str, dict]] = {}
    try:
        for r in range(ns.rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            for variant in order:
                lengths = (("short", ns.short), ("long", ns.long)) if ns.short > 0 else (("long", ns.long),)
                for length, steps in lengths:
                    workdir = root / f"{variant}_{length}_{r}"
                    loads.append(os.getloadavg()[0])
                    job = run_job(workdir, variant, steps, ns.driver, ns.algo, otlp_port)
                    if job["rc"] == 0 and variant == "file" and length == "long":
                        job["self"] = self_metric(workdir / "telemetry")
                    jobs.setdefault((variant, r), {})[length] = job
                    print(
                        f"round {r} {variant:9s} {steps:2d} steps: rc {job['rc']}, "
                        f"CPU {job.get('cpu_s', float('nan')):7.2f} s, wall {job['wall_s']:6.1f} s, "
                        f"in-job {job.get('in_job') or float('nan'):.3f} CPU-s/step, "
                        f"step 1 at {job.get('first_step_wall') or float('nan'):.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        if stack_dir is not None:
            from otel_verl import stack

            stack.supervisor.down(stack_dir, out=lambda _: None)
    print(report(jobs, variants, ns, loads))
    print(f"(jobs under {root})")
    return 0


def _stack_up(root: Path) -> tuple[Path | None, int | None]:
    from verl_cpu_harness.ports import free_ports

    from otel_verl import stack

    try:
        stack.binaries.find_binaries(None)  # scripts/backends.sh's folder, or PATH
    except Exception as exc:  # noqa: BLE001 - no binaries: the run goes on without this variant
        print(f"no collector variant: {exc}", file=sys.stderr)
        return None, None
    data_dir = root / "stack"
    ports = free_ports(list(stack.ports.DEFAULT_PORTS))
    stack.supervisor.up(None, data_dir, ports, timeout_s=120, config_dir=REPO / "collector", out=lambda _: None)
    return data_dir, ports["otlp-grpc"]


def report(jobs: dict, variants: list[str], ns: argparse.Namespace, loads: list[float]) -> str:
    span = max(ns.long - ns.short, 1)
    marginal: dict[str, dict[int, float]] = {v: {} for v in variants}
    startup: dict[str, dict[int, float]] = {v: {} for v in variants}
    selfs: list[float] = []
    for (variant, r), pair in jobs.items():
        short, long_ = pair.get("short", {}), pair.get("long", {})
        if "cpu_s" in short and "cpu_s" in long_:
            m = (long_["cpu_s"] - short["cpu_s"]) / span
            marginal[variant][r] = m
            startup[variant][r] = short["cpu_s"] - ns.short * m
        if long_.get("self") is not None:
            selfs.append(long_["self"])
    rows = []
    for v in variants:
        added = [marginal[v][r] - marginal["plain"][r] for r in marginal[v] if r in marginal["plain"]]
        added_start = [startup[v][r] - startup["plain"][r] for r in startup[v] if r in startup["plain"]]
        base = statistics.median(marginal["plain"].values()) if marginal["plain"] else float("nan")
        share = f"{100 * statistics.median(added) / base:+.1f}%" if added and v != "plain" else ""
        rows.append(
            [
                LABELS[v],
                _spread(list(marginal[v].values()), "{:.3f}"),
                "" if v == "plain" else _spread(added, "{:+.3f}"),
                "" if v == "plain" else interval(added),
                share,
                _spread(list(startup[v].values()), "{:.1f}"),
                "" if v == "plain" else _spread(added_start, "{:+.1f}"),
                len(marginal[v]),
            ]
        )
    lengths = f"{ns.short} and {ns.long}" if ns.short > 0 else str(ns.long)
    head = (
        f"# bench/job_cpu.py  ({machine()}; {ns.driver} {ns.algo}; jobs of {lengths} steps, "
        f"{ns.rounds} rounds, rotated order; load average {min(loads, default=0):.1f}-{max(loads, default=0):.1f})"
    )
    lines = [head]
    if ns.short > 0:  # whole-job figures need two lengths
        header = ["variant", "CPU-s per step", "added per step", "added, mean 95% CI", "added / plain step"]
        lines.append(table([*header, "start-up CPU-s", "added at start", "rounds"], rows))
    lines.append(_in_job_table(jobs, variants, ns))
    lines.append(_start_wall_table(jobs, variants))
    if selfs:
        lines.append(
            f"otel-verl's own figure (otel_verl.overhead.cpu_time, file variant, {ns.long}-step jobs): "
            f"{_spread(selfs, '{:.3f}')} CPU-s per step"
        )
    return "\n".join(lines)


def _in_job_table(jobs: dict, variants: list[str], ns: argparse.Namespace) -> str:
    """The same comparison from inside each long job: its tree's CPU from step 2 to the last step."""
    per: dict[str, dict[int, float]] = {v: {} for v in variants}
    for (variant, r), pair in jobs.items():
        value = pair.get("long", {}).get("in_job")
        if value is not None:
            per[variant][r] = value
    rows = []
    for v in variants:
        added = [per[v][r] - per["plain"][r] for r in per[v] if r in per["plain"]]
        base = statistics.median(per["plain"].values()) if per["plain"] else float("nan")
        rows.append(
            [
                LABELS[v],
                _spread(list(per[v].values()), "{:.3f}"),
                "" if v == "plain" else _spread(added, "{:+.3f}"),
                "" if v == "plain" else interval(added),
                f"{100 * statistics.median(added) / base:+.1f}%" if added and v != "plain" else "",
                len(per[v]),
            ]
        )
    head = ["in-job, steps 2.." + str(ns.long), "CPU-s per step", "added per step", "added, mean 95% CI"]
    return table([*head, "added / plain step", "rounds"], rows)


def _start_wall_table(jobs: dict, variants: list[str]) -> str:
    """Wall seconds from launch to the first training-step line, every job of a round (paired)."""
    per: dict[str, dict[tuple[int, str], float]] = {v: {} for v in variants}
    for (variant, r), pair in jobs.items():
        for length, job in pair.items():
            if job.get("first_step_wall") is not None:
                per[variant][(r, length)] = job["first_step_wall"]
    rows = []
    for v in variants:
        added = [per[v][k] - per["plain"][k] for k in per[v] if k in per["plain"]]
        rows.append(
            [
                LABELS[v],
                _spread(list(per[v].values()), "{:.1f}"),
                "" if v == "plain" else _spread(added, "{:+.2f}"),
                "" if v == "plain" else interval(added),
                len(per[v]),
            ]
        )
    head = ["launch to step 1 (wall)", "seconds", "added", "added, mean 95% CI", "jobs"]
    return table(head, rows)


if __name__ == "__main__":
    started = time.monotonic()
    rc = main()
    print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
    sys.exit(rc)
