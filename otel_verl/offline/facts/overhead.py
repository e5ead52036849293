"""otel-verl's own CPU per training step, from its ``otel_verl.overhead.cpu_time`` counters."""

from __future__ import annotations

import bisect
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from otel_verl import semconv
from otel_verl.offline.folds import Fold, Steps
from otel_verl.offline.otlp_files import MetricPoint
from otel_verl.offline.values import attr_key, exporter


@dataclass
class Overhead:
    """``otel_verl.overhead.cpu_time`` per training step, summed over the processes reporting it.

    A step's cost is what every process's cumulative counter grew between the step's boundaries:
    the start of step 1's span, then the TaskRunner's export at the end of each step (the end of the
    step's span when that export is missing). Each process counts from its first export: what it
    had spent by then (building its pipeline on the first hook call, starting its threads) is
    ``startup``, once per process, not a step's.
    """

    per_step: dict[int, float]  # step -> CPU seconds of otel-verl, all processes
    components: dict[str, float]  # component -> CPU seconds over the steps
    processes: int  # processes that reported the metric
    process_cpu: dict[int, float]  # step -> CPU seconds of those processes (process.cpu.time), when exported
    startup: float = 0.0  # CPU seconds of otel-verl in all processes up to each one's first export
    cpu_share: float | None = None  # otel-verl's CPU / all CPU, over the steps, of the processes exporting both

    def mean(self) -> float:
        """CPU seconds per step: all the steps' cost over their number. The headline figure:
        processes without a step boundary of their own (worker ranks, reward workers, rollout
        servers) export when idle, at most once a second, so on short steps a process's cost lands
        in some steps and not in others, which moves the median but not the mean."""
        return sum(self.per_step.values()) / len(self.per_step) if self.per_step else 0.0

    def median(self) -> float:
        return statistics.median(self.per_step.values()) if self.per_step else 0.0


# the metrics ``OverheadFold`` reads (any other point it leaves as it is)
OVERHEAD_METRICS = frozenset({semconv.M_TRAINING_STEP, semconv.M_OVERHEAD_CPU_TIME, "process.cpu.time"})


class OverheadFold(Fold):
    """``overhead`` folded one metric point at a time, for a run of any length.

    The counters grow in increments (a cumulative point's growth since the series' last one, a delta
    point's value; each series' first point is start-up). An increment between two steps' possible
    boundaries is added to its step at once; so is one that falls where a boundary may lie (between
    a step's end and the next one's start, where the TaskRunner's export of the step's values sets
    it) once that export was read. Until then it waits: read the TaskRunner's points first and
    almost nothing is held. A point older than its series' last one is left out; a counter that
    goes down adds nothing.
    """

    POINTS = OVERHEAD_METRICS

    def __init__(self, steps: list[tuple[int, int, int]]) -> None:
        self.steps = steps
        # boundary k may lie in [lows[k], highs[k]]: step 1's start, then each step's end up to the next start
        self._lows: list[int] = [steps[0][1]] if steps else []
        self._highs: list[float] = [steps[0][1]] if steps else []
        for i, (_, _, end) in enumerate(steps):
            low = max(end, self._highs[-1])
            high = steps[i + 1][1] if i + 1 < len(steps) else math.inf
            self._lows.append(low)
            self._highs.append(max(high, low))
        self._ends: dict[int, int] = {}  # step -> time of the TaskRunner's export at its end
        self._closes = {n: i + 1 for i, (n, _, _) in enumerate(steps)}  # step -> the boundary it sets
        self._series: dict[tuple, list] = {}  # (name, process, key) -> [last time, last value, delta]
        self._pending: dict[int, list[tuple[int, float, str, str | None]]] = defaultdict(list)  # boundary -> increments
        self.per_step = [0.0] * len(steps)
        self._cpu = [0.0] * len(steps)
        self._cpu_waiting: dict[str, list[tuple[int, float]]] = defaultdict(list)  # not yet known to report ours
        self._components: dict[str, float] = defaultdict(float)
        self._own_by_process: dict[str, float] = defaultdict(float)
        self._with_cpu: set[str] = set()
        self.startup = 0.0
        self.holding = 0  # increments waiting for a boundary or for their process's counter

    def on_steps(self, steps: Steps) -> None:
        self.__init__(steps.at)  # type: ignore[misc]  # the steps bound every increment

    def on_point(self, p: MetricPoint) -> None:
        self.add(p)

    def add(self, p: MetricPoint) -> None:
        if p.name == semconv.M_TRAINING_STEP:
            runner = p.resource.get(semconv.RES_ROLE) in (semconv.ROLE_TASKRUNNER, None)
            if runner and p.value is not None and math.isfinite(p.value) and int(p.value) not in self._ends:
                self._ends[int(p.value)] = p.time_ns
                k = self._closes.get(int(p.value))
                if k is not None and k in self._pending:
                    increments = self._pending.pop(k)
                    self.holding -= len(increments)
                    for increment in increments:
                        self._place(k, *increment)
            return
        if p.name == semconv.M_OVERHEAD_CPU_TIME:
            key: str | None = str(p.attributes.get(semconv.ATTR_OVERHEAD_COMPONENT))
        elif p.name == "process.cpu.time":
            key = None  # user, system: one series each, one sum
        else:
            return
        if p.kind != "sum" or p.value is None or not self.steps:
            return
        who = exporter(p.resource)
        value = float(p.value)
        name = (p.name, who, key if key is not None else attr_key(p.attributes))
        last = self._series.get(name)
        if key is not None:
            self._cpu_known(who)
        if last is None:
            self._series[name] = [p.time_ns, value, p.temporality == 1]
            self.startup += value if key is not None else 0.0
            return
        if p.time_ns < last[0]:
            return
        grown = value if last[2] else max(0.0, value - last[1])
        last[0], last[1] = p.time_ns, value
        k = bisect.bisect_right(self._lows, p.time_ns) - 1
        if k < 0:
            return  # before the first step
        if p.time_ns > self._highs[k]:
            if k < len(self.steps):
                self._count(k, grown, who, key)
        elif k == 0 or self.steps[k - 1][0] in self._ends:
            self._place(k, p.time_ns, grown, who, key)
        else:
            self._pending[k].append((p.time_ns, grown, who, key))
            self.holding += 1

    def _place(self, k: int, t: int, grown: float, who: str, component: str | None) -> None:
        """An increment at ``t`` where boundary ``k`` may lie: in the step before it or after it."""
        # a step ends with the TaskRunner's export of its values, but never after the next step starts
        bound = self._lows[k] if k == 0 else self._ends.get(self.steps[k - 1][0], self._lows[k])
        i = k - 1 if t <= min(max(bound, self._lows[k]), self._highs[k]) else k
        if 0 <= i < len(self.steps):
            self._count(i, grown, who, component)

    def _cpu_known(self, who: str) -> None:
        """``who`` reports our counter: its process CPU counts (``Overhead.process_cpu``)."""
        if who not in self._own_by_process:
            self._own_by_process[who] = 0.0
            waiting = self._cpu_waiting.pop(who, ())
            self.holding -= len(waiting)
            for i, grown in waiting:
                self._cpu[i] += grown

    def _count(self, i: int, grown: float, who: str, component: str | None) -> None:
        if component is None:
            self._with_cpu.add(who)
            if who in self._own_by_process:
                self._cpu[i] += grown
            else:
                self._cpu_waiting[who].append((i, grown))
                self.holding += 1
            return
        self.per_step[i] += grown
        self._components[component] += grown
        self._own_by_process[who] += grown

    def close(self) -> Overhead | None:
        """Every point read: the ``Overhead``, or None without our counter or steps."""
        for k, increments in sorted(self._pending.items()):  # boundaries no TaskRunner export set
            for increment in increments:
                self._place(k, *increment)
        self._pending.clear()
        self._cpu_waiting.clear()
        reporting = set(self._own_by_process)
        if not reporting or not self.steps:
            return None
        with_cpu = self._with_cpu & reporting
        own_with_cpu = sum(self._own_by_process[who] for who in with_cpu)
        process_cpu = {n: cpu for (n, _, _), cpu in zip(self.steps, self._cpu, strict=True)} if with_cpu else {}
        all_cpu = sum(process_cpu.values())
        return Overhead(
            {n: total for (n, _, _), total in zip(self.steps, self.per_step, strict=True)},
            dict(self._components),
            len(reporting),
            process_cpu,
            self.startup,
            own_with_cpu / all_cpu if all_cpu > 0 else None,
        )


def overhead(points: Iterable[MetricPoint], steps: list[tuple[int, int, int]]) -> Overhead | None:
    """The telemetry cost of each step (``OverheadFold``); ``steps`` are (step, span start, span end) in ns."""
    fold = OverheadFold(steps)
    for p in sorted(points, key=lambda p: p.time_ns):
        fold.add(p)
    return fold.close()


def cost_line(o: Overhead | None, steps: int, seconds: float, senders: int) -> str | None:
    """The "telemetry cost per step" line: otel-verl's own CPU next to the step time (``steps``:
    the run's, ``seconds`` in them; ``senders``: the processes that sent telemetry)."""
    if o is None or not o.per_step or not steps:
        return None
    step_s = seconds / steps
    cost = o.mean()
    line = f"telemetry cost per step: {cost:.4f} CPU-s (mean of {len(o.per_step)} steps; median {o.median():.4f}"
    line += f", {min(o.per_step.values()):.4f} to {max(o.per_step.values()):.4f})"
    if step_s > 0:
        line += f", {100 * cost / step_s:.2f}% of the mean step time {step_s:.2f} s"
    line += f", from the {o.processes} of the run's {senders} processes that report {semconv.M_OVERHEAD_CPU_TIME}"
    if o.cpu_share is not None:
        line += f" ({100 * o.cpu_share:.1f}% of their CPU in the steps)"
    spent = sum(o.components.values())
    if spent > 0:
        parts = sorted(o.components.items(), key=lambda kv: (-round(kv[1], 9), kv[0]))
        line += "; " + ", ".join(f"{c} {100 * v / spent:.0f}%" for c, v in parts if v > 0)
    if o.startup > 0:
        line += f"; plus {o.startup:.3f} CPU-s once, until each process's first export"
    return line
