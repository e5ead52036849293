"""CPU per rollout trajectory at 1,000+ trajectories per agent-loop worker per step: trees decided
at the end (this tree) vs head sampling (an older tree), side by side on the real CPU trainer.

A real GRPO job of the harness, made large in trajectories and small in everything else: all 64
training prompts per step x ``rollout.n`` 16 = 1,024 trajectories per step, one agent-loop worker,
4-token responses, one reward worker, file exporters, the default span budget (64 trees per step).
Variants alternate, ``--rounds`` each: this tree, and with ``--before-src DIR`` another copy of
``otel_verl`` first on the path (``git archive <commit> otel_verl | tar -x -C DIR``).

Per variant, from each run's metric files: otel-verl's own CPU (``otel_verl.overhead.cpu_time``:
its hooks on verl's threads, the agent-loop worker's event loop included, and its own threads) in
the agent-loop worker and in the reward worker, between the exports that end the first and the last
step's rollouts there (so start-up is left out), divided by the trajectories counted in between
(``verl.rollout.trajectory.duration``); next to it, the agent-loop worker's whole CPU per trajectory
(``process.cpu.time``) and the trees exported per step.

``python bench/tail_cost.py [--rounds 2] [--steps 3] [--driver v0] [--before-src DIR]``

``--micro``: the same count in one process, precisely: verl's real ``AgentLoopWorker``,
``LLMServerClient`` and ``RewardLoopWorker`` (the rollout unit tests' stand-ins for the Ray
boundary: a server that answers at once, the reward call's data and reply pickled as Ray does), one
step of 1,024 trajectories at a time, otel-verl's own pipeline with the file exporters (metrics
collected at each step's end). Measured: the event loop thread's CPU per trajectory
(``time.thread_time``: verl's work and our hooks on it; otel-verl's share is the difference to the
same run without otel-verl) and the other threads' CPU (the exporters, and the rollout histograms'
values recorded at collection: ``otel_verl.instruments.deferred``). Each variant runs in a fresh
process, alternating, ``--rounds`` times.

``python bench/tail_cost.py --micro [--rounds 5] [--before-src DIR]``
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
from otel_verl.offline.otlp_files import read_metric_points, read_spans

PROMPTS, N = 64, 16  # 1,024 trajectories per step
MICRO_STEPS = 6  # per --micro process: the first is warm-up
EXTRA = [
    f"data.train_batch_size={PROMPTS}",
    f"actor_rollout_ref.rollout.n={N}",
    "data.max_response_length=4",
    f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=128",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=128",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=128",
]
ROLES = (semconv.ROLE_AGENT_LOOP, semconv.ROLE_REWARD_WORKER)


def _series(points, name: str, role: str, by: str | None = None) -> dict[str, dict[int, float]]:
    """(component or "") -> export time -> value, summed over the role's processes and attributes."""
    out: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for p in points:
        if p.name == name and p.resource.get(semconv.RES_ROLE) == role and p.value is not None:
            key = str(p.attributes.get(by)) if by else ""
            out[key][p.time_ns] += p.count if name == semconv.M_ROLLOUT_TRAJECTORY_DURATION else p.value
    return out


def measure(folder: Path) -> dict[str, float] | None:
    points = read_metric_points(folder)
    out: dict[str, float] = {}
    counted = _series(points, semconv.M_ROLLOUT_TRAJECTORY_DURATION, semconv.ROLE_AGENT_LOOP)[""]
    times = sorted(counted)
    if len(times) < 2:
        return None
    first, last = times[0], times[-1]  # the ends of the first and the last step's rollouts
    trajectories = counted[last] - counted[first]
    if trajectories <= 0:
        return None
    out["trajectories"] = trajectories
    for role in ROLES:
        parts = _series(points, semconv.M_OVERHEAD_CPU_TIME, role, semconv.ATTR_OVERHEAD_COMPONENT)
        total = 0.0
        for component, values in parts.items():
            t = sorted(values)
            lo = max([x for x in t if x <= first], default=t[0])  # the reward worker exports on its own clock
            hi = max(x for x in t if x <= last + 5 * 10**9)
            total += values[hi] - values[lo]
            if role == semconv.ROLE_AGENT_LOOP:
                out[f"agent {component}"] = 1e6 * (values[hi] - values[lo]) / trajectories
        out[role] = 1e6 * total / trajectories
    cpu = _series(points, "process.cpu.time", semconv.ROLE_AGENT_LOOP)[""]
    if first in cpu and last in cpu:
        out["agent process"] = 1e6 * (cpu[last] - cpu[first]) / trajectories
    spans = read_spans(folder)
    steps = {s.attributes.get(semconv.ATTR_ROLLOUT_SUBMIT_STEP) for s in spans}
    trees = sum(1 for s in spans if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY)
    out["trees per step"] = trees / max(1, len(steps - {None}))
    return out


def micro(rounds: int, before: str | None) -> int:
    import json
    import subprocess

    here = os.environ.get("PYTHONPATH", "")
    variants: dict[str, tuple[str, bool]] = {"without otel-verl": (here, False)}
    if before:
        variants[f"{before} (head sampling)"] = (os.pathsep.join(filter(None, [before, here])), True)
    variants["this tree (decided at the end)"] = (here, True)
    got: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for r in range(rounds):
        for name, (path, instrumented) in variants.items():
            env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
            env["PYTHONPATH"] = path
            proc = subprocess.run(
                [sys.executable, str(Path(__file__).with_name("_tail_micro.py")), "1" if instrumented else "0"],
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
            if proc.returncode != 0:
                print(f"{name}: round {r} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
                continue
            got[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(f"{name}: round {r}: {got[name][-1]}", file=sys.stderr, flush=True)
    base = statistics.median(g["loop"] for g in got["without otel-verl"]) if got["without otel-verl"] else 0.0
    rows = []
    for name, runs in got.items():
        if runs:
            loop = statistics.median(g["loop"] for g in runs)
            others = statistics.median(g["others"] for g in runs)
            hooks = statistics.median(g.get("hooks", 0.0) for g in runs)
            added = "" if name == "without otel-verl" else f"{loop - base:+.1f}"
            rows.append([name, len(runs), f"{loop:.1f}", added, f"{hooks:.1f}", f"{others:.1f}"])
    print(
        f"# bench/tail_cost.py --micro  ({machine()}; {PROMPTS} prompts x n={N} = {PROMPTS * N} trajectories per "
        f"step, {MICRO_STEPS - 1} steps per process (median), {rounds} processes per variant, alternating)"
    )
    header = [
        "variant",
        "runs",
        "event loop CPU us/trajectory",
        "otel-verl's part",
        "hooks us/trajectory",
        "other threads us/trajectory",
    ]
    print(table(header, rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--micro", action="store_true")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--driver", default="v0")
    parser.add_argument("--before-src", default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    ns = parser.parse_args(argv)
    if ns.micro:
        return micro(ns.rounds, str(Path(ns.before_src).resolve()) if ns.before_src else None)
    from verl_cpu_harness.instrumented import run_instrumented

    here = os.environ.get("PYTHONPATH", "")
    variants = {"this tree (decided at the end)": {}}
    if ns.before_src:
        src = str(Path(ns.before_src).resolve())
        variants = {f"{src} (head sampling)": {"PYTHONPATH": os.pathsep.join(filter(None, [src, here]))}, **variants}
    root = ns.workdir or Path(tempfile.mkdtemp(prefix="bench_tail_cost_"))
    got: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for r in range(ns.rounds):
        order = list(variants)[r % len(variants) :] + list(variants)[: r % len(variants)]
        for name in order:
            workdir = root / f"variant{list(variants).index(name)}-round{r}"
            workdir.mkdir(parents=True)
            run = run_instrumented(
                workdir,
                ns.driver,
                "grpo",
                steps=ns.steps,
                val_before_train=False,
                extra=EXTRA,
                env=variants[name],
                timeout_s=1800,
            )
            found = measure(workdir / "telemetry") if run.returncode == 0 else None
            if found is None:
                print(f"{name}: round {r}: no figure (rc {run.returncode}; {workdir})", file=sys.stderr)
                continue
            got[name].append(found)
            print(f"{name}: round {r}: {found}", file=sys.stderr, flush=True)
    keys = [semconv.ROLE_AGENT_LOOP, semconv.ROLE_REWARD_WORKER, "agent hooks", "agent process", "trees per step"]
    rows = []
    for name, runs in got.items():
        if runs:
            med = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in keys}
            total = med[semconv.ROLE_AGENT_LOOP] + med[semconv.ROLE_REWARD_WORKER]
            rows.append(
                [
                    name,
                    len(runs),
                    f"{med[semconv.ROLE_AGENT_LOOP]:.1f} (hooks {med['agent hooks']:.1f})",
                    f"{med[semconv.ROLE_REWARD_WORKER]:.1f}",
                    f"{total:.1f}",
                    f"{med['agent process']:.0f}",
                    f"{med['trees per step']:.0f}",
                ]
            )
    print(
        f"# bench/tail_cost.py  ({machine()}; {ns.driver} GRPO, {PROMPTS} prompts x n={N} = {PROMPTS * N} "
        f"trajectories per step in one agent-loop worker, {ns.steps} steps, {ns.rounds} rounds, alternating)"
    )
    header = [
        "variant",
        "runs",
        "agent-loop worker: otel-verl us/trajectory",
        "reward worker: otel-verl us/traj",
        "both",
        "agent-loop process CPU us/traj",
        "trees per step",
    ]
    print(table(header, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
