"""The per-step span budget (``otel_verl.hooks.rollout.state``: ``OTEL_VERL_ROLLOUT_SPANS_PER_STEP``,
per (submit step, validate) group): only kept trajectories' trees are exported, histograms count all
(which ones are kept: ``test_keep``).
"""

from __future__ import annotations

import asyncio
import json

from verl_cpu_harness.agent_loop import by_name, hist, llm_calls, make_batch, make_worker

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
    assert len(llm_calls(captured)) == 6  # only under sampled trajectories
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


def test_what_runs_inside_a_trajectory_follows_whether_it_is_recorded(captured, monkeypatch):
    """A recorded trajectory (any budget but 0) hands its reward worker a sampled, deferred carrier
    and records user spans (held until its tree is decided); one that is not (budget 0) an
    unsampled carrier, so nothing it causes is recorded; the step travels either way."""
    from otel_verl import propagation
    from otel_verl.hooks.rollout import trajectory
    from otel_verl.process.state import PROCESS

    tracer = PROCESS.telemetry.tracer_provider.get_tracer("user")
    seen = []
    for budget in ("2", "0"):
        monkeypatch.setenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP", budget)
        settings.cache_clear()
        args, kwargs = (None, {"step": 5, "sample_index": 0}), {"agent_name": "a"}
        st = trajectory._trajectory_start(args, kwargs, None)
        with tracer.start_as_current_span(f"user-{budget}") as user:
            seen.append((user.is_recording(), propagation.carrier_value(defer=st.rec is not None)))
        trajectory._trajectory_end(st, None, None)
    monkeypatch.delenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP")
    settings.cache_clear()
    (recorded_user, recorded_carrier), (unrecorded_user, unrecorded_carrier) = seen
    assert recorded_user and not unrecorded_user
    flags = [int(json.loads(c)["traceparent"].rsplit("-", 1)[1], 16) for c in (recorded_carrier, unrecorded_carrier)]
    assert [f & 1 for f in flags] == [1, 0]  # the W3C sampled flag
    assert [propagation.is_deferred(c) for c in (recorded_carrier, unrecorded_carrier)] == [True, False]
    assert "verl.step=5" in unrecorded_carrier  # the step still travels, for user code
    names = sorted(s.name for s in captured.finished() if s.name != semconv.SPAN_ROLLOUT_TAIL)
    assert names == ["user-2", semconv.SPAN_ROLLOUT_TRAJECTORY], names  # the recorded one's tree, whole
