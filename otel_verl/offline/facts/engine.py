"""Where a trajectory's time went inside the rollout engine (queue / prefill / decode)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from otel_verl import semconv
from otel_verl.offline.folds import StepFact
from otel_verl.offline.otlp_files import SpanRecord
from otel_verl.offline.values import as_number


@dataclass(frozen=True)
class EngineSplit:
    """Where one trajectory's time went inside the rollout engine: the sums over its LLM calls'
    engine request spans (vLLM's ``llm_request``, ``gen_ai.latency.*``)."""

    trajectory_s: float
    queue_s: float
    prefill_s: float
    decode_s: float
    requests: int  # engine request spans found
    calls: int  # LLM calls of the trajectory

    @property
    def engine_s(self) -> float:
        return self.queue_s + self.prefill_s + self.decode_s

    @property
    def outside_s(self) -> float:
        """The trajectory's seconds outside the engine (its client, Ray, the reward, tools)."""
        return max(0.0, self.trajectory_s - self.engine_s)

    def line(self) -> str:
        """How both tools say it."""
        total = self.trajectory_s or 1.0
        parts = [f"{label} {s:.3f} s ({s / total:.0%})" for label, s in self._parts()]
        missing = (
            f"; {self.calls - self.requests} of its {self.calls} LLM calls without one"
            if self.requests < self.calls
            else ""
        )
        return f"{', '.join(parts)} of its {self.trajectory_s:.3f} s{missing}"

    def _parts(self) -> list[tuple[str, float]]:
        return [
            ("queue", self.queue_s),
            ("prefill", self.prefill_s),
            ("decode", self.decode_s),
            ("outside the engine", self.outside_s),
        ]


def engine_split(trajectory: SpanRecord | None, spans: Iterable[SpanRecord]) -> EngineSplit | None:
    """``trajectory``'s engine time (queue / prefill / decode) from the engine request spans under
    its LLM calls; None without a trajectory or any such span."""
    if trajectory is None:
        return None
    children: dict[tuple[str, str], list[SpanRecord]] = {}
    for s in spans:
        if s.trace_id == trajectory.trace_id:
            children.setdefault((s.trace_id, s.parent_id), []).append(s)
    calls = [
        c
        for c in children.get((trajectory.trace_id, trajectory.span_id), [])
        if semconv.is_llm_call(c.name, c.attributes)
    ]
    totals = [0.0, 0.0, 0.0]
    found = 0
    for call in calls:
        for request in children.get((call.trace_id, call.span_id), []):
            if request.name != semconv.SPAN_ENGINE_REQUEST:
                continue
            values = [as_number(request.attributes.get(k)) for k in _ENGINE_PARTS]
            if any(v is None or not math.isfinite(v) or v < 0 for v in values):
                continue
            found += 1
            totals = [t + v for t, v in zip(totals, values, strict=True)]  # type: ignore[operator]
    if not found:
        return None
    return EngineSplit(trajectory.seconds, *totals, requests=found, calls=len(calls))


_ENGINE_PARTS = (semconv.GEN_AI_LATENCY_TIME_IN_QUEUE, semconv.GEN_AI_LATENCY_PREFILL, semconv.GEN_AI_LATENCY_DECODE)

# the step's slowest trajectory in the engine: ``SPLIT.of(row)``
SPLIT: StepFact[EngineSplit] = StepFact("engine", lambda step: engine_split(step.slowest, step.members))
