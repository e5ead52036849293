"""End-to-end overhead: the real verl trainer on CPU (test harness), instrumented vs not.

Alternates runs of three variants, ``--runs`` times each (default 3):

* ``off``: ``python -m verl.trainer.main_ppo`` without otel-verl (no launcher, no OTEL_* vars,
  ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=verl`` so the verl plugin stays off too);
* ``file``: ``opentelemetry-instrument`` with the OTLP JSON file exporters;
* ``dead``: ``opentelemetry-instrument`` exporting OTLP/gRPC to a port nobody listens on.

Per variant: median of verl's own ``timing_s/step`` over every step but the first (warm-up)
of every run, and the median job wall time. Usage:
``python bench/e2e_overhead.py [--runs 3] [--steps 4] [--driver v0] [--algo grpo]``
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
from pathlib import Path

from _util import machine, table

VARIANTS = ("off", "file", "dead")
EXTRA = {  # --variants: label, traces exporter, metrics exporter
    "none": ("instrumented, no exporter", "none", "none"),
    "traces": ("instrumented, span files only", "otlp_json_file", "none"),
    "metrics": ("instrumented, metric files only", "none", "otlp_json_file"),
}
LABELS = {
    "bare": "opentelemetry-instrument only (otel-verl off)",
    "off": "not instrumented",
    "file": "instrumented, file exporters",
    "dead": "instrumented, OTLP collector down",
    **{k: v[0] for k, v in EXTRA.items()},
}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(variant: str, folder: Path) -> tuple[dict[str, str], str | None]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if variant == "off":
        env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "verl"
        return env, None
    if variant == "bare":  # opentelemetry-instrument and the SDK in every process, otel-verl off
        env.update({"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "verl", "OTEL_TRACES_EXPORTER": "none"})
        env.update({"OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"})
        return env, "opentelemetry-instrument"
    env.update(
        {
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_VERL_FILE_DIR": str(folder),
            "OTEL_METRIC_EXPORT_INTERVAL": "60000",
        }
    )
    if variant == "file":
        env.update({"OTEL_TRACES_EXPORTER": "otlp_json_file", "OTEL_METRICS_EXPORTER": "otlp_json_file"})
    elif variant in EXTRA:  # to tell apart what the hooks, span export and metric export cost
        traces, metrics = EXTRA[variant][1:]
        env.update({"OTEL_TRACES_EXPORTER": traces, "OTEL_METRICS_EXPORTER": metrics})
    else:
        env.update(
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_METRICS_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{_closed_port()}",
            }
        )
    return env, "opentelemetry-instrument"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--driver", default="v0")
    parser.add_argument("--algo", default="grpo")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(LABELS)}; 'off' first")
    ns = parser.parse_args(argv)
    variants = [v for v in ns.variants.split(",") if v in LABELS]
    from verl_cpu_harness import run_verl

    root = ns.workdir or Path(tempfile.mkdtemp(prefix="bench_e2e_"))
    steps: dict[str, list[float]] = {v: [] for v in variants}
    walls: dict[str, list[float]] = {v: [] for v in variants}
    for i in range(ns.runs):
        for variant in variants:
            workdir = root / f"{variant}_{i}"
            env, launcher = _env(variant, workdir / "telemetry")
            result = run_verl(
                workdir,
                driver=ns.driver,
                algo=ns.algo,
                steps=ns.steps,
                launcher=launcher,
                env=env,
                stream=None,
                timeout=900,
            )
            if result.returncode != 0:  # e.g. another job's Ray cluster on this machine: skip that run
                print(f"{variant} run {i} failed (rc={result.returncode}); see {workdir / 'run.log'}", file=sys.stderr)
                continue
            console = result.metrics
            times = [console[n]["timing_s/step"] for n in range(2, ns.steps + 1)]
            steps[variant] += times
            walls[variant].append(result.wall_s)
            print(
                f"run {i} {variant:4s}: wall {result.wall_s:6.1f} s, step 2..{ns.steps}: "
                + ", ".join(f"{t:.3f}" for t in times),
                file=sys.stderr,
                flush=True,
            )

    base = statistics.median(steps["off"])
    base_wall = statistics.median(walls["off"])
    rows = []
    for variant in variants:
        label = LABELS[variant]
        if not steps[variant]:
            rows.append([label, "-", "-", "-", "-", "-", "0 (0 runs)"])
            continue
        med = statistics.median(steps[variant])
        wall = statistics.median(walls[variant])
        rows.append(
            [
                label,
                f"{med:.3f}",
                f"{(med / base - 1) * 100:+.1f}%",
                f"{min(steps[variant]):.3f}",
                f"{wall:.1f}",
                f"{wall - base_wall:+.1f}",
                f"{len(steps[variant])} ({len(walls[variant])} runs)",
            ]
        )
    print(
        f"# bench/e2e_overhead.py  ({machine()}; {ns.driver} {ns.algo}, {ns.steps} steps x {ns.runs} runs "
        "per variant, alternating; step 1 excluded)"
    )
    print(
        table(["variant", "median step s", "vs off", "min step s", "median job wall s", "wall vs off s", "steps"], rows)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
