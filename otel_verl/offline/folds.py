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
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from otel_verl.offline.otlp_files import LogEntry, MetricPoint, SpanRecord


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
