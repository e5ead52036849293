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
5. the slowest step and the slowest trajectory (``run_facts``' rule);
6. what the ops kit's alert rules would have fired on: the guard's built-in rules (the alerts'
   thresholds, counted in steps) run over the values of every step, and the stall alert.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from otel_verl import semconv
from otel_verl.guard.rules import Evaluator, Firing, Rule, load_rules
from otel_verl.instruments import catalog
from otel_verl.offline.otlp_files import LogEntry, MetricPoint, SpanRecord
from otel_verl.offline.run_facts import as_number, exporter

OK, WARN, INFO = "ok", "warn", "info"
VALIDATION_PREFIX = semconv.metric_name("val-core/")  # verl's core validation keys
MAX_SHOWN = 3  # rules, keys or series named in one finding; the section has the rest
STALL_ALERT = "VerlTrainingStalled"
_NAMED = frozenset(spec.name for spec in catalog.ALL)  # otel-verl's own instruments, not verl's keys


@dataclass(frozen=True)
class Finding:
    """One line of the health box."""

    topic: str  # guard, stall, nonfinite, validation, slowest step, slowest trajectory, alerts
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


def _batches(points: Iterable[MetricPoint]) -> list[tuple[float | None, list[MetricPoint]]]:
    """Each export of each process in time order, with the step its ``verl.training.step`` names."""
    groups: dict[tuple[str, int], list[MetricPoint]] = defaultdict(list)
    for p in points:
        groups[(exporter(p.resource), p.time_ns)].append(p)
    out = []
    for key in sorted(groups, key=lambda k: (k[1], k[0])):
        batch = groups[key]
        step = next(
            (p.value for p in batch if p.name == semconv.M_TRAINING_STEP and p.kind == "gauge" and not p.attributes),
            None,
        )
        out.append((step if step is not None and math.isfinite(step) else None, batch))
    return out


def nonfinite_counts(points: Iterable[MetricPoint]) -> dict[str, dict[int | None, int]]:
    """verl key -> {step -> NaN/inf values logged in that step} from ``verl.training.nonfinite``
    (cumulative or delta; None: an export that names no step)."""
    out: dict[str, dict[int | None, int]] = defaultdict(lambda: defaultdict(int))
    last: dict[tuple[str, str], float] = {}
    for step, batch in _batches(points):
        for p in batch:
            if p.name != semconv.M_NONFINITE or p.kind != "sum" or p.value is None or not math.isfinite(p.value):
                continue
            key = str(p.attributes.get(semconv.ATTR_METRIC_KEY, "?"))
            who = exporter(p.resource)
            grown = p.value if p.temporality == 1 else p.value - last.get((who, key), 0.0)
            if p.temporality != 1:
                last[(who, key)] = p.value
            if grown > 0:
                out[key][None if step is None else int(step)] += int(grown)
    return {k: dict(v) for k, v in out.items()}


def validation_scores(points: Iterable[MetricPoint], first_step_ns: int | None) -> dict[str, dict[int, float]]:
    """verl's ``val-core/...`` values per step; the validation before training is step 0 (its
    export names no step: it comes before the first step's span)."""
    out: dict[str, dict[int, float]] = defaultdict(dict)
    for step, batch in _batches(points):
        for p in batch:
            if p.kind != "gauge" or p.value is None or not p.name.startswith(VALIDATION_PREFIX) or p.attributes:
                continue
            if step is None:
                if first_step_ns is not None and p.time_ns > first_step_ns:
                    continue  # an export between steps that names none: not placeable
                n = 0
            else:
                n = int(step)
            out[logged_key(p.name)][n] = float(p.value)
    return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}


def per_step_values(gauges: Mapping[tuple[str, tuple], Mapping[int, float]]) -> dict[int, dict[str, float]]:
    """step -> {verl key: value} of the forwarded ``verl.<key>`` gauges (``run_facts.step_gauges``)."""
    out: dict[int, dict[str, float]] = defaultdict(dict)
    for (name, attrs), values in gauges.items():
        if attrs or name in _NAMED or not name.startswith(semconv.METRIC_PREFIX):
            continue
        for step, value in values.items():
            out[step][logged_key(name)] = value
    return dict(sorted(out.items()))


def alert_hits(
    values: Mapping[int, Mapping[str, float]],
    nonfinite: Mapping[str, Mapping[int | None, int]],
    stalled_step: int | None,
    stalled: bool,
    rules: Sequence[Rule] | None = None,
) -> list[AlertHit]:
    """The ops kit's alerts the run's values would have fired: its guard rules over every step
    (with NaN for each key at the steps it was logged non-finite), the first firing of each alert,
    and the stall alert when the run stalled."""
    chosen = tuple(r for r in (load_rules() if rules is None else rules) if r.alert)
    bad: dict[int, dict[str, float]] = defaultdict(dict)
    for key, steps in nonfinite.items():
        for step in steps:
            if step is not None:
                bad[step][key] = math.nan
    evaluator = Evaluator(chosen)
    first: dict[str, Firing] = {}
    for step in sorted(set(values) | set(bad)):
        for firing in evaluator.step({**values.get(step, {}), **bad.get(step, {})}, step):
            first.setdefault(str(firing.rule.alert), firing)
    hits = [AlertHit(alert, f.rule.name, f.step, f.describe()) for alert, f in first.items()]
    if stalled:
        hits.append(AlertHit(STALL_ALERT, "", stalled_step, "no training step finished for the stall limit"))
    return hits


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
            f"{rule} fired {len(fs)} time{'s' if len(fs) > 1 else ''}{_steps_text(x.step for x in fs)} "
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
            text += f" -> {values[last]:.4g} at step {last} ({len(steps)} validations)"
        parts.append(text)
    more = f"; and {len(scores) - MAX_SHOWN} more" if len(scores) > MAX_SHOWN else ""
    return Finding("validation score", INFO, "; ".join(parts) + more, "curves")


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

    @property
    def healthy(self) -> bool:
        return all(f.level != WARN for f in self.findings)


def health(
    spans: Sequence[SpanRecord],
    records: Sequence[LogEntry],
    points: Sequence[MetricPoint],
    gauges: Mapping[tuple[str, tuple], Mapping[int, float]],
    stalled: list[LogEntry],
    stall_processes: int,
    first_step_ns: int | None,
    slowest: Sequence[Finding] = (),
) -> Health:
    """The run's health findings in their order (``slowest``: the slowest step's and trajectory's,
    worded by the caller, which knows the steps)."""
    firings = guard_firings(spans, records)
    counts = nonfinite_counts(points)
    scores = validation_scores(points, first_step_ns)
    stall_step = as_number(stalled[0].attributes.get(semconv.ATTR_STEP)) if stalled else None
    hits = alert_hits(per_step_values(gauges), counts, None if stall_step is None else int(stall_step), bool(stalled))
    findings = [
        _guard_finding(firings),
        _stall_finding(stalled, stall_processes),
        _nonfinite_finding(counts),
        _validation_finding(scores),
        *slowest,
        _alerts_finding(hits),
    ]
    return Health(findings, firings, counts, scores, hits)
