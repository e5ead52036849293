"""Reading a real run's metric points (``verl_cpu_harness.instrumented.Run``) the way several e2e tests do."""

from __future__ import annotations

import math
from typing import Any

from otel_verl import semconv


def latest_points(run: Any, name: str, **attrs: Any) -> list[Any]:
    """The latest point of ``name`` per (process, attribute set) whose attributes include ``attrs``:
    a cumulative instrument's whole count in each process."""
    latest: dict[tuple, Any] = {}
    for p in run.points:
        if p.name == name and all(p.attributes.get(k) == v for k, v in attrs.items()):
            key = (p.resource.get(semconv.RES_PROCESS_PID), tuple(sorted(p.attributes.items())))
            if key not in latest or p.time_ns >= latest[key].time_ns:
                latest[key] = p
    return list(latest.values())


def step_values(run: Any, step: int) -> tuple[dict[str, float], dict[str, float]]:
    """(exported, logged) for ``step``: the TaskRunner's attribute-free values of the first export
    that carried that step, by metric name, and the finite values verl's console printed for it,
    by their metric names."""
    taskrunner = [p for p in run.points if p.resource.get(semconv.RES_ROLE) == semconv.ROLE_TASKRUNNER]
    times = {p.time_ns for p in taskrunner if p.name == semconv.M_TRAINING_STEP and p.value == step}
    assert times, f"step {step} not exported"
    exported = {p.name: p.value for p in taskrunner if p.time_ns == min(times) and not p.attributes}
    logged = {
        semconv.metric_name(k): v for k, v in run.console[step].items() if math.isfinite(v) and k != semconv.STEP_KEY
    }
    return exported, logged


def latest_count(run: Any, name: str, **attrs: Any) -> int:
    """A cumulative histogram's count over the run: its ``latest_points``' counts added up."""
    return sum(p.count for p in latest_points(run, name, **attrs))
