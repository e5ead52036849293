"""CPU per LLM call of the GenAI client metrics (``gen_ai.client.operation.duration``,
``gen_ai.client.token.usage``) next to ``verl.rollout.llm_call.duration`` alone, in one process.

otel-verl's real recording path (``hooks/rollout/llm._record``: the call's values queued on the
agent-loop worker's event loop as one entry of ``instruments.deferred``) and the real SDK
(``MeterProvider``, its default trace-based exemplar filter, one in-memory reader): per call, the
CPU on the event loop to queue the values (``_record``), and in the collecting thread to record
them into the SDK (``Deferred.flush``), for a call that feeds only ``verl.rollout.llm_call.duration``
(what a call cost before) and one that feeds the GenAI metrics too (3 more values). The thread's CPU
clock (``time.thread_time_ns``), ``--n`` calls per sample (fewer than the queue's bound), cases
alternating, median of ``--rounds``; the garbage collector is off while timed.

``PYTHONPATH=$PWD python bench/genai_metrics_cost.py [--rounds 15] [--n 5000]``
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time

from _util import machine, table
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_verl import semconv
from otel_verl.hooks.rollout import llm
from otel_verl.hooks.rollout import state as rs
from otel_verl.instruments import deferred
from otel_verl.instruments.rollout import RolloutMetrics


def _calls(n: int, gen_ai: rs.GenAIAttributes | None) -> list[rs.LLMCall]:
    return [rs.LLMCall(None, 0.0, {semconv.ATTR_ROLLOUT_VALIDATE: False}, None, gen_ai, 512) for _ in range(n)]


def _sample(inst: RolloutMetrics, reader: InMemoryMetricReader, calls: list[rs.LLMCall]) -> tuple[float, float]:
    """ns per call: queuing on the event loop, recording at collection (the garbage collector off
    while timed: its passes over ``n`` queued entries would swamp the per-call difference)."""
    gc.collect()
    gc.disable()
    try:
        start = time.thread_time_ns()
        for call in calls:
            llm._record(call, 1.5, semconv.STATUS_OK, None, 256)
        queued = time.thread_time_ns()
        inst.deferred.flush()  # what the collection's callback does first
        flushed = time.thread_time_ns()
    finally:
        gc.enable()
    reader.get_metrics_data()  # the cumulative points, as an export would read them (not timed)
    return (queued - start) / len(calls), (flushed - queued) / len(calls)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--n", type=int, default=5_000)
    ns = parser.parse_args(argv)
    if ns.n >= deferred.MAX_QUEUED:  # a full queue is recorded while queuing: no longer two parts
        parser.error(f"--n must be under {deferred.MAX_QUEUED}")
    reader = InMemoryMetricReader()
    inst = RolloutMetrics(MeterProvider(metric_readers=[reader]).get_meter(semconv.SCOPE))
    rs.metrics = lambda: inst  # _record's instruments: this meter's
    base = {
        semconv.GEN_AI_OPERATION_NAME: semconv.GEN_AI_OPERATION_TEXT_COMPLETION,
        semconv.GEN_AI_PROVIDER_NAME: "vllm",
        semconv.GEN_AI_REQUEST_MODEL: "Qwen/Qwen3-8B",
    }
    cases = {
        "verl.rollout.llm_call.duration only (before)": _calls(ns.n, None),
        "+ gen_ai.client.operation.duration, token.usage x2": _calls(ns.n, rs.GenAIAttributes(base)),
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for calls in cases.values():  # warm-up: every series exists before the timing
        _sample(inst, reader, calls[:100])
    for _ in range(ns.rounds):
        for name, calls in cases.items():
            samples[name].append(_sample(inst, reader, calls))
    rows = []
    first = None
    for name, got in samples.items():
        loop = statistics.median(s[0] for s in got) / 1000
        collect = statistics.median(s[1] for s in got) / 1000
        added = "" if first is None else f"{loop - first[0]:+.2f} / {collect - first[1]:+.2f}"
        first = first or (loop, collect)
        rows.append([name, f"{loop:.2f}", f"{collect:.2f}", added])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"# bench/genai_metrics_cost.py  ({machine()}; n={ns.n}, rounds={ns.rounds}; load average {load})")
    header = ["values per LLM call", "event loop us/call", "collecting thread us/call", "added (loop / collect)"]
    print(table(header, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
