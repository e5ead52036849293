"""Whole-job CPU of the real verl trainer on CPU: what telemetry adds per step and at start.

The decisive end-to-end figure (issue 14, part 2). Each job is one ``python -m verl.trainer.main_ppo``
of the test harness (v0 GRPO by default) under ``perf stat -e task-clock``, which follows every
child process: the driver, Ray's daemons, every actor. Variants:

* ``plain``: no ``opentelemetry-instrument``, no ``OTEL_*`` variables (otel-verl's verl plugin off);
* ``file``: ``opentelemetry-instrument``, OTLP JSON file exporters;
* ``collector``: ``opentelemetry-instrument``, OTLP/gRPC to a live Collector (``otel-verl stack up``
  with the binaries of ``scripts/backends.sh``, on free ports; the stack's own CPU is not in the job's
  tree, so it is not counted);
* ``dead``: ``opentelemetry-instrument``, OTLP/gRPC to a port nobody listens on.

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
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _util import machine, table
from e2e_overhead import _closed_port

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("plain", "file", "collector", "dead")
LABELS = {
    "plain": "not instrumented",
    "file": "instrumented, OTLP JSON files",
    "collector": "instrumented, OTLP gRPC to a live Collector",
    "dead": "instrumented, OTLP gRPC to a dead endpoint",
}
# Two-sided 95% Student t quantiles by degrees of freedom (rounds - 1).
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def _env(variant: str, folder: Path, otlp_port: int | None) -> tuple[dict[str, str], str | None]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if variant == "plain":
        env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "verl"  # the verl.plugins entry point stays off
        return env, None
    env.update({"OTEL_SERVICE_NAME": "bench-job-cpu", "OTEL_VERL_FILE_DIR": str(folder)})
    if variant == "file":
        for signal in ("TRACES", "METRICS", "LOGS"):
            env[f"OTEL_{signal}_EXPORTER"] = "otlp_json_file"
    else:
        port = otlp_port if variant == "collector" else _closed_port()
        env.update({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "otlp", "OTEL_LOGS_EXPORTER": "otlp"})
        env.update({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"})
    return env, "opentelemetry-instrument"


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
    result = run_verl(
        workdir, driver=driver, algo=algo, steps=steps, launcher=words, env=env, stream=None, timeout=1200
    )
    out = {"rc": result.returncode, "wall_s": result.wall_s, "steps_logged": len(result.metrics)}
    if result.returncode == 0:
        out["cpu_s"] = _task_clock_s(perf_out)
    return out


def self_metric(folder: Path) -> float | None:
    """otel-verl's own figure: median CPU-s per step over all processes (``otel-verl summary``)."""
    from otel_verl.offline.report.model import build

    try:
        rep = build(folder)
    except Exception:  # noqa: BLE001 - a bench: report and go on
        return None
    return rep.overhead.median() if rep.overhead else None


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
                for length, steps in (("short", ns.short), ("long", ns.long)):
                    workdir = root / f"{variant}_{length}_{r}"
                    loads.append(os.getloadavg()[0])
                    job = run_job(workdir, variant, steps, ns.driver, ns.algo, otlp_port)
                    if job["rc"] == 0 and variant == "file" and length == "long":
                        job["self"] = self_metric(workdir / "telemetry")
                    jobs.setdefault((variant, r), {})[length] = job
                    print(
                        f"round {r} {variant:9s} {steps:2d} steps: rc {job['rc']}, "
                        f"CPU {job.get('cpu_s', float('nan')):7.2f} s, wall {job['wall_s']:6.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        if stack_dir is not None:
            from otel_verl.offline import stack

            stack.down(stack_dir, out=lambda _: None)
    print(report(jobs, variants, ns, loads))
    print(f"(jobs under {root})")
    return 0


def _stack_up(root: Path) -> tuple[Path | None, int | None]:
    sys.path.insert(0, str(REPO / "tests" / "ops"))
    from opskit import COLLECTOR, free_ports, stack_bin_dir

    from otel_verl.offline import stack

    try:
        bin_dir = stack_bin_dir()
    except BaseException as exc:  # noqa: BLE001 - pytest.skip outside pytest: no binaries
        print(f"no collector variant: {exc}", file=sys.stderr)
        return None, None
    data_dir = root / "stack"
    ports = free_ports(list(stack.DEFAULT_PORTS))
    stack.up(bin_dir, data_dir, ports, timeout_s=120, config_dir=COLLECTOR, out=lambda _: None)
    return data_dir, ports["otlp-grpc"]


def report(jobs: dict, variants: list[str], ns: argparse.Namespace, loads: list[float]) -> str:
    span = ns.long - ns.short
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
    head = (
        f"# bench/job_cpu.py  ({machine()}; {ns.driver} {ns.algo}; jobs of {ns.short} and {ns.long} steps, "
        f"{ns.rounds} rounds, rotated order; load average {min(loads, default=0):.1f}-{max(loads, default=0):.1f})"
    )
    lines = [
        head,
        table(
            [
                "variant",
                "CPU-s per step",
                "added per step",
                "added, mean 95% CI",
                "added / plain step",
                "start-up CPU-s",
                "added at start",
                "rounds",
            ],
            rows,
        ),
    ]
    if selfs:
        lines.append(
            f"otel-verl's own figure (otel_verl.overhead.cpu_time, file variant, {ns.long}-step jobs): "
            f"{_spread(selfs, '{:.3f}')} CPU-s per step"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    started = time.monotonic()
    rc = main()
    print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
    sys.exit(rc)
