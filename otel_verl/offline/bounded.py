"""What ``summary`` and ``report`` hold of a long run's values, bounded whatever the run's length:
per-step series thinned (``StepSeries``, and ``thin`` for a series already read), step rows
thinned to a few (``StepPicks``) and a uniform sample of many values (``Sample``).

A series (one gauge's value per step, one step time per step) keeps of each run of consecutive steps
its lowest and its highest finite value (a run of only non-finite values keeps its first), so a
spike stays visible whatever the run's length; its first and last ``EDGE`` steps and the steps the
caller names (the rows of the page's tables) keep their values exactly. Runs start one step wide
and double in width whenever there are more than ``MAX_RUNS``: a series never holds more than about
``2 * MAX_RUNS + 2 * EDGE`` values plus the named steps.

The latest value of a step wins while it is among the last ``EDGE`` steps seen (an export of a step
repeated later, by time); a step older than those is folded into its run as it was.
"""

from __future__ import annotations

import math
import random
from array import array
from collections.abc import Collection, Iterator, Sequence
from typing import Generic, TypeVar

MAX_POINTS = 2000  # values a drawn series keeps at most (charts.line_svg, the page's "any metric")
MAX_RUNS = MAX_POINTS // 2  # runs of steps, each keeping its lowest and highest value
EDGE = 64  # the first and the last steps of a series, kept exactly

# what the page and the summary say where a series was thinned
THINNED = (
    f"a series of more than {MAX_POINTS:,} steps is drawn from the lowest and highest value of each of "
    f"{MAX_RUNS // 2:,} to {MAX_RUNS:,} runs of steps"
)


class Series(dict[int, float]):
    """A series as held: step -> value in step order; ``thinned`` when runs of steps were folded
    into their lowest and highest value; ``folded``: how many values were folded."""

    thinned: bool = False
    folded: int = 0


def folded(values: dict[int, float]) -> int:
    """How many values ``values`` had before it was thinned (a plain dict: its length)."""
    return values.folded if isinstance(values, Series) else len(values)


def thinned(values: dict[int, float]) -> bool:
    """Whether ``values`` lacks steps: a thinned ``Series``, or a dict longer than a chart draws."""
    return values.thinned if isinstance(values, Series) else len(values) > MAX_POINTS


class _Runs:
    """Runs of consecutive steps, each its lowest and highest finite value (a run of only non-finite
    values: its first), in four flat arrays: ``most`` runs at most, one step wide while the steps
    span no more, twice as wide each time they would."""

    __slots__ = ("_base", "_filled", "_hi", "_hi_step", "_lo", "_lo_step", "most", "width")

    def __init__(self, most: int) -> None:
        self.most = max(1, most)
        self.width = 1
        self._base = 0  # the run index of slot 0
        self._lo_step, self._lo, self._hi_step, self._hi = array("q"), array("d"), array("q"), array("d")
        self._filled = bytearray()

    def add(self, step: int, value: float) -> None:
        slot = step // self.width - self._base
        if 0 <= slot < len(self._filled):  # a run already held: the runs span no more than before
            self._put(slot, step, value)
            return
        if not self._filled:
            self._base = step // self.width
        while max(self._top(), step // self.width) - min(self._base, step // self.width) >= self.most:
            self._coarsen()
        self._place(step, value)

    def _place(self, step: int, value: float) -> None:
        """Into its run at the current width, the slots grown to reach it."""
        index = step // self.width
        if not self._filled:
            self._base = index
        if index < self._base:
            self._grow(self._base - index, front=True)
            self._base = index
        elif index >= self._base + len(self._filled):
            self._grow(index - self._base - len(self._filled) + 1)
        self._put(index - self._base, step, value)

    def _top(self) -> int:
        return self._base + max(len(self._filled), 1) - 1

    def _grow(self, n: int, front: bool = False) -> None:
        if n == 1 and not front:  # the usual case, the next step's run: no arrays made
            self._lo_step.append(0)
            self._lo.append(0.0)
            self._hi_step.append(0)
            self._hi.append(0.0)
            self._filled.append(0)
            return
        for part, empty in (
            (self._lo_step, array("q", [0]) * n),
            (self._lo, array("d", [0.0]) * n),
            (self._hi_step, array("q", [0]) * n),
            (self._hi, array("d", [0.0]) * n),
        ):
            if front:
                part[0:0] = empty
            else:
                part.extend(empty)
        if front:
            self._filled[0:0] = bytes(n)
        else:
            self._filled.extend(bytes(n))

    def _put(self, slot: int, step: int, value: float) -> None:
        if not self._filled[slot]:
            self._filled[slot] = 1
            self._lo_step[slot] = self._hi_step[slot] = step
            self._lo[slot] = self._hi[slot] = value
        elif not math.isfinite(value):
            return
        elif not math.isfinite(self._lo[slot]):  # only non-finite values so far: the finite one replaces them
            self._lo_step[slot] = self._hi_step[slot] = step
            self._lo[slot] = self._hi[slot] = value
        elif value < self._lo[slot]:
            self._lo_step[slot], self._lo[slot] = step, value
        elif value > self._hi[slot]:
            self._hi_step[slot], self._hi[slot] = step, value

    def _coarsen(self) -> None:
        """Twice as wide: each pair of runs becomes one."""
        old = list(self.points_of_runs())
        self.width *= 2
        self._base = self._base // 2
        self._lo_step, self._lo, self._hi_step, self._hi = array("q"), array("d"), array("q"), array("d")
        self._filled = bytearray()
        for step, value in old:
            self._place(step, value)

    def points_of_runs(self) -> Iterator[tuple[int, float]]:
        """Each run's lowest then highest value (once when they are one), in run order."""
        for slot, filled in enumerate(self._filled):
            if filled:
                yield self._lo_step[slot], self._lo[slot]
                if self._hi_step[slot] != self._lo_step[slot]:
                    yield self._hi_step[slot], self._hi[slot]


class StepSeries:
    """One series folded a value at a time (see the module's docstring); ``close`` gives the ``Series``."""

    __slots__ = ("_first", "_first_top", "_folded", "_in_order", "_keep", "_kept", "_recent", "_runs")

    def __init__(self, keep: Collection[int] = ()) -> None:
        self._keep = keep  # steps kept exactly (shared by every series of a run: not copied)
        self._kept: dict[int, float] = {}
        self._first: dict[int, float] = {}  # the first EDGE steps folded
        self._first_top = 0  # the highest step in ``_first`` once it is full
        self._recent: dict[int, tuple[int, float]] = {}  # the last EDGE steps: step -> (time, value)
        self._in_order = True  # ``_recent``'s steps came in increasing order: its first key is its lowest
        self._runs = _Runs(MAX_RUNS)
        self._folded = 0

    def add(self, step: int, value: float, time: int = 0) -> None:
        """``value`` at ``step``, exported at ``time`` (the later of two values of a recent step wins)."""
        recent = self._recent
        old = recent.get(step)
        if old is not None:
            if time >= old[0]:
                recent[step] = (time, value)
            return
        if self._in_order and recent and step < next(reversed(recent)):
            self._in_order = False  # a step read late: from now on the lowest is looked for
        recent[step] = (time, value)
        if len(recent) > EDGE:
            oldest = next(iter(recent)) if self._in_order else min(recent)
            self._fold(oldest, recent.pop(oldest)[1])

    def _fold(self, step: int, value: float) -> None:
        self._folded += 1
        if step in self._keep:
            self._kept[step] = value
        first = self._first
        if len(first) < EDGE:
            first[step] = value
            if len(first) == EDGE:
                self._first_top = max(first)
        elif step < self._first_top:  # an old step read late: the first ones are the lowest
            del first[self._first_top]
            first[step] = value
            self._first_top = max(first)
        self._runs.add(step, value)

    def close(self) -> Series:
        """The values held, in step order."""
        out = dict(self._runs.points_of_runs())
        out.update(self._first)
        out.update(self._kept)
        out.update((step, value) for step, (_, value) in self._recent.items())
        series = Series(sorted(out.items()))
        series.thinned = self._runs.width > 1
        series.folded = self._folded + len(self._recent)
        return series


def thin(values: dict[int, float], most: int = MAX_POINTS) -> dict[int, float]:
    """``values`` as drawn: itself when it has at most ``most`` points, else the lowest and highest
    finite value of each of ``most // 4`` to ``most // 2`` runs of steps (``StepSeries``' runs, no
    value kept exactly), in step order."""
    if len(values) <= most:
        return values
    runs = _Runs(most // 2)
    for step, value in values.items():
        runs.add(step, value)
    return dict(sorted(runs.points_of_runs()))


MAX_SAMPLE = 100_000  # values a ``Sample`` holds at most


class Sample:
    """Values of which at most ``MAX_SAMPLE`` are held: every one while there are no more, else a
    uniform sample of them (reservoir sampling, seeded: the same run gives the same page); the
    count, sum and largest value are of every value."""

    __slots__ = ("_random", "count", "largest", "total", "values")

    def __init__(self) -> None:
        self.values: list[float] = []
        self.count = 0
        self.total = 0.0
        self.largest: float | None = None
        self._random = random.Random(0)

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.largest = value if self.largest is None else max(self.largest, value)
        if len(self.values) < MAX_SAMPLE:
            self.values.append(value)
            return
        k = self._random.randrange(self.count)
        if k < MAX_SAMPLE:
            self.values[k] = value

    @property
    def sampled(self) -> bool:
        return self.count > len(self.values)


def pick_steps(steps: Sequence[tuple[int, float]], most: int) -> set[int]:
    """Which of ``steps`` ((step, seconds) in step order) a long run shows one by one: every step
    when there are at most ``most``, else the first ``most // 10``, the ``2 * most // 5`` slowest
    and the last ``most // 2`` (a smaller ``most`` picks a subset of a larger one's)."""
    if len(steps) <= most:
        return {n for n, _ in steps}
    slowest = sorted(steps, key=lambda st: (-st[1], st[0]))[: 2 * most // 5]
    picked = {n for n, _ in steps[: most // 10]} | {n for n, _ in slowest}
    return picked | {n for n, _ in steps[len(steps) - most // 2 :]}


def picked_text(picked: int, steps: int, most: int) -> str:
    """How the page and the summary say which steps ``pick_steps`` chose."""
    return (
        f"{picked:,} of {steps:,} steps: the first {most // 10:,}, the {2 * most // 5:,} slowest and the last "
        f"{most // 2:,}"
    )


T = TypeVar("T")


class SlowestPerRun(Generic[T]):
    """Of each run of consecutive steps, the item of the slowest step: every step's while there are
    at most ``most``; runs double in width when there are more (as ``StepSeries``' runs)."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.width = 1
        self._runs: dict[int, tuple[float, int, T]] = {}  # step // width -> (seconds, step, item)

    def add(self, step: int, seconds: float, item: T) -> None:
        index = step // self.width
        old = self._runs.get(index)
        if old is None or (seconds, -step) > (old[0], -old[1]):
            self._runs[index] = (seconds, step, item)
        if len(self._runs) > self.most:
            self.width *= 2
            merged: dict[int, tuple[float, int, T]] = {}
            for i, kept in sorted(self._runs.items()):
                into = merged.get(i // 2)
                if into is None or (kept[0], -kept[1]) > (into[0], -into[1]):
                    merged[i // 2] = kept
            self._runs = merged

    def items(self) -> list[T]:
        """The items kept, in step order."""
        return [item for _, _, item in sorted(self._runs.values(), key=lambda kept: kept[1])]
