"""Trajectory spans (``otel_verl.hooks.rollout.trajectory``) with verl's real
``AgentLoopWorker._run_agent_loop`` / ``_compute_score`` and ``ToolAgentLoop._call_tool``: tool
spans, failures, the long tail (v0 batch span event, v1 tail span), wrappers stay coroutines.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from opentelemetry import trace
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, register
from verl.workers.rollout.llm_server import LLMServerClient
from verl_cpu_harness.agent_loop import EchoAgentLoop, by_name, hist, make_batch, make_worker

from otel_verl import propagation, semconv
from otel_verl.process.state import PROCESS


@register("otel_tool_agent")
class ToolCallingAgentLoop(EchoAgentLoop):
    """One LLM turn, then two calls through verl's real ``ToolAgentLoop._call_tool``: one tool
    that works, one that raises (verl turns that into an error text with reward 0)."""

    async def run(self, sampling_params, **kwargs):
        from types import SimpleNamespace

        from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
        from verl.experimental.agent_loop.tool_parser import FunctionCall
        from verl.tools.function_tool import FunctionTool

        async def add(x: int, y: int) -> tuple[str, float, dict]:
            return f"{x + y}", 0.5, {}

        async def broken() -> str:
            raise ValueError("tool down")

        tools = {
            name: FunctionTool(name=name, fn=fn, tool_schema=None, is_async=True)
            for name, fn in (("add", add), ("broken", broken))
        }
        loop = SimpleNamespace(tools=tools, max_tool_response_length=100, tool_response_truncate_side="right")
        agent_data = SimpleNamespace()
        ok = await ToolAgentLoop._call_tool(
            loop, FunctionCall(name="add", arguments='{"x": 2, "y": 3}', tool_call_id="call-1"), {}, agent_data
        )
        failed = await ToolAgentLoop._call_tool(loop, FunctionCall(name="broken", arguments="{}"), {}, agent_data)
        assert ok[0].text == "5" and ok[1] == 0.5 and failed[1] == 0.0  # verl's own results, unchanged
        return await super().run(sampling_params, **kwargs)


def test_tool_calls_are_spans_under_their_trajectory_without_arguments_or_results(captured):
    worker = make_worker()
    batch = make_batch(prompts=1, n=2, agent_name=np.array(["otel_tool_agent"] * 2, dtype=object))
    asyncio.run(worker.generate_sequences(batch))
    trajs = {t.context.span_id: t for t in by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY)}
    assert len(trajs) == 2
    adds = by_name(captured, semconv.SPAN_ROLLOUT_TOOL_PREFIX + "add")
    broken = by_name(captured, semconv.SPAN_ROLLOUT_TOOL_PREFIX + "broken")
    assert len(adds) == len(broken) == 2
    for span in adds + broken:
        assert span.parent.span_id in trajs  # one per call, under the trajectory that made it
        assert span.attributes[semconv.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert {s.attributes[semconv.GEN_AI_TOOL_NAME] for s in adds} == {"add"}
    assert {s.attributes[semconv.GEN_AI_TOOL_CALL_ID] for s in adds} == {"call-1"}
    assert {s.attributes[semconv.ATTR_ROLLOUT_TOOL_REWARD] for s in adds} == {0.5}
    assert {s.attributes[semconv.ATTR_ROLLOUT_TOOL_REWARD] for s in broken} == {0.0}
    for span in adds + broken:  # arguments and results may hold user data: never recorded
        assert not any(v in repr(dict(span.attributes)) for v in ('"x"', "tool down", "'5'"))


def test_failed_trajectory_is_recorded_and_the_error_reaches_verl(captured):
    worker = make_worker()
    with pytest.raises(RuntimeError, match="agent failed"):
        asyncio.run(worker.generate_sequences(make_batch(prompts=1, n=1, fail=np.array([True]))))
    (t,) = by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY)
    assert t.attributes[semconv.ATTR_ROLLOUT_STATUS] == semconv.STATUS_ERROR
    assert t.status.status_code == trace.StatusCode.ERROR
    assert semconv.ATTR_ROLLOUT_RESPONSE_TOKENS not in t.attributes
    (duration,) = hist(captured, semconv.M_ROLLOUT_TRAJECTORY_DURATION)
    assert duration.attributes[semconv.ATTR_ROLLOUT_STATUS] == semconv.STATUS_ERROR


def test_long_tail_ratio_and_slowest_trajectory(captured, v0_trainer):
    worker = make_worker(delays={4: 0.6})  # sample 2 (4 tokens) is slow
    batch = make_batch(step=5, prompts=3, n=1)
    with PROCESS.telemetry.tracer.start_as_current_span("verl.gen"):
        propagation.inject(batch)
    asyncio.run(worker.generate_sequences(batch))
    (ratio,) = captured.metric_points()[semconv.M_ROLLOUT_TAIL_RATIO]
    assert ratio.value > 2  # ~0.6 s / a few ms (generous: CI machines are busy)
    (batch_span,) = by_name(captured, semconv.SPAN_ROLLOUT_BATCH)
    (event,) = [e for e in batch_span.events if e.name == semconv.EVENT_SLOWEST_TRAJECTORY]
    assert event.attributes[semconv.ATTR_ROLLOUT_SAMPLE_INDEX] == 2
    assert event.attributes[semconv.ATTR_ROLLOUT_SUBMIT_STEP] == 5
    assert event.attributes[semconv.ATTR_ROLLOUT_TRAJECTORIES] == 3
    assert event.attributes[semconv.ATTR_ROLLOUT_DURATION] >= 0.6


def test_v1_style_call_without_dispatch_context_is_a_root_with_submit_step(captured):
    """v1's worker passes session_id and global_steps per prompt; no parent, a tail span per step."""
    worker = make_worker()

    async def run():
        traj = {"step": 7, "sample_index": 4, "rollout_n": 0, "validate": False}
        await asyncio.gather(
            *[
                worker._run_agent_loop(
                    {"temperature": 1.0}, trajectory=traj, agent_name="otel_test_agent", session_id=i, index=1
                )
                for i in range(2)
            ]
        )

    asyncio.run(run())
    trajs = by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY)
    assert sorted(t.attributes[semconv.ATTR_ROLLOUT_INDEX] for t in trajs) == [0, 1]
    assert all(t.parent is None and t.attributes[semconv.ATTR_ROLLOUT_SUBMIT_STEP] == 7 for t in trajs)
    (tail,) = by_name(captured, semconv.SPAN_ROLLOUT_TAIL)
    assert tail.parent is None and tail.events[0].name == semconv.EVENT_SLOWEST_TRAJECTORY


def test_wrappers_stay_coroutine_functions(captured):
    import inspect

    import wrapt

    for owner, name in (
        (AgentLoopWorker, "_run_agent_loop"),
        (AgentLoopWorker, "_compute_score"),
        (AgentLoopWorker, "generate_sequences"),
        (LLMServerClient, "generate"),
    ):
        assert isinstance(owner.__dict__[name], wrapt.FunctionWrapper), name
        assert inspect.iscoroutinefunction(getattr(owner, name)), name


def test_a_trajectory_whose_start_failed_leaves_its_step_group_done(captured, monkeypatch):
    """Our failure between counting a trajectory in flight and handing it to its end hook would keep
    its group open forever (no tail, no export) and stop every later group from being evicted."""
    from otel_verl.hooks.rollout import state as rs
    from otel_verl.hooks.rollout import trajectory

    real, calls = trajectory._record_start, []

    def failing_once(*args, **kwargs):
        calls.append(args[0])
        if len(calls) == 1:
            raise RuntimeError("our bug")
        return real(*args, **kwargs)

    monkeypatch.setattr(trajectory, "_record_start", failing_once)
    worker = make_worker()
    asyncio.run(worker.generate_sequences(make_batch(step=3, prompts=1, n=2)))  # verl's call is unaffected
    group = rs.STATE.groups[(3, False)]
    assert group.in_flight == 0  # the failed one was never counted; the other one ended
    assert len(by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY)) == 1
    assert PROCESS.telemetry.trees.trees == 0  # no tree left open behind it
    for step in range(4, 4 + rs.MAX_GROUPS):  # later steps push the old groups out
        rs.STATE.group((step, False))
    assert (3, False) not in rs.STATE.groups and len(rs.STATE.groups) == rs.MAX_GROUPS
