"""What otel-verl says it costs: ``otel_verl.overhead.cpu_time`` of a run, per process and per step.

Reads a run's metric files (``OTEL_VERL_FILE_DIR`` of an instrumented run with the
``otlp_json_file`` exporters, e.g. ``verl_cpu_harness.instrumented.run_instrumented``) and prints, per
process, otel-verl's own CPU per training step next to the process's whole CPU
(``process.cpu.time``) in the same window, by component; then the run's line from
``otel-verl summary``. The window runs from each process's first to its last export inside the
training steps (so start-up, the pipeline build on the first hook call, is left out); "lifetime
share" is the same ratio over the process's whole life up to its last export.

Usage: ``python bench/self_cost.py RUN_DIR [RUN_DIR ...]``

``--run`` makes the runs itself and compares variants side by side: real 10-step v0 GRPO jobs of
the harness (file exporters), in rounds with the variants alternating, each variant's figure the
median over its rounds. Variants: this tree with the defaults and with the lean settings
(``LEAN``: no forwarded keys, 2 trajectory spans per step, no ``process.*``), and with
``--otel-verl-src DIR`` the same two with another copy of ``otel_verl`` first on the path (an
older tree, e.g. ``git worktree add /tmp/old <commit>``).

``python bench/self_cost.py --run [--rounds 2] [--steps 10] [--otel-verl-src DIR]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from _util import machine, table

from otel_verl import semconv
from otel_verl.offline.otlp_files import read_metric_points
from otel_verl.offline.run.model import build
from otel_verl.offline.values import INSTANCE


def per_process(folder: Path) -> list[list[object]]:
    rep = build(folder)
    if not rep.steps:
        return []
    lo, hi = rep.steps[0].span.start_ns, rep.steps[-1].span.end_ns + 2 * 10**9  # the last step's export
    steps = len(rep.steps)
    # (process, name) -> time -> summed value of that export (components / user+system added up)
    sums: dict[tuple[str, str], dict[int, float]] = defaultdict(lambda: defaultdict(float))
    parts: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    roles: dict[str, str] = {}
    for p in read_metric_points(folder):
        if p.name not in (semconv.M_OVERHEAD_CPU_TIME, "process.cpu.time") or p.value is None:
            continue
        who = str(p.resource.get(INSTANCE))
        rank = p.resource.get(semconv.RES_RANK)
        roles[who] = f"{p.resource.get(semconv.RES_ROLE)}{'' if rank is None else f' {rank}'}"
        sums[(who, p.name)][p.time_ns] += p.value
        if p.name == semconv.M_OVERHEAD_CPU_TIME:
            parts[who][str(p.attributes.get(semconv.ATTR_OVERHEAD_COMPONENT))][p.time_ns] = p.value
    rows = []
    for who in sorted(roles, key=roles.get):
        own = sums.get((who, semconv.M_OVERHEAD_CPU_TIME), {})
        times = sorted(t for t in own if t <= hi)
        inside = [t for t in times if t >= lo]
        first = max([t for t in times if t < lo], default=inside[0] if inside else None)
        if first is None or not inside or inside[-1] == first:
            continue
        last = inside[-1]
        cpu = sums.get((who, "process.cpu.time"), {})
        used = cpu[last] - cpu[first] if first in cpu and last in cpu else None
        spent = own[last] - own[first]
        by = {c: v[last] - v[first] for c, v in parts[who].items() if first in v and last in v}
        top = ", ".join(f"{c} {1000 * v / steps:.1f}" for c, v in sorted(by.items(), key=lambda kv: -kv[1]) if v > 0)
        # over the process's whole life so far (both counters start with the process): what a
        # sampling profiler attached from the start sees (bench/e2e_profile.py)
        end = max(own)
        life = cpu.get(end)
        rows.append(
            [
                roles[who],
                f"{1000 * spent / steps:.1f}",
                "" if used is None else f"{used / steps:.3f}",
                "" if not used else f"{100 * spent / used:.1f}%",
                "" if not life else f"{100 * own[end] / life:.1f}%",
                top,
            ]
        )
    return rows


# The documented settings that cut the data per step (README, "Configuration").
LEAN = {
    "OTEL_VERL_FORWARD_METRICS": "false",
    "OTEL_VERL_ROLLOUT_SPANS_PER_STEP": "2",
    "OTEL_VERL_PROCESS_METRICS": "false",
}


def run_variants(rounds: int, steps: int, src: str | None) -> int:
    from verl_cpu_harness.instrumented import run_instrumented

    variants: dict[str, dict[str, str]] = {"this tree, defaults": {}, "this tree, lean": dict(LEAN)}
    if src:
        old = {"PYTHONPATH": os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])}
        variants = {f"{src}, defaults": old, f"{src}, lean": {**old, **LEAN}, **variants}
    root = Path(tempfile.mkdtemp(prefix="bench_self_cost_"))
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for r in range(rounds):
        order = list(variants)[r % len(variants) :] + list(variants)[: r % len(variants)]
        for name in order:
            workdir = root / f"variant{list(variants).index(name)}-round{r}"
            workdir.mkdir(parents=True)
            run_instrumented(workdir, "v0", "grpo", steps=steps, env=variants[name])
            rep = build(workdir / "telemetry")
            o = rep.overhead
            if o is None or not o.per_step or not rep.steps:
                print(f"{name}: round {r}: no overhead figure ({workdir})", file=sys.stderr)
                continue
            step_s = statistics.fmean(s.span.seconds for s in rep.steps)
            got[name].append((o.mean(), step_s))
            print(f"{name}: round {r}: {o.mean():.4f} CPU-s per step, step {step_s:.2f} s", file=sys.stderr)
    rows = []
    for name, values in got.items():
        if not values:
            continue
        cost = statistics.median(c for c, _ in values)
        step = statistics.median(s for _, s in values)
        spread = f"{min(c for c, _ in values):.4f}..{max(c for c, _ in values):.4f}"
        rows.append([name, len(values), f"{cost:.4f} ({spread})", f"{step:.2f}", f"{100 * cost / step:.2f}%"])
    print(f"# bench/self_cost.py --run  ({machine()}; v0 GRPO, {steps} steps, {rounds} rounds, alternating)")
    print(table(["variant", "runs", "otel-verl CPU-s per step (min..max)", "step s", "of the step"], rows))
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--run":
        parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
        parser.add_argument("--run", action="store_true")
        parser.add_argument("--rounds", type=int, default=2)
        parser.add_argument("--steps", type=int, default=10)
        parser.add_argument("--otel-verl-src", default=None)
        ns = parser.parse_args(argv)
        src = str(Path(ns.otel_verl_src).resolve()) if ns.otel_verl_src else None
        return run_variants(ns.rounds, ns.steps, src)
    for arg in argv:
        folder = Path(arg)
        rep = build(folder)
        print(f"# {folder}: {len(rep.steps)} steps, driver {rep.meta.get('driver', '?')}")
        header = ["process", "otel-verl ms/step", "process CPU-s/step", "share", "lifetime share"]
        header.append("by component, ms/step")
        print(table(header, per_process(folder)))
        print(rep.overhead_line() or "(no otel_verl.overhead.cpu_time)")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
