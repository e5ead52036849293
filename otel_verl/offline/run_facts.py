"""What ``summary`` and ``report`` both say about a run, defined once: which trajectory is "the
slowest", the value each gauge had at each training step, and where each process was when the
run stalled.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from otel_verl import semconv
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


def step_tails(spans: Iterable[SpanRecord], include_validation: bool = False) -> dict[int, StepTail]:
    """Submit step -> its ``StepTail``, from the workers' long-tail events (training ones, or all)."""
    found: dict[int, StepTail] = {}
    for s in spans:
        if s.name not in (semconv.SPAN_ROLLOUT_BATCH, semconv.SPAN_ROLLOUT_TAIL):
            continue
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
            old = found.get(step)
            if old is None:
                found[step] = StepTail(n, ratio, seconds)
                continue
            old.trajectories = None if old.trajectories is None or n is None else old.trajectories + n
            if seconds > old.seconds:
                old.ratio, old.seconds = ratio, seconds
    return found


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


class StepGauges:
    """Gauge values per training step, folded one point at a time: (name, attributes) -> {step: value}.

    A process exports all its gauges at each step boundary with one timestamp; the
    ``verl.training.step`` gauge of the same export names the step (the latest export of a step
    wins). Exports without it (validation before training, processes that log nothing) are left
    out. A process's points come in time order, so one of a later time completes its earlier exports.
    """

    def __init__(self) -> None:
        # (process, export time) -> the export's points not yet placed: (name, attributes, value)
        self._open: dict[tuple[str, int], list[tuple[str, tuple, float]]] = {}
        self._series: dict[tuple[str, tuple], dict[int, tuple[int, float]]] = defaultdict(dict)
        self.holding = 0  # points not yet placed

    def add(self, p: MetricPoint) -> None:
        if p.kind != "gauge" or p.value is None:
            return
        who = exporter(p.resource)
        group = self._open.get((who, p.time_ns))
        if group is None:
            for key in [k for k in self._open if k[0] == who and k[1] < p.time_ns]:
                self._place(key)
            group = self._open[(who, p.time_ns)] = []
        group.append((p.name, attr_key(p.attributes) if p.attributes else (), float(p.value)))
        self.holding += 1

    def _place(self, key: tuple[str, int]) -> None:
        group = self._open.pop(key)
        self.holding -= len(group)
        step = next((v for name, attrs, v in group if name == semconv.M_TRAINING_STEP and not attrs), None)
        if step is None or not math.isfinite(step):
            return
        for name, attrs, value in group:
            if name != semconv.M_TRAINING_STEP:
                values = self._series[(name, attrs)]
                old = values.get(int(step))
                if old is None or key[1] >= old[0]:
                    values[int(step)] = (key[1], value)

    def close(self) -> dict[tuple[str, tuple], dict[int, float]]:
        """Every export placed: the series."""
        for key in list(self._open):
            self._place(key)
        return {k: {n: v for n, (_, v) in values.items()} for k, values in self._series.items()}


def step_gauges(points: Iterable[MetricPoint]) -> dict[tuple[str, tuple], dict[int, float]]:
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


def _cumulative(points: Iterable[MetricPoint], name: str, key: Any) -> dict[tuple, list[tuple[int, float, bool]]]:
    """(process, ``key(point)``) -> [(time, value, delta)] of a sum metric, in time order."""
    out: dict[tuple, list[tuple[int, float, bool]]] = defaultdict(list)
    for p in points:
        if p.name == name and p.kind == "sum" and p.value is not None:
            out[(exporter(p.resource), key(p))].append((p.time_ns, float(p.value), p.temporality == 1))
    for series in out.values():
        series.sort()
    return out


def _grown(series: list[tuple[int, float, bool]], start: int, end: int) -> float:
    """How much a counter grew in (start, end]: cumulative from the last value at or before each
    bound (the first value before the first export), delta by adding up the points in between."""
    if not series:
        return 0.0
    if series[0][2]:
        return sum(v for t, v, _ in series[1:] if start < t <= end)  # the first one is start-up
    before = [v for t, v, _ in series if t <= start]
    upto = [v for t, v, _ in series if t <= end]
    return max(0.0, (upto[-1] if upto else series[0][1]) - (before[-1] if before else series[0][1]))


def overhead(points: list[MetricPoint], steps: list[tuple[int, int, int]]) -> Overhead | None:
    """The telemetry cost of each step; ``steps`` are (step, span start, span end) in ns."""
    own = _cumulative(points, semconv.M_OVERHEAD_CPU_TIME, lambda p: p.attributes.get(semconv.ATTR_OVERHEAD_COMPONENT))
    if not own or not steps:
        return None
    ends: dict[int, int] = {}  # step -> time of the TaskRunner's export at its end
    for p in points:
        runner = p.resource.get(semconv.RES_ROLE) in (semconv.ROLE_TASKRUNNER, None)
        if p.name == semconv.M_TRAINING_STEP and p.value is not None and runner:
            ends.setdefault(int(p.value), p.time_ns)
    # a step ends with the TaskRunner's export of its values, but never after the next step starts
    bounds = [steps[0][1]]
    for i, (n, _, end) in enumerate(steps):
        bound = max(end, ends.get(n, end))
        if i + 1 < len(steps) and steps[i + 1][1] > end:
            bound = min(bound, steps[i + 1][1])
        bounds.append(bound)
    cpu = _cumulative(points, "process.cpu.time", lambda p: attr_key(p.attributes))  # user, system
    reporting = {who for who, _ in own}
    with_cpu = {who for who, _ in cpu} & reporting
    per_step: dict[int, float] = {}
    process_cpu: dict[int, float] = {}
    components: dict[str, float] = defaultdict(float)
    own_with_cpu = 0.0
    for i, (n, _, _) in enumerate(steps):
        lo, hi = bounds[i], bounds[i + 1]
        total = 0.0
        for (who, component), series in own.items():
            grown = _grown(series, lo, hi)
            total += grown
            components[str(component)] += grown
            own_with_cpu += grown if who in with_cpu else 0.0
        per_step[n] = total
        if with_cpu:
            process_cpu[n] = sum(_grown(s, lo, hi) for (who, _), s in cpu.items() if who in with_cpu)
    startup = sum(series[0][1] for series in own.values())
    all_cpu = sum(process_cpu.values())
    share = own_with_cpu / all_cpu if all_cpu > 0 else None
    return Overhead(per_step, dict(components), len(reporting), process_cpu, startup, share)


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
        return {k: series[-1][1] for k, series in _cumulative(points, name, key).items()}

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
        if c.name == semconv.SPAN_ROLLOUT_LLM_CALL
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
