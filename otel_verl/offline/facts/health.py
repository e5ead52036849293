"""Is the run healthy: the first thing ``summary`` and ``report`` say about a run, defined once.

``health(...)`` returns the findings in the order both tools show them, each with the report
section that has the details (its ``anchor``):

1. the guard's firings per rule (``verl.guard.triggered`` span events and log records), or that
   no rule fired;
2. stalls (the stall doctor's ``verl.training.stalled`` records);
3. non-finite values verl logged (``verl.training.nonfinite{verl.metric.key}``: verl's NaN and
   infinities are counted there, not exported as gauges);
4. the validation score over steps (verl's ``val-core/...`` keys, the validation before training
   included);
5. generation health: each degenerate kind's share of the training responses and its worst step
   (``facts.generation``), a finding when the repetitive or the empty share is above the alert's
   threshold;
6. goodput: each role's share of the run's time productive, overhead, idle and wasted
   (``facts.goodput``);
7. the slowest step and the slowest trajectory (``slowest``' rule);
8. what the ops kit's alert rules would have fired on: the guard's built-in rules (the alerts'
   thresholds, counted in steps) run over the values of every step, and the stall alert.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from otel_verl import semconv
from otel_verl.hooks.guard.rules import Evaluator, Firing, Rule, load_rules
from otel_verl.instruments import catalog
from otel_verl.offline.bounded import StepSeries, folded
from otel_verl.offline.exports import GroupPoint
from otel_verl.offline.facts import generation as gen
from otel_verl.offline.facts.goodput import Goodput
from otel_verl.offline.folds import Fold, Steps
from otel_verl.offline.otlp_files import LogEntry, SpanRecord
from otel_verl.offline.values import as_number

OK, WARN, INFO = "ok", "warn", "info"
VALIDATION_PREFIX = semconv.metric_name("val-core/")  # verl's core validation keys
MAX_SHOWN = 3  # rules, keys or series named in one finding; the section has the rest
STALL_ALERT = "VerlTrainingStalled"
MAX_NAMES = 65_536  # metric names whose verl key a ``HealthFold`` remembers
_UNKNOWN = object()
_NAMED = frozenset(spec.name for spec in catalog.ALL)  # otel-verl's own instruments, not verl's keys


@dataclass(frozen=True)
class Finding:
    """One line of the health box."""

    topic: str  # guard, stall, nonfinite, validation, generation, goodput, slowest step, slowest trajectory, alerts
    level: str  # OK, WARN or INFO
    text: str
    anchor: str  # the report section with the details ("" when there is none)


@dataclass(frozen=True)
class GuardFiring:
    rule: str
    key: str
    value: float | None
    step: int | None
    action: str


@dataclass(frozen=True)
class AlertHit:
    """An alert of the ops kit that the run's values would have fired, with the first step."""

    alert: str
    rule: str  # the guard rule with the alert's threshold ("" for the stall alert)
    step: int | None
    text: str


def logged_key(name: str) -> str:
    """The verl key a ``verl.<key>`` gauge carries, as verl wrote it (``/`` for ``.``; characters
    ``semconv.metric_name`` replaced stay replaced)."""
    return name[len(semconv.METRIC_PREFIX) :].replace(".", "/") if name.startswith(semconv.METRIC_PREFIX) else name


def guard_firings(spans: Iterable[SpanRecord], records: Iterable[LogEntry]) -> list[GuardFiring]:
    """The guard's firings, each once (span event and log record of the same firing), by step."""
    seen: dict[tuple, GuardFiring] = {}
    found = [
        a for s in spans if s.name == semconv.SPAN_GUARD for a in s.event_attributes(semconv.EVENT_GUARD_TRIGGERED)
    ]
    found += [r.attributes for r in records if r.event_name == semconv.EVENT_GUARD_TRIGGERED]
    for a in found:
        step = as_number(a.get(semconv.ATTR_STEP))
        firing = GuardFiring(
            rule=str(a.get(semconv.ATTR_GUARD_RULE, "?")),
            key=str(a.get(semconv.ATTR_METRIC_KEY, "?")),
            value=as_number(a.get(semconv.ATTR_GUARD_VALUE)),
            step=None if step is None else int(step),
            action=str(a.get(semconv.ATTR_GUARD_ACTION, "?")),
        )
        seen.setdefault((firing.rule, firing.key, firing.step), firing)
    return sorted(seen.values(), key=lambda f: (f.step if f.step is not None else -1, f.rule, f.key))


class HealthFold(Fold):
    """The health facts of the metric points, folded one export at a time (a listener of
    ``exports.StepGauges``, which places each export at the step its ``verl.training.step`` names):

    - ``nonfinite``: verl key -> {step -> NaN/inf values logged in that step} from
      ``verl.training.nonfinite`` (cumulative or delta; None: an export that names no step);
    - ``validation``: verl's ``val-core/...`` values per step (``bounded.StepSeries``); the
      validation before training is step 0 (its export names no step: it comes before
      ``first_step_ns``, the first step's span);
    - the ops kit's alerts the values would have fired: its guard rules over every step in step
      order, with NaN for each key at the steps it was logged non-finite. A step is evaluated once
      ``ALERT_WINDOW`` later steps were placed, or at ``close``.
    """

    ALERT_WINDOW = 64
    SPANS = frozenset({semconv.SPAN_GUARD})  # the guard's spans and records: its firings
    EVENTS = frozenset({semconv.EVENT_GUARD_TRIGGERED})

    def __init__(self, first_step_ns: int | None = None, rules: Sequence[Rule] | None = None) -> None:
        self.first_step_ns = first_step_ns
        self.nonfinite: dict[str, dict[int | None, int]] = defaultdict(lambda: defaultdict(int))
        self.validation: dict[str, StepSeries] = defaultdict(StepSeries)
        self._last: dict[tuple[str, str], float] = {}
        self._evaluator = Evaluator(tuple(r for r in (load_rules() if rules is None else rules) if r.alert))
        self._pending: dict[int, dict[str, float]] = {}  # step -> values not yet evaluated
        self._first: dict[str, Firing] = {}  # alert -> its first firing
        self._verl_keys: dict[str, str | None] = {}  # metric name -> ``_verl_key``
        self.guards: list[SpanRecord] = []
        self.guard_records: list[LogEntry] = []

    def on_span(self, s: SpanRecord) -> None:
        self.guards.append(s)

    def on_log(self, r: LogEntry) -> None:
        self.guard_records.append(r)

    def on_steps(self, steps: Steps) -> None:
        self.first_step_ns = steps.first_ns

    def _verl_key(self, name: str) -> str | None:
        """The verl key a gauge of verl's carries (``logged_key``); None for otel-verl's own and
        other metrics. Remembered per name (a run has a few hundred; a hostile file's are bounded)."""
        key = logged_key(name) if name not in _NAMED and name.startswith(semconv.METRIC_PREFIX) else None
        if len(self._verl_keys) < MAX_NAMES:
            self._verl_keys[name] = key
        return key

    def export(self, who: str, time_ns: int, step: int | None, group: list[GroupPoint]) -> None:
        values: dict[str, float] = {}
        bad: dict[str, float] = {}
        for name, attrs, value, kind, temporality in group:
            if kind == "sum":
                if name == semconv.M_NONFINITE and math.isfinite(value):
                    self._nonfinite(who, attrs, value, temporality, step, bad)
            elif attrs:
                continue
            elif name.startswith(VALIDATION_PREFIX):
                if step is not None:
                    self.validation[logged_key(name)].add(step, value, time_ns)
                elif self.first_step_ns is None or time_ns <= self.first_step_ns:
                    self.validation[logged_key(name)].add(0, value, time_ns)
                # else: an export between steps that names none: not placeable
            if step is not None:
                key = self._verl_keys.get(name, _UNKNOWN)
                if key is _UNKNOWN:
                    key = self._verl_key(name)
                if key is not None:
                    values[key] = value
        if step is None or not (values or bad):
            return
        pending = self._pending.setdefault(step, {})
        pending.update(values)
        pending.update(bad)
        while len(self._pending) > self.ALERT_WINDOW:
            self._evaluate(min(self._pending))

    def _nonfinite(
        self, who: str, attrs: tuple, value: float, temporality: int, step: int | None, bad: dict[str, float]
    ) -> None:
        key = dict(attrs).get(semconv.ATTR_METRIC_KEY, "?")
        grown = value if temporality == 1 else value - self._last.get((who, key), 0.0)
        if temporality != 1:
            self._last[(who, key)] = value
        if grown > 0:
            self.nonfinite[key][step] += int(grown)
            if step is not None:
                bad[key] = math.nan  # the NaN verl logged, for the alert rules

    def _evaluate(self, step: int) -> None:
        for firing in self._evaluator.step(self._pending.pop(step), step):
            self._first.setdefault(str(firing.rule.alert), firing)

    def close(self) -> tuple[dict[str, dict[int | None, int]], dict[str, dict[int, float]], list[AlertHit]]:
        """Every export folded: the non-finite counts, the validation scores and the alerts that fired."""
        for step in sorted(self._pending):
            self._evaluate(step)
        hits = [AlertHit(alert, f.rule.name, f.step, f.describe()) for alert, f in self._first.items()]
        counts = {k: dict(v) for k, v in self.nonfinite.items()}
        scores = {k: v.close() for k, v in sorted(self.validation.items())}
        return counts, scores, hits


def _steps_text(steps: Iterable[int | None]) -> str:
    shown = sorted(s for s in steps if s is not None)
    if not shown:
        return ""
    text = ", ".join(str(s) for s in shown[:MAX_SHOWN]) + (", ..." if len(shown) > MAX_SHOWN else "")
    return f" at step{'s' if len(shown) > 1 else ''} {text}"


def _guard_finding(firings: list[GuardFiring]) -> Finding:
    if not firings:
        return Finding("guard", OK, "no guard rule fired", "guard")
    by_rule: dict[str, list[GuardFiring]] = defaultdict(list)
    for f in firings:
        by_rule[f.rule].append(f)
    parts = []
    for rule, fs in list(by_rule.items())[:MAX_SHOWN]:
        f = fs[0]
        value = "" if f.value is None else f"={f.value:.4g}"
        parts.append(
            f"{rule} fired {len(fs)} time{'s' if len(fs) > 1 else ''}{_steps_text({x.step for x in fs})} "
            f"({f.key}{value}; action {f.action})"
        )
    more = f"; and {len(by_rule) - MAX_SHOWN} more rules" if len(by_rule) > MAX_SHOWN else ""
    return Finding("guard", WARN, "; ".join(parts) + more, "guard")


def _stall_finding(stalled: list[LogEntry], processes: int) -> Finding:
    if not stalled:
        return Finding("stall", OK, "no stall reported", "")
    a = stalled[0].attributes
    step, seconds = as_number(a.get(semconv.ATTR_STEP)), as_number(a.get(semconv.ATTR_STALL_SECONDS))
    at = "" if step is None else f" at step {int(step)}"
    waited = "" if seconds is None else f": no training step finished for {seconds:.0f} s"
    episodes = f" ({len(stalled)} episodes)" if len(stalled) > 1 else ""
    said = (
        f"{processes} processes reported where they were"
        if processes > 1
        else "1 process reported where it was"
        if processes
        else "no process reported its stacks"
    )
    return Finding("stall", WARN, f"stalled{at}{waited}{episodes}; {said}", "stall")


def _nonfinite_finding(counts: Mapping[str, Mapping[int | None, int]]) -> Finding:
    if not counts:
        return Finding("non-finite values", OK, "every value verl logged was finite", "")
    parts = [f"{key} {sum(steps.values())}x{_steps_text(steps)}" for key, steps in sorted(counts.items())[:MAX_SHOWN]]
    more = f"; and {len(counts) - MAX_SHOWN} more keys" if len(counts) > MAX_SHOWN else ""
    return Finding("non-finite values", WARN, "NaN or infinite: " + "; ".join(parts) + more, "guard")


def _validation_finding(scores: Mapping[str, Mapping[int, float]]) -> Finding:
    if not scores:
        return Finding("validation score", INFO, "not logged by this run (no val-core/... values)", "")
    parts = []
    for key, values in list(scores.items())[:MAX_SHOWN]:
        steps = list(values)
        first, last = steps[0], steps[-1]
        text = f"{key} {values[first]:.4g} at step {first}"
        if last != first:
            text += f" -> {values[last]:.4g} at step {last} ({folded(values)} validations)"
        parts.append(text)
    more = f"; and {len(scores) - MAX_SHOWN} more" if len(scores) > MAX_SHOWN else ""
    return Finding("validation score", INFO, "; ".join(parts) + more, "curves")


GENERATION = "generation health"
GENERATION_ANCHOR = "generation"  # the report's section with the table


def _kinds_text(shares: dict[str, gen.KindShare]) -> str:
    return ", ".join(
        f"{kind} {gen.percent(k.share)}" + (f" (worst: step {k.worst_step}, {gen.percent(k.worst)})" if k.worst else "")
        for kind, k in shares.items()
    )


def _generation_finding(g: gen.Generation | None) -> Finding:
    """Each kind's share of the training responses and its worst step; a finding when a kind the
    alert watches is above its threshold; the validation's shares apart, never a finding."""
    if g is None:
        return Finding(GENERATION, INFO, f"not measured by this run (no {semconv.M_ROLLOUT_DEGENERATE_RATIO})", "")
    if g.training:
        steps = max(k.steps for k in g.training.values())
        text = f"training responses over {steps} step{'s' if steps != 1 else ''}: {_kinds_text(g.training)}"
    else:
        text = "no training responses measured"
    if g.validation:
        text += f"; validation, apart: {_kinds_text(g.validation)}"
    above = g.alerting()
    if above:
        at = gen.percent(gen.ALERT_THRESHOLD)
        return Finding(
            GENERATION,
            WARN,
            f"{' and '.join(above)} above {at}, the threshold of {gen.ALERT}; {text}",
            GENERATION_ANCHOR,
        )
    return Finding(GENERATION, OK if g.training else INFO, text, GENERATION_ANCHOR)


GOODPUT = "goodput"
GOODPUT_ANCHOR = "goodput"  # the report's section with the tables


def _goodput_finding(g: Goodput | None) -> Finding:
    """Each role's shares of the run's time (``facts.goodput``): a figure, never a finding."""
    if g is None:
        return Finding(GOODPUT, INFO, f"not measured by this run (no {semconv.M_GOODPUT_TIME})", "")
    return Finding(GOODPUT, INFO, g.line(), GOODPUT_ANCHOR)


def _alerts_finding(hits: list[AlertHit]) -> Finding:
    if not hits:
        return Finding("alert rules", OK, "none would have fired (the ops kit's rules over this run's values)", "guard")
    parts = [f"{h.alert}{'' if h.step is None else f' from step {h.step}'}" for h in hits[:MAX_SHOWN]]
    more = f"; and {len(hits) - MAX_SHOWN} more" if len(hits) > MAX_SHOWN else ""
    return Finding("alert rules", WARN, "would have fired: " + ", ".join(parts) + more, "guard")


@dataclass(frozen=True)
class Health:
    findings: list[Finding]
    firings: list[GuardFiring]
    nonfinite: dict[str, dict[int | None, int]]
    validation: dict[str, dict[int, float]]
    alerts: list[AlertHit]
    generation: gen.Generation | None = None  # each degenerate kind's share (offline.generation)
    goodput: Goodput | None = None  # each role's time by bucket (offline.goodput)

    @property
    def healthy(self) -> bool:
        return all(f.level != WARN for f in self.findings)


def health(
    spans: Sequence[SpanRecord],
    records: Sequence[LogEntry],
    fold: HealthFold,
    stalled: list[LogEntry],
    stall_processes: int,
    slowest: Sequence[Finding] = (),
    generation: gen.GenerationFold | None = None,
    goodput: Goodput | None = None,
) -> Health:
    """The run's health findings in their order (``fold``, ``generation``: the metric points'
    facts, every point folded; ``slowest``: the slowest step's and trajectory's, worded by the
    caller, which knows the steps; ``goodput``: the run's account, closed by the caller, which
    knows the time outside the steps)."""
    firings = guard_firings(spans, records)
    counts, scores, hits = fold.close()
    shares = generation.close() if generation is not None else None
    if stalled:
        stall_step = as_number(stalled[0].attributes.get(semconv.ATTR_STEP))
        step = None if stall_step is None else int(stall_step)
        hits.append(AlertHit(STALL_ALERT, "", step, "no training step finished for the stall limit"))
    findings = [
        _guard_finding(firings),
        _stall_finding(stalled, stall_processes),
        _nonfinite_finding(counts),
        _validation_finding(scores),
        _generation_finding(shares),
        _goodput_finding(goodput),
        *slowest,
        _alerts_finding(hits),
    ]
    return Health(findings, firings, counts, scores, hits, shares, goodput)
