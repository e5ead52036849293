"""Each process's exports placed at the training step they belong to: the reader's per-step gauge
series, and what it hands the facts that fold whole exports (``ExportListener``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Protocol

from otel_verl import semconv
from otel_verl.offline.bounded import Series, StepSeries
from otel_verl.offline.otlp_files import MetricPoint
from otel_verl.offline.values import AttrKeys, exporter


class ExportListener(Protocol):
    """What else folds each placed export (``health.HealthFold``). One with a ``READS`` attribute
    (the metric names it reads) is handed only those points of an export, and no export without them."""

    def export(self, who: str, time_ns: int, step: int | None, group: list[GroupPoint]) -> None: ...


# a point of an export as ``StepGauges`` holds it: (name, attributes, value, kind, temporality)
GroupPoint = tuple[str, tuple, float, str, int]


# sums grouped with their export too: the step the export names is theirs (``health.HealthFold``)
GROUPED_SUMS = frozenset({semconv.M_NONFINITE, semconv.M_GOODPUT_TIME, semconv.M_GOODPUT_DROPPED_GROUPS})


class StepGauges:
    """Gauge values per training step, folded a stored request at a time: (name, attributes) -> its
    ``bounded.StepSeries`` (bounded whatever the run's length).

    A process exports all its gauges at each step boundary with one timestamp; the
    ``verl.training.step`` gauge of the same export names the step (the latest export of a step
    wins). Exports without it (validation before training, processes that log nothing) are left
    out of the series (``listeners`` see them, with no step). A process's points come in time order,
    so one of a later time completes its earlier exports. ``keep``: the steps whose values the
    ``tabled`` series keep exactly (the tables' rows and columns).
    """

    def __init__(
        self,
        keep: Collection[int] = (),
        listeners: Sequence[ExportListener] = (),
        tabled: Collection[tuple[str, tuple]] = (),
    ) -> None:
        # (process, export time) -> the export's points not yet placed
        self._open: dict[tuple[str, int], list[GroupPoint]] = {}
        self._series: dict[tuple[str, tuple], StepSeries] = {}
        self._keep = keep
        self._tabled = tabled
        self._listeners = [(listener, getattr(listener, "READS", None)) for listener in listeners]
        self.holding = 0  # points not yet placed
        self._resource: tuple[dict[str, Any] | None, str] = (None, "")  # the last resource and its process
        self._attr_key = AttrKeys()

    def add(self, p: MetricPoint) -> None:
        self.add_request((p,))

    def add_request(self, points: Iterable[MetricPoint]) -> None:
        """The points of one stored request, in its order (``add`` of each, the request's run of
        points of one process and time going into one group without a look-up per point)."""
        last: tuple[Any, int] = (None, -1)  # the resource and time of ``group``
        group: list[GroupPoint] = []
        added = 0
        for p in points:
            kind = p.kind
            if p.value is None or not (kind == "gauge" or (kind == "sum" and p.name in GROUPED_SUMS)):
                continue
            if last[0] is not p.resource or last[1] != p.time_ns:
                last = (p.resource, p.time_ns)
                group = self._group(p.resource, p.time_ns)
            attributes = p.attributes
            group.append(
                (p.name, self._attr_key(attributes) if attributes else (), float(p.value), kind, p.temporality)
            )
            added += 1
        self.holding += added

    def _group(self, resource: dict[str, Any], time_ns: int) -> list[GroupPoint]:
        """The open export of ``resource``'s process at ``time_ns``; its earlier ones placed first."""
        if self._resource[0] is resource:  # a request's points share their resource
            who = self._resource[1]
        else:
            who = exporter(resource)
            self._resource = (resource, who)
        group = self._open.get((who, time_ns))
        if group is None:
            for key in [k for k in self._open if k[0] == who and k[1] < time_ns]:
                self._place(key)
            group = self._open[(who, time_ns)] = []
        return group

    def _place(self, key: tuple[str, int]) -> None:
        group = self._open.pop(key)
        self.holding -= len(group)
        step = next(
            (
                v
                for name, attrs, v, kind, _ in group
                if name == semconv.M_TRAINING_STEP and not attrs and kind == "gauge"
            ),
            None,
        )
        n = int(step) if step is not None and math.isfinite(step) else None
        for listener, reads in self._listeners:
            if reads is None:
                listener.export(key[0], key[1], n, group)
                continue
            read = [point for point in group if point[0] in reads]
            if read:
                listener.export(key[0], key[1], n, read)
        if n is None:
            return
        for name, attrs, value, kind, _ in group:
            if kind == "gauge" and name != semconv.M_TRAINING_STEP:
                series = self._series.get((name, attrs))
                if series is None:
                    keep = self._keep if (name, attrs) in self._tabled else ()
                    series = self._series[(name, attrs)] = StepSeries(keep)
                series.add(n, value, key[1])

    def close(self) -> dict[tuple[str, tuple], Series]:
        """Every export placed: the series, each thinned (``bounded``)."""
        for key in sorted(self._open, key=lambda k: k[1]):
            self._place(key)
        return {key: series.close() for key, series in self._series.items()}


def step_gauges(points: Iterable[MetricPoint]) -> dict[tuple[str, tuple], Series]:
    """``StepGauges`` over ``points`` in any order."""
    fold = StepGauges()
    for p in sorted(points, key=lambda p: p.time_ns):
        fold.add(p)
    return fold.close()
