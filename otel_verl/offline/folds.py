"""What the run reader feeds: each fact's fold (``run_reader``, which imports no fact; the facts'
list is ``facts.folds``).

A fold names what it reads and is handed only that, in the reader's order:

1. ``on_span`` for each span whose name is in ``SPANS`` (the first reading of the traces, the files
   side by side, each batch in the order of its spans' ends);
2. ``on_steps`` once, with the run's steps as that reading found them;
3. ``on_point`` for each metric point whose name is in ``POINTS`` (the TaskRunner's files first),
   and, for a fold with an ``export`` method (``exports.ExportListener``), each export placed at its
   step;
4. ``on_log`` for each log record whose event name is in ``EVENTS``;
5. ``close``: the fact (what the renderers show).

``holding``: the points a fold holds not yet folded (the reader's bound on what it holds counts it).

A per-step fact (``StepFact``, the list: ``facts.step_facts``) is computed from one step's spans
(``StepSpans``, with the run's facts the folds closed to) as the model makes the step's row, and
kept on the row under its name (``StepRow.facts``); ``StepFact.of(row)`` reads it back. Its run
total over every step (``Total``) and its words in the health box's slowest step and trajectory
(``Phrase``) are its own too: the model keeps and calls them with no change to it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from otel_verl import semconv
from otel_verl.offline.otlp_files import LogEntry, MetricPoint, SpanRecord

T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True)
class Steps:
    """The run's steps, as the first reading of the spans found them."""

    at: list[tuple[int, int, int]]  # (step, its first verl.step span's start, end) in ns, by step
    keep: Collection[int] = ()  # the steps the tables show one by one (their values kept exactly)

    @property
    def first_ns(self) -> int | None:
        """The first step's start (what comes before it is the validation before training)."""
        return self.at[0][1] if self.at else None


class Fold:
    """A fact's fold: what it reads (``SPANS``, ``POINTS``, ``EVENTS``: names) and what it does with
    each; every handler does nothing unless a fact's fold says otherwise."""

    SPANS: Collection[str] = frozenset()
    POINTS: Collection[str] = frozenset()
    EVENTS: Collection[str] = frozenset()
    holding = 0

    def on_span(self, s: SpanRecord) -> None:
        """A span named in ``SPANS``."""

    def on_steps(self, steps: Steps) -> None:
        """The run's steps, once, after the spans and before the points."""

    def on_point(self, p: MetricPoint) -> None:
        """A metric point named in ``POINTS``."""

    def on_log(self, r: LogEntry) -> None:
        """A log record whose event is named in ``EVENTS``."""

    def close(self) -> Any:
        """Everything read: the fact."""
        return None


@dataclass(frozen=True)
class StepSpans:
    """One step as the second reading of the traces found it: what a per-step fact is computed from."""

    span: SpanRecord  # its verl.step span
    members: list[SpanRecord]  # its trace and the rollout traces joined to it (by verl.rollout.submit_step)
    trace: list[SpanRecord]  # its own trace
    pool: list[SpanRecord]  # its trajectories "the slowest" is chosen from (slowest.trajectory_pool)
    slowest: SpanRecord | None  # its slowest trajectory (slowest.slowest_trajectory)
    run: Mapping[str, Any]  # the run's facts its folds closed to, by name (``facts.folds``)

    @property
    def step(self) -> int:
        return self.span.attributes[semconv.ATTR_STEP]


class HasFacts(Protocol):
    """What a per-step fact's value is kept on: a step's row (``run.model.StepRow``)."""

    facts: dict[str, Any]


class StepRowLike(HasFacts, Protocol):
    """A step's row as a per-step fact's health-box hooks read it (``run.model.StepRow``)."""

    step: int
    span: SpanRecord  # its verl.step span


class HasTotals(Protocol):
    """What the per-step facts' run totals are kept on: every step, folded (``run.model.StepTotals``)."""

    fact_totals: dict[str, Any]


@dataclass(frozen=True)
class Total(Generic[T, U]):
    """A per-step fact's run total: ``start``, then ``add(total, value)`` with each step's value
    (None: the step has none), every step in the order the model makes their rows."""

    start: U
    add: Callable[[U, T | None], U]


@dataclass(frozen=True)
class Phrase:
    """What a per-step fact adds to the health box's "slowest step" finding."""

    text: str  # appended as is to "step N, S s" (with its own separator: ": ..." or "; ...")
    anchor: str | None = None  # the report section the finding points to (the first fact's to name one)


@dataclass(frozen=True)
class StepFact(Generic[T]):
    """A per-step fact: ``compute`` its value from one step (None: the step has none), kept on the
    step's row under ``name``; ``of(row)`` reads it back, typed, for the renderers.

    Optional, each kept or called by the model with no change to it, the facts in list order
    (``facts.step_facts``):

    - ``total``: its run total over every step (``Total``), kept on ``run.model.StepTotals``;
      ``total_of(totals)`` reads it back;
    - ``slowest_step(value, row)``: a ``Phrase`` for the health box's "slowest step" finding;
    - ``slowest_trajectory(value, row)``: words for its "slowest trajectory" finding, from the row
      of the step whose slowest trajectory is the run's.

    The hooks are called only on a step that has the fact's value.
    """

    name: str
    compute: Callable[[StepSpans], T | None]
    total: Total[T, Any] | None = None
    slowest_step: Callable[[T, StepRowLike], Phrase | None] | None = None
    slowest_trajectory: Callable[[T, StepRowLike], str | None] | None = None

    def of(self, row: HasFacts) -> T | None:
        """The fact's value on ``row`` (None when the step has none)."""
        return row.facts.get(self.name)

    def total_of(self, totals: HasTotals) -> Any:
        """The fact's run total (its ``total.start`` before any step; None without a ``total``)."""
        return totals.fact_totals.get(self.name, self.total.start if self.total is not None else None)
