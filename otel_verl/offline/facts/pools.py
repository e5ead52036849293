"""Busy and idle seconds of each rollout replica in a time window, from the LLM-call spans.

The agent-loop workers make a span per engine call (``semconv.is_llm_call``), with the replica
that served it (``verl.rollout.server.id``). A replica is busy while at least one call is in
flight on it (the union of its calls' intervals, clipped to the window); idle the rest. Several
agent-loop workers share a replica, which is why this is computed over all processes' spans
and not in any one of them. The live per-role figures are ``verl.pool.time`` (hooks/accounting.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from otel_verl import semconv
from otel_verl.offline.facts.time_went import union_ns
from otel_verl.offline.folds import StepFact, StepSpans
from otel_verl.offline.otlp_files import SpanRecord


def replica_busy_seconds(spans: Iterable[SpanRecord], start_ns: int, end_ns: int) -> dict[str, float]:
    """Replica (server id) -> seconds with a call in flight within [start_ns, end_ns]."""
    calls: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for s in spans:
        server = s.attributes.get(semconv.ATTR_ROLLOUT_SERVER_ID)
        if not isinstance(server, str) or not semconv.is_llm_call(s.name, s.attributes):
            continue
        lo, hi = max(s.start_ns, start_ns), min(s.end_ns, end_ns)
        if hi > lo:
            calls[server].append((lo, hi))
    return {server: union_ns(iv) / 1e9 for server, iv in calls.items()}


def replica_idle_ratio(
    spans: Iterable[SpanRecord], start_ns: int, end_ns: int, replicas: Iterable[str]
) -> dict[str, float]:
    """Replica -> share of the window with no call in flight (1.0 for a replica that served none)."""
    window = (end_ns - start_ns) / 1e9
    busy = replica_busy_seconds(spans, start_ns, end_ns)
    return {r: 1.0 - busy.get(r, 0.0) / window if window > 0 else 0.0 for r in replicas}


def pool_states(step_span: SpanRecord) -> dict[str, dict[str, float]]:
    """Role -> state -> seconds of the step: the ``verl.pool.<role>.<state>`` attributes
    (``hooks/accounting.py``: busy, waiting and idle add up to the step for each role)."""
    out: dict[str, dict[str, float]] = {}
    for key, value in step_span.attributes.items():
        if not key.startswith(semconv.ATTR_POOL_PREFIX) or key in (semconv.ATTR_POOL_ROLE, semconv.ATTR_POOL_STATE):
            continue
        role, _, state = key[len(semconv.ATTR_POOL_PREFIX) :].rpartition(".")
        if role and isinstance(value, int | float) and not isinstance(value, bool):
            out.setdefault(role, {})[state] = float(value)
    return out


def replicas(spans: Iterable[SpanRecord]) -> list[str]:
    """The rollout replicas (server ids) the LLM-call spans among ``spans`` name, sorted."""
    calls = (s for s in spans if semconv.is_llm_call(s.name, s.attributes))
    found = {s.attributes.get(semconv.ATTR_ROLLOUT_SERVER_ID) for s in calls}
    return sorted(r for r in found if isinstance(r, str))


def _replica_idle(step: StepSpans) -> dict[str, float]:
    return replica_idle_ratio(step.members, step.span.start_ns, step.span.end_ns, replicas(step.members))


# The step's facts (``StepFact.of(row)``): each pool role's busy / waiting / idle seconds (its
# step span's ``verl.pool.*``), each rollout replica's idle share by its own LLM calls.
STATES: StepFact[dict[str, dict[str, float]]] = StepFact("pools", lambda step: pool_states(step.span))
REPLICA_IDLE: StepFact[dict[str, float]] = StepFact("replica_idle", _replica_idle)
