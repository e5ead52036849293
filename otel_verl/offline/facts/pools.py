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
