"""What ``summary`` and ``report`` both say about a run, defined once: which trajectory is "the
slowest", the value each gauge had at each training step, and where each process was when the
run stalled.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from otel_verl import semconv
from otel_verl.offline.otlp_files import LogEntry, MetricPoint, SpanRecord

INSTANCE = "service.instance.id"


def is_trajectory(span: SpanRecord) -> bool:
    return span.name == semconv.SPAN_ROLLOUT_TRAJECTORY


def is_validation(span: SpanRecord) -> bool:
    return bool(span.attributes.get(semconv.ATTR_ROLLOUT_VALIDATE))


def trajectory_pool(spans: Iterable[SpanRecord], include_validation: bool = False) -> list[SpanRecord]:
    """The trajectory spans "the slowest" is chosen from: training ones, or all with ``include_validation``.

    Validation rollouts run with other sampling settings (often longer answers) outside the training
    loop, so by default they do not compete with the training steps' rollouts.
    """
    return [s for s in spans if is_trajectory(s) and (include_validation or not is_validation(s))]


def slowest_trajectory(spans: Iterable[SpanRecord], include_validation: bool = False) -> SpanRecord | None:
    """The longest span of ``trajectory_pool`` (ties: the larger span id, so both tools agree)."""
    pool = trajectory_pool(spans, include_validation)
    return max(pool, key=lambda s: (s.end_ns - s.start_ns, s.span_id)) if pool else None


def slowest_rule(include_validation: bool) -> str:
    """The definition, as both tools state it next to the slowest trajectory."""
    if include_validation:
        return "training and validation trajectories"
    return "training trajectories only; --include-validation counts validation ones too"


def tail_ratio(pool: Iterable[SpanRecord]) -> float | None:
    """Slowest / median duration of one step's trajectories (as ``verl.rollout.tail_ratio``); None
    without a median."""
    seconds = [s.seconds for s in pool]
    median = statistics.median(seconds) if seconds else 0.0
    return max(seconds) / median if median > 0 else None


def attr_key(attributes: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """A metric point's attributes as a hashable, ordered key."""
    return tuple(sorted((k, str(v)) for k, v in attributes.items()))


def step_gauges(points: Iterable[MetricPoint]) -> dict[tuple[str, tuple], dict[int, float]]:
    """Gauge values per training step: (name, attributes) -> {step: value}.

    A process exports all its gauges at each step boundary with one timestamp; the
    ``verl.training.step`` gauge of the same export names the step. Exports without it
    (validation before training, processes that log nothing) are left out.
    """
    groups: dict[tuple[Any, int], list[MetricPoint]] = defaultdict(list)
    for p in points:
        if p.kind == "gauge" and p.value is not None:
            who = p.resource.get(INSTANCE) or p.resource.get("process.pid")
            groups[(str(who), p.time_ns)].append(p)
    out: dict[tuple[str, tuple], dict[int, float]] = defaultdict(dict)
    for key in sorted(groups, key=lambda k: k[1]):
        batch = groups[key]
        step = next((p.value for p in batch if p.name == semconv.M_TRAINING_STEP and not p.attributes), None)
        if step is None or not math.isfinite(step):
            continue
        for p in batch:
            if p.name != semconv.M_TRAINING_STEP:
                out[(p.name, attr_key(p.attributes))][int(step)] = float(p.value)  # type: ignore[arg-type]
    return dict(out)


@dataclass
class StallReport:
    """The latest ``verl.stall.stacks`` record of one process, as the stall doctor sent it."""

    process: str  # "HFCPUServer (ray_actor) pid 7161 on node1"
    step: int | None
    episode: int | None
    seconds: float | None
    stacks: str
    trace_id: str

    def where(self) -> list[str]:
        """One line per thread but telemetry's own: its innermost frame outside Python's standard
        library (a thread waiting in ``threading.Event.wait`` is stuck where it called it)."""
        out: list[str] = []
        for block in self.stacks.split("\n\n"):
            lines = [line for line in block.splitlines() if line.strip()]
            if not lines or lines[0].startswith(_TELEMETRY_THREADS):
                continue
            frames = [line.strip() for line in lines[1:] if line.strip().startswith("File ")]
            own = [f for f in frames if not _STDLIB.search(f)]
            shown = (own or frames or ["(no Python frames)"])[-1]
            name = lines[0].split(" (ident", 1)[0]
            out.append(f"{name}: {shown.removeprefix('File ')}")
        return out


_TELEMETRY_THREADS = ('Thread "Otel', 'Thread "otel-verl')  # the SDK's and our own export threads
_STDLIB = re.compile(r'File "[^"]*/lib/python3\.\d+/(?!site-packages/)')


def stall_reports(records: Iterable[LogEntry]) -> tuple[list[LogEntry], list[StallReport]]:
    """The run's ``verl.training.stalled`` records, and each process's latest stacks (by process)."""
    stalled = sorted((r for r in records if r.event_name == semconv.EVENT_TRAINING_STALLED), key=lambda r: r.time_ns)
    latest: dict[tuple[Any, Any], LogEntry] = {}
    for r in records:
        if r.event_name != semconv.EVENT_STALL_STACKS:
            continue
        key = (r.resource.get("host.name"), r.resource.get("process.pid"))
        if key not in latest or r.time_ns >= latest[key].time_ns:
            latest[key] = r
    reports = []
    for (host, pid), r in sorted(latest.items(), key=lambda kv: str(kv[0])):
        role = r.resource.get(semconv.RES_ROLE, "?")
        rank = r.resource.get(semconv.RES_RANK)
        actor = r.attributes.get(semconv.ATTR_RAY_ACTOR_CLASS)
        who = f"{actor} ({role}{'' if rank is None else f' rank {rank}'})" if actor else str(role)
        step, episode = r.attributes.get(semconv.ATTR_STEP), r.attributes.get(semconv.ATTR_STALL_EPISODE)
        seconds = r.attributes.get(semconv.ATTR_STALL_SECONDS)
        reports.append(
            StallReport(
                process=f"{who} pid {pid} on {host}",
                step=int(step) if isinstance(step, (int, float)) else None,
                episode=int(episode) if isinstance(episode, (int, float)) else None,
                seconds=float(seconds) if isinstance(seconds, (int, float)) else None,
                stacks=r.body,
                trace_id=r.trace_id,
            )
        )
    return stalled, reports
