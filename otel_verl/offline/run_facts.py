"""What ``summary`` and ``report`` both say about a run, defined once: which trajectory is "the
slowest", the value each gauge had at each training step, and where each process was when the
run stalled.
"""

from __future__ import annotations

import bisect
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from otel_verl import semconv
from otel_verl.offline.bounded import Series, StepSeries
from otel_verl.offline.otlp_files import LogEntry, MetricPoint, SpanRecord

INSTANCE = semconv.RES_SERVICE_INSTANCE_ID


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


def tree_below(root: SpanRecord, children: dict[str, list[SpanRecord]]) -> list[SpanRecord]:
    """Every span under ``root`` (``children``: parent span id -> spans), in every process: the
    trajectory tree otel-verl kept (its LLM, tool and reward worker spans, user spans under them)."""
    out: list[SpanRecord] = []
    seen = {root.span_id}
    todo = [root.span_id]
    while todo and len(out) < 100_000:  # a file may hold a cycle or a chain too deep to recurse
        for child in children.get(todo.pop(), ()):
            if child.span_id not in seen:
                seen.add(child.span_id)
                out.append(child)
                todo.append(child.span_id)
    return out


def children_of(spans: Iterable[SpanRecord]) -> dict[str, list[SpanRecord]]:
    out: dict[str, list[SpanRecord]] = defaultdict(list)
    for s in spans:
        if s.parent_id:
            out[s.parent_id].append(s)
    return out


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


def as_number(value: Any) -> float | None:
    """An attribute that should be a number, as one; None when it is not (a bool is not one either)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def attr_key(attributes: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """A metric point's attributes as a hashable, ordered key."""
    return tuple(sorted((k, str(v)) for k, v in attributes.items()))


def exporter(resource: dict[str, Any]) -> str:
    """The process a metric point came from: its ``service.instance.id``, else its pid."""
    return str(resource.get(INSTANCE) or resource.get(semconv.RES_PROCESS_PID))


class ExportListener(Protocol):
    """What else folds each placed export (``health.HealthFold``). One with a ``READS`` attribute
    (the metric names it reads) is handed only those points of an export, and no export without them."""

    def export(self, who: str, time_ns: int, step: int | None, group: list[GroupPoint]) -> None: ...


# a point of an export as ``StepGauges`` holds it: (name, attributes, value, kind, temporality)
GroupPoint = tuple[str, tuple, float, str, int]
# sums grouped with their export too: the step the export names is theirs (``health.HealthFold``)
GROUPED_SUMS = frozenset({semconv.M_NONFINITE, semconv.M_GOODPUT_TIME, semconv.M_GOODPUT_DROPPED_GROUPS})


MAX_ATTR_KEYS = 4096  # attribute sets whose ``attr_key`` an ``AttrKeys`` remembers (a run has a few hundred)


class AttrKeys:
    """``attr_key`` of a point's attributes, made once per dict: the reader hands equal attribute
    sets over as one dict (each dict is held, so its id names no other)."""

    def __init__(self) -> None:
        self._keys: dict[int, tuple[dict[str, Any], tuple]] = {}  # id of attributes -> (them, attr_key)

    def __call__(self, attributes: dict[str, Any]) -> tuple:
        if not attributes:
            return ()
        found = self._keys.get(id(attributes))
        if found is not None and found[0] is attributes:
            return found[1]
        if len(self._keys) >= MAX_ATTR_KEYS:
            self._keys.clear()
        key = attr_key(attributes)
        self._keys[id(attributes)] = (attributes, key)
        return key


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


@dataclass
class StallReport:
    """The latest ``verl.stall.stacks`` record of one process, as the stall doctor sent it."""

    process: str  # "HFCPUServer (ray_actor) pid 7161 on node1"
    step: int | None
    episode: int | None
    seconds: float | None
    stacks: str
    trace_id: str

    def where(self) -> list[str]:
        """One line per thread but telemetry's own: its innermost frame outside Python's standard
        library (a thread waiting in ``threading.Event.wait`` is stuck where it called it)."""
        out: list[str] = []
        for block in self.stacks.split("\n\n"):
            lines = [line for line in block.splitlines() if line.strip()]
            if not lines or lines[0].startswith(_TELEMETRY_THREADS):
                continue
            frames = [line.strip() for line in lines[1:] if line.strip().startswith("File ")]
            own = [f for f in frames if not _STDLIB.search(f)]
            shown = (own or frames or ["(no Python frames)"])[-1]
            name = lines[0].split(" (ident", 1)[0]
            out.append(f"{name}: {shown.removeprefix('File ')}")
        return out


_TELEMETRY_THREADS = ('Thread "Otel', 'Thread "otel-verl')  # the SDK's and our own export threads
_STDLIB = re.compile(r'File "[^"]*/lib/python3\.\d+/(?!site-packages/)')


def stall_reports(records: Iterable[LogEntry]) -> tuple[list[LogEntry], list[StallReport]]:
    """The run's ``verl.training.stalled`` records, and each process's latest stacks (by process)."""
    stalled = sorted((r for r in records if r.event_name == semconv.EVENT_TRAINING_STALLED), key=lambda r: r.time_ns)
    latest: dict[tuple[Any, Any], LogEntry] = {}
    for r in records:
        if r.event_name != semconv.EVENT_STALL_STACKS:
            continue
        key = (r.resource.get(semconv.RES_HOST_NAME), r.resource.get(semconv.RES_PROCESS_PID))
        if key not in latest or r.time_ns >= latest[key].time_ns:
            latest[key] = r
    reports = []
    for (host, pid), r in sorted(latest.items(), key=lambda kv: str(kv[0])):
        role = r.resource.get(semconv.RES_ROLE, "?")
        rank = r.resource.get(semconv.RES_RANK)
        actor = r.attributes.get(semconv.ATTR_RAY_ACTOR_CLASS)
        who = f"{actor} ({role}{'' if rank is None else f' rank {rank}'})" if actor else str(role)
        step, episode = (
            as_number(r.attributes.get(semconv.ATTR_STEP)),
            as_number(r.attributes.get(semconv.ATTR_STALL_EPISODE)),
        )
        seconds = as_number(r.attributes.get(semconv.ATTR_STALL_SECONDS))
        reports.append(
            StallReport(
                process=f"{who} pid {pid} on {host}",
                step=None if step is None else int(step),
                episode=None if episode is None else int(episode),
                seconds=seconds,
                stacks=r.body,
                trace_id=r.trace_id,
            )
        )
    return stalled, reports


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


class OverheadFold:
    """``overhead`` folded one metric point at a time, for a run of any length.

    The counters grow in increments (a cumulative point's growth since the series' last one, a delta
    point's value; each series' first point is start-up). An increment between two steps' possible
    boundaries is added to its step at once; so is one that falls where a boundary may lie (between
    a step's end and the next one's start, where the TaskRunner's export of the step's values sets
    it) once that export was read. Until then it waits: read the TaskRunner's points first and
    almost nothing is held. A point older than its series' last one is left out; a counter that
    goes down adds nothing.
    """

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


DROPPED = semconv.M_TELEMETRY_DROPPED


@dataclass
class SpoolFacts:
    """What the on-disk spools of a run did (``otel_verl.spool.batches``/``.bytes``, and
    ``otel_verl.telemetry.dropped``), summed over the processes: the last value of each counter."""

    batches: dict[str, int]  # outcome -> batches, all signals
    bytes: dict[str, int]  # outcome -> bytes
    processes: int  # processes that spooled something
    dropped: int  # otel_verl.telemetry.dropped, every kind

    def line(self) -> str | None:
        """One line: whether the run had an export outage and whether anything was lost; None when
        no batch ever waited and nothing was dropped."""
        b = self.batches
        spooled, resent = b.get(semconv.SPOOL_SPOOLED, 0), b.get(semconv.SPOOL_RESENT, 0)
        lost, rejected = b.get(semconv.SPOOL_DROPPED, 0), b.get(semconv.SPOOL_REJECTED, 0)
        if not spooled and not self.dropped:
            return None
        if not spooled:
            return f"telemetry lost: {self.dropped} items or batches dropped by full queues ({DROPPED})"
        mib = self.bytes.get(semconv.SPOOL_SPOOLED, 0) / 2**20
        line = (
            f"export outage: the endpoint did not take {spooled} batches ({mib:.1f} MiB) of {self.processes} "
            f"processes, which waited in the on-disk spool; {resent} re-sent"
        )
        left = max(0, spooled - resent - lost - rejected)
        if left:
            line += (
                f", {left} not re-sent by the last export (the next verl process of the host sends them, "
                "or otel-verl replay --spool)"
            )
        if rejected:
            line += f", {rejected} refused for good by the endpoint"
        if lost or self.dropped:
            line += f"; LOST: {lost} batches dropped from the full spool (OTEL_VERL_SPOOL_MAX_MB)"
            other = self.dropped - lost
            line += f" and {other} more by full queues ({DROPPED})" if other > 0 else ""
        else:
            line += "; nothing lost"
        return line


def spool_facts(points: Iterable[MetricPoint]) -> SpoolFacts | None:
    """The run's spool counters (``SpoolFacts``), or None when no process reported them."""
    points = list(points)

    def last(name: str, key: Any) -> dict[tuple, float]:
        """(process, ``key(point)``) -> the value of the series' latest point."""
        latest: dict[tuple, tuple[int, float]] = {}
        for p in points:
            if p.name == name and p.kind == "sum" and p.value is not None:
                k, point = (exporter(p.resource), key(p)), (p.time_ns, float(p.value))
                if k not in latest or point >= latest[k]:
                    latest[k] = point
        return {k: value for k, (_, value) in latest.items()}

    outcome = lambda p: p.attributes.get(semconv.ATTR_SPOOL_OUTCOME)  # noqa: E731
    batches, nbytes = last(semconv.M_SPOOL_BATCHES, outcome), last(semconv.M_SPOOL_BYTES, outcome)
    dropped = last(semconv.M_TELEMETRY_DROPPED, lambda p: p.attributes.get(semconv.ATTR_DROPPED_KIND))
    if not batches and not any(dropped.values()):
        return None
    by_outcome: dict[str, int] = defaultdict(int)
    by_bytes: dict[str, int] = defaultdict(int)
    for (_, what), n in batches.items():
        by_outcome[str(what)] += int(n)
    for (_, what), n in nbytes.items():
        by_bytes[str(what)] += int(n)
    spooling = {who for (who, what), n in batches.items() if what == semconv.SPOOL_SPOOLED and n > 0}
    return SpoolFacts(dict(by_outcome), dict(by_bytes), len(spooling), int(sum(dropped.values())))


# ---------------------------------------------------------------- where a step's time went
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


# ---------------------------------------------------------------- the time categories in words
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
