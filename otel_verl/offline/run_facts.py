"""What ``summary`` and ``report`` both say about a run, defined once: which trajectory is "the
slowest", and the value each gauge had at each training step.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from otel_verl import semconv
from otel_verl.offline.otlp_files import MetricPoint, SpanRecord

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
