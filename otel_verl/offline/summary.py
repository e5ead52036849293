"""``otel-verl summary RUN_DIR``: a run's stored telemetry as a few lines of text.

Reads what the ``otlp_json_file`` exporters wrote (``OTEL_VERL_FILE_DIR``) and prints the processes
that reported, one line per step trace with its stage spans and worker spans, the slowest rollout
trajectory, and the main training metrics as exported at each step.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from otel_verl import semconv
from otel_verl.offline.otlp_files import MetricPoint, SpanRecord, read_metric_points, read_spans

# (metric, (attribute, value) the point must carry, or None)
MAIN_METRICS: tuple[tuple[str, tuple[str, str] | None], ...] = (
    (semconv.M_TRAINING_STEP, None),
    (semconv.M_REWARD, (semconv.ATTR_REWARD_SOURCE, "score")),
    (semconv.M_KL, (semconv.ATTR_KL_SOURCE, "kl_loss")),
    (semconv.M_KL, (semconv.ATTR_KL_SOURCE, "ppo_kl")),
    (semconv.metric_name("actor/entropy"), None),
    (semconv.metric_name("actor/grad_norm"), None),
    (semconv.M_THROUGHPUT, None),
    (semconv.metric_name("perf/time_per_step"), None),
)


def summary(folder: Path, out: TextIO | None = None) -> int:
    """Print the summary of ``folder``; 1 when it holds no spans and no metric points."""
    out = sys.stdout if out is None else out
    spans = read_spans(folder)
    points = read_metric_points(folder)
    if not spans and not points:
        print(f"no telemetry files in {folder}", file=out)
        return 1
    _print_processes(spans, out)
    _print_steps(spans, out)
    _print_rollout(spans, out)
    print("\nmetrics (values exported at each step):", file=out)
    for label, values in metric_series(points):
        print(f"  {label}: {', '.join(f'{v:.6g}' for v in values)}", file=out)
    return 0


def _print_processes(spans: list[SpanRecord], out: TextIO) -> None:
    procs = Counter(
        (s.resource.get(semconv.RES_ROLE), s.resource.get(semconv.RES_RANK), s.resource.get("process.pid"))
        for s in spans
    )
    run_ids = {s.resource.get(semconv.RES_RUN_ID) for s in spans}
    print(f"run {', '.join(sorted(map(str, run_ids)))}: {len(spans)} spans from {len(procs)} processes", file=out)
    for (role, rank, pid), n in sorted(procs.items(), key=lambda kv: str(kv[0])):
        print(f"  {role}{'' if rank is None else f' rank {rank}'} (pid {pid}): {n} spans", file=out)


def _print_steps(spans: list[SpanRecord], out: TextIO) -> None:
    by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
    for s in spans:
        by_trace[s.trace_id].append(s)
    print("\nstep traces:", file=out)
    steps = sorted(
        (s for s in spans if s.name == semconv.SPAN_STEP), key=lambda s: s.attributes.get(semconv.ATTR_STEP, 0)
    )
    for step in steps:
        members = by_trace[step.trace_id]
        stages = sorted((s for s in members if semconv.ATTR_STAGE in s.attributes), key=lambda s: s.start_ns)
        workers = [s for s in members if s.name.startswith(semconv.SPAN_WORKER_PREFIX)]
        ranks = sorted({s.attributes.get(semconv.RES_RANK) for s in workers}, key=str)
        stage_txt = " ".join(f"{s.attributes[semconv.ATTR_STAGE]}={s.seconds:.2f}s" for s in stages)
        print(
            f"  step {step.attributes.get(semconv.ATTR_STEP)} ({step.seconds:.2f}s, trace {step.trace_id[:8]}): "
            f"{stage_txt}; {len(workers)} worker spans from ranks {ranks}",
            file=out,
        )


def _print_rollout(spans: list[SpanRecord], out: TextIO) -> None:
    trajectories = [s for s in spans if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY]
    if not trajectories:
        return
    slowest = max(trajectories, key=lambda s: s.seconds)
    print(
        f"\nrollout: {len(trajectories)} trajectory spans; slowest {slowest.seconds:.2f}s "
        f"(submitted at step {slowest.attributes.get(semconv.ATTR_ROLLOUT_SUBMIT_STEP)}, "
        f"trace {slowest.trace_id[:8]})",
        file=out,
    )


def metric_series(points: Iterable[MetricPoint]) -> list[tuple[str, list[float]]]:
    """(label, values in time order) for each of ``MAIN_METRICS`` with points.

    A gauge is exported again at every export interval until it changes, so runs of one value
    are shown once.
    """
    ordered = sorted(points, key=lambda p: p.time_ns)
    out: list[tuple[str, list[float]]] = []
    for name, attr in MAIN_METRICS:
        values = [
            p.value
            for p in ordered
            if p.name == name and p.value is not None and (attr is None or p.attributes.get(attr[0]) == attr[1])
        ]
        if values:
            label = name if attr is None else f"{name}{{{attr[0]}={attr[1]}}}"
            out.append((label, dedupe(values)))
    return out


def dedupe(values: list[float]) -> list[float]:
    """``values`` without consecutive repeats."""
    out: list[float] = []
    for v in values:
        if not out or out[-1] != v:
            out.append(v)
    return out
