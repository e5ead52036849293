"""Where a step's time went: the share a child span explains, the time categories in words, v1's
poll lag.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from otel_verl import semconv
from otel_verl.offline.folds import Phrase, StepFact, StepRowLike, Total
from otel_verl.offline.otlp_files import SpanRecord
from otel_verl.offline.values import as_number


def union_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """Nanoseconds that at least one of the ``(start, end)`` intervals covers (overlaps counted once)."""
    total, start, end = 0, 0, None
    for lo, hi in sorted(intervals):
        if end is None or lo > end:
            if end is not None:
                total += end - start
            start, end = lo, hi
        else:
            end = max(end, hi)
    if end is not None:
        total += end - start
    return total


def covered_seconds(parent: SpanRecord, children: Iterable[SpanRecord]) -> float:
    """Seconds of ``parent`` that some child span covers (overlaps counted once, clipped to it)."""
    clipped = (
        (max(c.start_ns, parent.start_ns), min(c.end_ns, parent.end_ns))
        for c in children
        if c.end_ns > parent.start_ns and c.start_ns < parent.end_ns
    )
    return union_ns(clipped) / 1e9


def attributed_seconds(step: SpanRecord, trace: Iterable[SpanRecord]) -> float:
    """The rule "attributed" of summary and report: the seconds of a step's stage spans that a
    child span explains (a worker call, a rollout batch, a ``verl.wait``). The rest of the step
    (driver work inside a stage with no child span, and time between stages) is its residual."""
    children: dict[str, list[SpanRecord]] = {}
    for s in trace:
        children.setdefault(s.parent_id, []).append(s)
    total = 0.0
    for stage in children.get(step.span_id, []):
        if isinstance(stage.attributes.get(semconv.ATTR_STAGE), str):
            total += covered_seconds(stage, children.get(stage.span_id, []))
    return min(total, step.seconds)


# verl.time.<category> (hooks/accounting.py) as both tools name them for a reader.
CATEGORY_WORDS = {
    "rollout": "generating rollouts",
    "waiting": "waiting for rollouts still being generated",
    "poll_lag": "waiting after the rollouts were done (the replay buffer's poll)",
    "training": "training (log-probs, values, updates on the workers)",
    "weight_sync": "syncing weights to the rollout replicas",
    "checkpoint": "saving checkpoints",
    "validation": "validating",
    "driver": "the trainer's own work (advantages, batching, logging)",
    "other": "outside any stage verl times",
}


def category_words(category: str) -> str:
    """A time category in plain words (an unknown one as it is)."""
    return CATEGORY_WORDS.get(category, category)


@dataclass(frozen=True)
class PollLag:
    """v1: when a step's rollouts were all done and how long the trainer waited after that (its
    ``verl.wait`` spans' ``verl.wait.poll_lag``)."""

    done_s: float  # seconds after the step's start when the last rollout it trains on was done
    lag_s: float  # seconds the trainer kept waiting after that
    interval_s: float | None  # the replay buffer's poll interval

    def line(self) -> str:
        """How both tools say it."""
        every = f" (it polls every {self.interval_s:g} s)" if self.interval_s else ""
        return (
            f"rollouts done at {self.done_s:.2f} s; the trainer waited {self.lag_s:.2f} s more: "
            f"the replay buffer's poll interval{every}"
        )


def poll_lag(step: SpanRecord, trace: Iterable[SpanRecord]) -> PollLag | None:
    """The step's poll lag from its ``verl.wait`` spans (the last wait with a lag); None without one."""
    waits = [
        s
        for s in trace
        if s.name == semconv.SPAN_WAIT and as_number(s.attributes.get(semconv.ATTR_WAIT_POLL_LAG)) is not None
    ]
    if not waits:
        return None
    wait = max(waits, key=lambda s: s.end_ns)
    lag = max(0.0, min(as_number(wait.attributes[semconv.ATTR_WAIT_POLL_LAG]) or 0.0, wait.seconds))
    done = (wait.end_ns - step.start_ns) / 1e9 - lag
    return PollLag(max(0.0, done), lag, as_number(wait.attributes.get(semconv.ATTR_WAIT_POLL_INTERVAL)))


def time_categories(step_span: SpanRecord) -> dict[str, float]:
    """Seconds of the step by category (rollout, waiting, training, ...), in the order the step
    span carries them: the ``verl.time.<category>`` attributes ``hooks/accounting.py`` sets."""
    out: dict[str, float] = {}
    for key, value in step_span.attributes.items():
        if key.startswith(semconv.ATTR_TIME_PREFIX) and key != semconv.ATTR_TIME_CATEGORY:
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[key[len(semconv.ATTR_TIME_PREFIX) :]] = float(value)
    return out


def _top_categories(time_by: dict[str, float], row: StepRowLike) -> Phrase | None:
    """The health box's slowest step: its two largest time categories, as shares of the step."""
    if not time_by:
        return None
    seconds = row.span.seconds
    if seconds <= 0:
        return Phrase("", "time-went")
    top = sorted(time_by.items(), key=lambda kv: -kv[1])[:2]
    return Phrase(
        ": " + ", ".join(f"{category_words(c)} {100 * v / seconds:.0f}%" for c, v in top if v > 0), "time-went"
    )


# The step's facts (``StepFact.of(row)``): its seconds a child span of a stage explains (summed over
# every step: ``ATTRIBUTED.total_of(totals)``), its seconds by category (empty for runs recorded
# before otel-verl accounted step time), v1's poll lag; the last two said of the slowest step in the
# health box.
ATTRIBUTED: StepFact[float] = StepFact(
    "attributed",
    lambda step: attributed_seconds(step.span, step.trace),
    total=Total(0.0, lambda total, seconds: total + (seconds or 0.0)),
)
TIME_BY: StepFact[dict[str, float]] = StepFact(
    "time_by", lambda step: time_categories(step.span), slowest_step=_top_categories
)
POLL_LAG: StepFact[PollLag] = StepFact(
    "poll_lag", lambda step: poll_lag(step.span, step.trace), slowest_step=lambda lag, row: Phrase(f"; {lag.line()}")
)
