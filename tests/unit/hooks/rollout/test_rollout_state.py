"""The per-step span budget (``otel_verl.hooks.rollout.state``: ``OTEL_VERL_ROLLOUT_SPANS_PER_STEP``,
per (submit step, validate) group): only sampled trajectories get spans, histograms count all.
"""

from __future__ import annotations

import asyncio
import json

from rollout_helpers import by_name, hist, make_batch, make_worker

from otel_verl import semconv
from otel_verl.config import settings


def test_sampling_limits_spans_but_histograms_count_every_trajectory(captured, monkeypatch):
    monkeypatch.setenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP", "3")
    settings.cache_clear()
    try:
        worker = make_worker()
        asyncio.run(worker.generate_sequences(make_batch(step=1, prompts=3)))  # 6 trajectories
        asyncio.run(worker.generate_sequences(make_batch(step=2, prompts=3)))
    finally:
        monkeypatch.delenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP")
        settings.cache_clear()
    trajs = by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY)
    steps = [t.attributes[semconv.ATTR_ROLLOUT_SUBMIT_STEP] for t in trajs]
    assert sorted(steps) == [1, 1, 1, 2, 2, 2]  # the budget is per step
    assert len(by_name(captured, semconv.SPAN_ROLLOUT_LLM_CALL)) == 6  # only under sampled trajectories
    (duration,) = hist(captured, semconv.M_ROLLOUT_TRAJECTORY_DURATION)
    assert duration.count == 12
    (llm,) = hist(captured, semconv.M_ROLLOUT_LLM_CALL_DURATION)
    assert llm.count == 12


def test_zero_budget_means_no_spans(captured, monkeypatch):
    monkeypatch.setenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP", "0")
    settings.cache_clear()
    try:
        asyncio.run(make_worker().generate_sequences(make_batch()))
    finally:
        monkeypatch.delenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP")
        settings.cache_clear()
    assert not [s for s in captured.finished() if s.name.startswith("verl.rollout.")]
    (duration,) = hist(captured, semconv.M_ROLLOUT_TRAJECTORY_DURATION)
    assert duration.count == 4


def test_what_runs_inside_an_unsampled_trajectory_is_not_recorded_either(captured, monkeypatch):
    """The budget bounds every span a trajectory causes: user spans in the agent loop and the
    reward worker's span (its parent comes through the carrier) follow an unsampled parent."""
    from otel_verl import propagation
    from otel_verl.hooks.rollout import trajectory
    from otel_verl.process.state import PROCESS

    monkeypatch.setenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP", "1")
    settings.cache_clear()
    tracer = PROCESS.telemetry.tracer_provider.get_tracer("user")
    seen = []
    try:
        for i in range(2):
            args, kwargs = (None, {"step": 5, "sample_index": i}), {"agent_name": "a"}
            st = trajectory._trajectory_start(args, kwargs, None)
            with tracer.start_as_current_span(f"user-{i}") as user:
                seen.append((user.is_recording(), propagation.carrier_value()))
            trajectory._trajectory_end(st, None, None)
    finally:
        monkeypatch.delenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP")
        settings.cache_clear()
    (sampled_user, sampled_carrier), (unsampled_user, unsampled_carrier) = seen
    assert sampled_user and not unsampled_user
    flags = [int(json.loads(c)["traceparent"].rsplit("-", 1)[1], 16) for c in (sampled_carrier, unsampled_carrier)]
    assert [f & 1 for f in flags] == [1, 0]  # the W3C sampled flag
    assert "verl.step=5" in unsampled_carrier  # the step still travels, for user code
    names = sorted(s.name for s in captured.finished() if s.name != semconv.SPAN_ROLLOUT_TAIL)
    assert names == ["user-0", semconv.SPAN_ROLLOUT_TRAJECTORY], names
