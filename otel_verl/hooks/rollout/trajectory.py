"""Trajectory spans, with the reward-scoring and tool-call spans inside them, and the long tail.

* ``AgentLoopWorker._run_agent_loop`` (one call per trajectory) -> ``verl.rollout.trajectory``:
  submit step, sample and rollout index, agent (``gen_ai.agent.name``), validate flag, status;
  token counts, turns and reward come from ``AgentLoopWorker._compute_score`` (its
  ``outputs[-1]`` is the unpadded ``AgentLoopOutput``).
* ``ToolAgentLoop._call_tool`` -> ``execute_tool <name>`` (GenAI conventions; never the tool's
  arguments or result), a child of a sampled trajectory's span.
* ``AgentLoopWorker._compute_score`` makes no span of its own: the trajectory's context goes with
  the call to the reward-loop worker, whose ``verl.reward_worker.compute_score`` span (where the
  scoring and the user's reward code run) is the trajectory's child (``reward_worker``). A span
  here would only repeat it, 8-64 spans a step and worker for the Ray hop's few milliseconds,
  which the trace shows anyway as the gap before the reward worker's span.
* Inside a trajectory the budget leaves out the current span is an unsampled one, so the reward
  worker's span and user spans are not recorded either (``OTEL_VERL_ROLLOUT_SPANS_PER_STEP``
  bounds every span a trajectory causes).
* When a step's trajectories in this worker are all done, ``verl.rollout.tail_ratio`` (slowest /
  median) is set and the slowest one is named in a ``verl.rollout.slowest_trajectory`` event (on
  the v0 batch span; v1: on a short ``verl.rollout.tail`` span).
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from otel_verl import propagation, semconv, step_context
from otel_verl._safe import safe
from otel_verl._values import as_int
from otel_verl.config import settings
from otel_verl.hooks.rollout import handoff, reward_worker
from otel_verl.hooks.rollout import state as rs
from otel_verl.hooks.spans import SpanState, call_traced_async, close_span, open_span, start_span
from otel_verl.process.state import PROCESS


# ------------------------------------------------------------------------------ trajectory
@safe("rollout trajectory start")
def _trajectory_start(args: tuple[Any, ...], kwargs: dict[str, Any], link: SpanContext | None) -> rs.Trajectory:
    rs.identify()
    trajectory = kwargs.get("trajectory", args[1] if len(args) > 1 else None)
    if not isinstance(trajectory, dict):
        trajectory = {}
    st = rs.Trajectory()
    step = as_int(trajectory.get("step"))
    if step is None or step < 0:
        step = as_int(kwargs.get("global_steps"))
    st.step = step if step is not None else -1
    st.validate = bool(trajectory.get("validate", False))
    agent = kwargs.get("agent_name")
    st.agent = agent if isinstance(agent, str) else str(agent)
    st.sample_index = as_int(trajectory.get("sample_index"))
    session = as_int(kwargs.get("session_id"))  # v1: the n-th rollout of the prompt
    st.rollout_index = session if session is not None else as_int(trajectory.get("rollout_n"))
    st.key = (st.step, st.validate)
    group = rs.STATE.group(st.key)
    batch_span = rs.BATCH_SPAN.get()
    if batch_span is not None:
        group.batch_span = batch_span
    if link is None:
        link = rs.LINK.get()
    if link is not None:
        group.link = link
    if rs.sampled(group):
        attrs: dict[str, Any] = {
            semconv.ATTR_ROLLOUT_SUBMIT_STEP: st.step,
            semconv.ATTR_ROLLOUT_VALIDATE: st.validate,
            semconv.GEN_AI_AGENT_NAME: st.agent,
        }
        if st.sample_index is not None:
            attrs[semconv.ATTR_ROLLOUT_SAMPLE_INDEX] = st.sample_index
        if st.rollout_index is not None:
            attrs[semconv.ATTR_ROLLOUT_INDEX] = st.rollout_index
        st.span = start_span(semconv.SPAN_ROLLOUT_TRAJECTORY, attributes=attrs, links=rs.links(link, st.step))
    st.start = time.perf_counter()
    try:
        # a failure above leaves no context behind
        # the step goes along for user code (``otel_verl.step_context``), with or without a span
        current = trace.set_span_in_context(st.span if st.span is not None else _unsampled_parent())
        ctx_token = otel_context.attach(step_context.with_step(st.step, context=current) or otel_context.get_current())
        st.tokens = (rs.TRAJECTORY.set(st), ctx_token)
    except BaseException:
        if st.span is not None:
            st.span.end()  # this trajectory gets no end hook: its span must not stay open
        raise
    # Last: only a trajectory whose end will run (this returned it) is counted in flight. One
    # counted before a failure above would never be taken off again: its group would never be
    # done (no tail, no export) and ``RolloutState.group`` stops evicting behind it.
    group.in_flight += 1
    return st


def _unsampled_parent() -> trace.Span:
    """The parent of what runs inside a trajectory the budget leaves without spans: one that is
    not sampled (W3C flag off), so the reward worker's span across the Ray call and the user's
    own spans are not recorded either (parent-based sampling, the default) and cost nothing."""
    parent = trace.get_current_span().get_span_context()
    trace_id = parent.trace_id if parent.is_valid else random.getrandbits(128) or 1
    unsampled = TraceFlags(TraceFlags.DEFAULT)
    return trace.NonRecordingSpan(SpanContext(trace_id, random.getrandbits(64) or 1, False, unsampled))


def _leave(st: rs.Trajectory) -> None:
    if st.tokens is None:
        return
    var_token, ctx_token = st.tokens
    st.tokens = None
    if ctx_token is not None:
        otel_context.detach(ctx_token)
    rs.TRAJECTORY.reset(var_token)


@safe("rollout trajectory end")
def _trajectory_end(st: rs.Trajectory, result: Any, error: BaseException | None) -> None:
    try:
        _leave(st)
    finally:
        _record(st, error)


def _record(st: rs.Trajectory, error: BaseException | None) -> None:
    duration = time.perf_counter() - st.start
    status = rs.status_of(st.span, error)
    inst = rs.metrics()
    attrs = {semconv.ATTR_ROLLOUT_VALIDATE: st.validate, semconv.GEN_AI_AGENT_NAME: st.agent}
    inst.trajectory.record(duration, {**attrs, semconv.ATTR_ROLLOUT_STATUS: status})
    if st.response_tokens is not None:
        inst.response_tokens.record(st.response_tokens, attrs)
    span = st.span
    if span is not None:
        end_attrs: dict[str, Any] = {semconv.ATTR_ROLLOUT_STATUS: status}
        for key, value in (
            (semconv.ATTR_ROLLOUT_PROMPT_TOKENS, st.prompt_tokens),
            (semconv.ATTR_ROLLOUT_RESPONSE_TOKENS, st.response_tokens),
            (semconv.ATTR_ROLLOUT_GENERATED_TOKENS, st.generated_tokens),
            (semconv.ATTR_ROLLOUT_NUM_TURNS, st.num_turns),
            (semconv.ATTR_ROLLOUT_REWARD, st.reward),
        ):
            if value is not None:
                end_attrs[key] = value
        span.set_attributes(end_attrs)  # one call: the SDK takes the span's lock once
        span.end()
    group = rs.STATE.groups.get(st.key)
    if group is None:
        return
    group.in_flight -= 1
    if status != semconv.STATUS_CANCELLED:
        group.done.append((duration, st))
    if group.in_flight <= 0:
        _group_done(st.key, group)


def _group_done(key: tuple[int, bool], group: rs.Group) -> None:
    """All of this worker's trajectories of a step are done: long-tail figures and an export."""
    done, group.done = group.done, []
    batch_span, group.batch_span = group.batch_span, None
    link, group.link = group.link, None
    if done:
        slowest, st = max(done, key=lambda d: d[0])
        median = statistics.median(d for d, _ in done)
        ratio = slowest / median if median > 0 else 1.0
        rs.metrics().tail_ratio.set(ratio, {semconv.ATTR_ROLLOUT_VALIDATE: key[1]})
        event = {
            semconv.ATTR_ROLLOUT_SUBMIT_STEP: key[0],
            semconv.ATTR_ROLLOUT_VALIDATE: key[1],
            semconv.ATTR_ROLLOUT_DURATION: slowest,
            semconv.ATTR_ROLLOUT_TAIL_RATIO: ratio,
            semconv.ATTR_ROLLOUT_TRAJECTORIES: len(done),
        }
        for attr, value in (
            (semconv.ATTR_ROLLOUT_SAMPLE_INDEX, st.sample_index),
            (semconv.ATTR_ROLLOUT_INDEX, st.rollout_index),
            (semconv.ATTR_ROLLOUT_RESPONSE_TOKENS, st.response_tokens),
        ):
            if value is not None:
                event[attr] = value
        if st.span is not None:
            event[semconv.ATTR_ROLLOUT_SLOWEST_SPAN_ID] = format(st.span.get_span_context().span_id, "016x")
        if batch_span is not None and batch_span.is_recording():
            batch_span.add_event(semconv.EVENT_SLOWEST_TRAJECTORY, event)
        elif settings().rollout_spans_per_step != 0:
            tail = start_span(
                semconv.SPAN_ROLLOUT_TAIL,
                context=otel_context.Context(),  # a root: v1 requests outlive the dispatch
                attributes={
                    semconv.ATTR_ROLLOUT_SUBMIT_STEP: key[0],
                    semconv.ATTR_ROLLOUT_VALIDATE: key[1],
                    semconv.ATTR_ROLLOUT_TAIL_RATIO: ratio,
                },
                links=rs.links(link, key[0]),
            )
            tail.add_event(semconv.EVENT_SLOWEST_TRAJECTORY, event)
            tail.end()
    PROCESS.telemetry.export_soon()  # not in the agent loop's event loop


async def run_agent_loop_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    # v1: every TensorDict key reaches here as a keyword; a carrier no hook took out must not go further
    link = handoff.link_from(kwargs.pop(propagation.CARRIER_KEY)) if propagation.CARRIER_KEY in kwargs else None
    return await call_traced_async(_trajectory_start(args, kwargs, link), _trajectory_end, wrapped, *args, **kwargs)


# ------------------------------------------------------------------------------ reward scoring
@safe("rollout output attributes")
def _note_outputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    st = rs.TRAJECTORY.get()
    if st is None:
        return
    outputs = kwargs.get("outputs", args[0] if args else None)
    if not outputs:
        return
    out = outputs[-1]
    prompt_ids = getattr(out, "prompt_ids", None)
    response_ids = getattr(out, "response_ids", None)
    response_mask = getattr(out, "response_mask", None)
    if prompt_ids is not None:
        st.prompt_tokens = len(prompt_ids)
    if response_ids is not None:
        st.response_tokens = len(response_ids)
    if response_mask is not None:
        st.generated_tokens = int(sum(response_mask))
    st.num_turns = as_int(getattr(out, "num_turns", None))
    reward = getattr(out, "reward_score", None)
    if isinstance(reward, (int, float)) and not isinstance(reward, bool):
        st.reward = float(reward)


@safe("rollout child span start")
def _child_start(name: str, attrs: dict[str, Any], kind: SpanKind = SpanKind.INTERNAL) -> SpanState | None:
    """A child span of the current trajectory, if that trajectory has one (sampled)."""
    traj = rs.TRAJECTORY.get()
    if traj is None or traj.span is None:
        return None
    return open_span(name, context=trace.set_span_in_context(traj.span), kind=kind, attributes=attrs)


async def compute_score_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``AgentLoopWorker._compute_score(outputs, kwargs)``: the trajectory's context goes to the
    reward worker (``reward_worker.carry``); its reward and token counts onto the trajectory."""
    inside = rs.TRAJECTORY.get() is not None
    if inside:
        args, kwargs = reward_worker.carry(args, kwargs) or (args, kwargs)
    result = await wrapped(*args, **kwargs)
    if inside:
        _note_outputs(args, kwargs)
    return result


# ------------------------------------------------------------------------------ tool calls
@safe("rollout tool span start")
def _tool_start(args: tuple[Any, ...], kwargs: dict[str, Any]) -> SpanState | None:
    # the FunctionCall (name, arguments): first positional when bound, keyword ``tool_call`` otherwise
    call = kwargs.get("tool_call") or next((a for a in args if hasattr(a, "arguments")), None)
    name = getattr(call, "name", None)
    if not isinstance(name, str):
        return None
    attrs: dict[str, Any] = {
        semconv.GEN_AI_OPERATION_NAME: semconv.GEN_AI_OPERATION_EXECUTE_TOOL,
        semconv.GEN_AI_TOOL_NAME: name,
    }
    call_id = getattr(call, "tool_call_id", None) or getattr(call, "id", None)
    if isinstance(call_id, str) and call_id:
        attrs[semconv.GEN_AI_TOOL_CALL_ID] = call_id
    return _child_start(semconv.SPAN_ROLLOUT_TOOL_PREFIX + name, attrs)


@safe("rollout tool span end")
def _tool_end(state: SpanState, result: Any, error: BaseException | None) -> None:
    # verl turns a failing tool into an error text with reward 0.0; arguments and results are
    # never recorded (they may hold prompt or user data)
    if isinstance(result, tuple) and len(result) > 1 and isinstance(result[1], (int, float)):
        state[0].set_attribute(semconv.ATTR_ROLLOUT_TOOL_REWARD, float(result[1]))
    close_span(state, error=error)


async def call_tool_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return await call_traced_async(_tool_start(args, kwargs), _tool_end, wrapped, *args, **kwargs)
