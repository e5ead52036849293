"""Each step's long tail: the workers' own figures over every trajectory, or the trees' ratio."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from otel_verl import semconv
from otel_verl.offline.folds import Fold, StepFact, StepSpans
from otel_verl.offline.otlp_files import SpanRecord
from otel_verl.offline.values import as_number


@dataclass
class StepTail:
    """A step's long tail as its agent-loop workers measured it over every trajectory (their
    ``verl.rollout.slowest_trajectory`` events), not only the trees they exported."""

    trajectories: int | None  # all of the step's trajectories; None when a worker could not count them
    ratio: float | None  # slowest / median in the worker that had the step's slowest trajectory
    seconds: float  # the slowest trajectory's


class StepTails(dict[int, StepTail]):
    """Submit step -> its ``StepTail``, from the workers' long-tail events (training ones, or all),
    folded one span at a time."""

    def add(self, s: SpanRecord, include_validation: bool = False) -> None:
        if s.name not in (semconv.SPAN_ROLLOUT_BATCH, semconv.SPAN_ROLLOUT_TAIL):
            return
        for e in s.event_attributes(semconv.EVENT_SLOWEST_TRAJECTORY):
            step = e.get(semconv.ATTR_ROLLOUT_SUBMIT_STEP)
            seconds = as_number(e.get(semconv.ATTR_ROLLOUT_DURATION))
            if not isinstance(step, int) or seconds is None:
                continue
            if e.get(semconv.ATTR_ROLLOUT_VALIDATE) and not include_validation:
                continue
            n = e.get(semconv.ATTR_ROLLOUT_TRAJECTORIES)
            n = n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None
            ratio = as_number(e.get(semconv.ATTR_ROLLOUT_TAIL_RATIO))
            old = self.get(step)
            if old is None:
                self[step] = StepTail(n, ratio, seconds)
                continue
            old.trajectories = None if old.trajectories is None or n is None else old.trajectories + n
            if seconds > old.seconds:
                old.ratio, old.seconds = ratio, seconds


def tail_ratio(pool: Iterable[SpanRecord]) -> float | None:
    """Slowest / median duration of one step's trajectories (as ``verl.rollout.tail_ratio``); None
    without a median."""
    seconds = [s.seconds for s in pool]
    median = statistics.median(seconds) if seconds else 0.0
    return max(seconds) / median if median > 0 else None


class Tails(Fold):
    """``StepTails`` of the run's rollout batch and tail spans, folded as they are read."""

    SPANS = frozenset({semconv.SPAN_ROLLOUT_BATCH, semconv.SPAN_ROLLOUT_TAIL})

    def __init__(self, include_validation: bool = False) -> None:
        self.include_validation = include_validation
        self.tails = StepTails()

    def on_span(self, s: SpanRecord) -> None:
        self.tails.add(s, self.include_validation)

    def close(self) -> StepTails:
        return self.tails


def _tail(step: StepSpans) -> StepTail | None:
    tails: StepTails = step.run["tails"]
    return tails.get(step.step)


def _ratio(step: StepSpans) -> float | None:
    # a sample of trees says little about the median: the workers' own figure when there is one
    tail = _tail(step)
    return tail.ratio if tail is not None and tail.ratio is not None else tail_ratio(step.pool)


def _trajectories(step: StepSpans) -> int | None:
    tail = _tail(step)
    return tail.trajectories if tail is not None else None


# The step's facts (``StepFact.of(row)``): its slowest / median trajectory, and every trajectory of
# the step as its workers counted them (the trees exported are ``StepRow.trajectories``). The ratio
# is said of the run's slowest trajectory in the health box.
RATIO: StepFact[float] = StepFact(
    "tail_ratio", _ratio, slowest_trajectory=lambda ratio, row: f"{ratio:.1f}x its step's median"
)
ALL_TRAJECTORIES: StepFact[int] = StepFact("all_trajectories", _trajectories)
