"""Trajectory spans, with the reward-scoring and tool-call spans inside them, and the long tail.

* ``AgentLoopWorker._run_agent_loop`` (one call per trajectory) -> ``verl.rollout.trajectory``:
  submit step, sample and rollout index, agent (``gen_ai.agent.name``), validate flag, status;
  token counts, turns and reward come from ``AgentLoopWorker._compute_score`` (its
  ``outputs[-1]`` is the unpadded ``AgentLoopOutput``), and so does the response's health
  (``health``: length limit, empty, repetition, on its token ids), tallied per step.
* ``ToolAgentLoop._call_tool`` -> ``execute_tool <name>`` (GenAI conventions; never the tool's
  arguments or result), a child of the trajectory's span.
* ``AgentLoopWorker._compute_score`` makes no span of its own: the trajectory's context goes with
  the call to the reward-loop worker, whose ``verl.reward_worker.compute_score`` span (where the
  scoring and the user's reward code run) is the trajectory's child (``reward_worker``). A span
  here would only repeat it, for the Ray hop's few milliseconds, which the trace shows anyway as
  the gap before the reward worker's span.

Decided at the end (``keep``): every trajectory is recorded while it runs, and whether its tree is
exported is decided when it ends (failed or cancelled: kept) or when its group (submit step and
validate flag, in this worker) has ended (the slowest, then a uniform sample, within
``OTEL_VERL_ROLLOUT_SPANS_PER_STEP``). The tree is whole, in every process:

* this process's spans of it (the trajectory, its LLM and tool calls) are plain records until
  then (``otel_verl.hooks.rollout.span_records``); a kept tree's become spans in one go;
* spans others start under it here (user spans in an agent loop or a tool) are real SDK spans,
  sampled because the trajectory's context says so, and held in its ``TreeBuffer`` tree;
* the reward worker's span and the user spans under it are recorded there and handed back with
  the scoring's reply (``reward_worker``): ``_compute_score``'s wrapper takes them out of the
  result before verl's code reads it, and they follow this trajectory's decision, exported from
  here with the reward worker's own resource.

While no trajectory span exists yet, the current span inside a recorded trajectory is one with the
trajectory's ids (a ``NonRecordingSpan``: user code setting attributes on "the current span" there
sets nothing). Inside a trajectory that is not recorded at all (budget 0, or the sampler said no)
the current span is an unsampled one, so what it causes elsewhere is not recorded either.

When a step's trajectories in this worker are all done, ``verl.rollout.tail_ratio`` (slowest /
median) and ``verl.rollout.degenerate_ratio`` (the share of each degenerate kind) are set and the
slowest one is named in a ``verl.rollout.slowest_trajectory`` event (on the v0 batch span; v1: on a
short ``verl.rollout.tail`` span), with the trees kept and not kept.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from otel_verl import propagation, semconv, step_context
from otel_verl._safe import safe
from otel_verl._values import as_int
from otel_verl.hooks.rollout import handoff, health, reward_worker, span_records
from otel_verl.hooks.rollout import state as rs
from otel_verl.hooks.rollout.span_records import Rec
from otel_verl.hooks.rollout.state import new_id
from otel_verl.hooks.spans import call_traced_async, start_span
from otel_verl.process.state import PROCESS

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


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
    st.start = rs.clock()
    if rs.recording():
        _record_start(st, link)
    try:
        # a failure above leaves no context behind
        # the step goes along for user code (``otel_verl.step_context``), with or without a record
        current = trace.set_span_in_context(_inside(st))
        ctx_token = otel_context.attach(step_context.with_step(st.step, context=current) or otel_context.get_current())
        st.tokens = (rs.TRAJECTORY.set(st), ctx_token)
    except BaseException:
        _forget(st)  # this trajectory gets no end hook: its tree must not stay open
        raise
    # Last: only a trajectory whose end will run (this returned it) is counted in flight. One
    # counted before a failure above would never be taken off again: its group would never be
    # done (no tail, no export) and ``RolloutState.group`` stops evicting behind it.
    group.in_flight += 1
    return st


def _record_start(st: rs.Trajectory, link: SpanContext | None) -> None:
    """Record the trajectory's span, if the sampler takes it (as it would a span started here)."""
    trees = PROCESS.telemetry.trees
    if trees is None:
        return  # no SDK pipeline: nothing would be exported
    attrs: dict[str, Any] = {
        semconv.ATTR_ROLLOUT_SUBMIT_STEP: st.step,
        semconv.ATTR_ROLLOUT_VALIDATE: st.validate,
        semconv.GEN_AI_AGENT_NAME: st.agent,
    }
    if st.sample_index is not None:
        attrs[semconv.ATTR_ROLLOUT_SAMPLE_INDEX] = st.sample_index
    if st.rollout_index is not None:
        attrs[semconv.ATTR_ROLLOUT_INDEX] = st.rollout_index
    links = rs.links(link, st.step)
    current = otel_context.get_current()
    parent = trace.get_current_span(current).get_span_context()
    valid = parent.is_valid
    trace_id = parent.trace_id if valid else new_id(128)
    if trees.by_parent:  # what the SDK's default sampler decides, without the call
        if valid and not parent.trace_flags.sampled:
            return
        trace_state = parent.trace_state if valid else None
    else:
        decision = trees.sampler.should_sample(
            current, trace_id, semconv.SPAN_ROLLOUT_TRAJECTORY, SpanKind.INTERNAL, attrs, links
        )
        if not decision.decision.is_sampled():
            return
        if decision.attributes:
            attrs.update(decision.attributes)
        trace_state = decision.trace_state
    span_id = new_id()
    rec = Rec(
        semconv.SPAN_ROLLOUT_TRAJECTORY,
        trace_id,
        span_id,
        parent.span_id if valid else 0,
        time.time_ns(),
        attrs,
        links=links,
    )
    rec.parent_remote = valid and parent.is_remote
    st.rec, st.trace_state = rec, trace_state
    st.tree = trees.open(span_id)


def _inside(st: rs.Trajectory) -> trace.Span:
    """The current span inside the trajectory: its recorded one's ids (sampled), or an unsampled
    one (W3C flag off) when it is not recorded, so the reward worker's span across the Ray call
    and the user's own spans are not recorded either (parent-based sampling, the default)."""
    if st.rec is not None:
        rec = st.rec
        return trace.NonRecordingSpan(SpanContext(rec.trace_id, rec.span_id, False, _SAMPLED, st.trace_state))
    parent = trace.get_current_span().get_span_context()
    trace_id = parent.trace_id if parent.is_valid else new_id(128)
    unsampled = TraceFlags(TraceFlags.DEFAULT)
    return trace.NonRecordingSpan(SpanContext(trace_id, new_id(), False, unsampled))


def _forget(st: rs.Trajectory) -> None:
    """Drop the trajectory's tree (it will never end)."""
    trees = PROCESS.telemetry.trees
    if st.tree is not None and trees is not None:
        trees.end(st.tree, False)
    st.rec = st.tree = None


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
    end_ns = time.time_ns()
    duration = rs.clock() - st.start
    status = rs.status_of(error)
    inst = rs.metrics()
    attrs = {semconv.ATTR_ROLLOUT_VALIDATE: st.validate, semconv.GEN_AI_AGENT_NAME: st.agent}
    exemplar = exemplar_context(st)
    inst.deferred.record(inst.trajectory, duration, {**attrs, semconv.ATTR_ROLLOUT_STATUS: status}, exemplar)
    if st.response_tokens is not None:
        inst.deferred.record(inst.response_tokens, st.response_tokens, attrs, exemplar)
    rec = st.rec
    if rec is not None:
        rec.attributes[semconv.ATTR_ROLLOUT_STATUS] = status
        for key, value in (
            (semconv.ATTR_ROLLOUT_PROMPT_TOKENS, st.prompt_tokens),
            (semconv.ATTR_ROLLOUT_RESPONSE_TOKENS, st.response_tokens),
            (semconv.ATTR_ROLLOUT_GENERATED_TOKENS, st.generated_tokens),
            (semconv.ATTR_ROLLOUT_NUM_TURNS, st.num_turns),
            (semconv.ATTR_ROLLOUT_REWARD, st.reward),
            (semconv.ATTR_ROLLOUT_REPETITION, st.repetition),
            (semconv.ATTR_ROLLOUT_DEGENERATE, st.degenerate or None),
        ):
            if value is not None:
                rec.attributes[key] = value
        rs.ended(rec, end_ns, status, error)
    group = rs.STATE.groups.get(st.key)
    if group is None:
        _decide(st, status != semconv.STATUS_OK, semconv.KEPT_ERROR, 1.0)  # a group evicted meanwhile
        return
    group.in_flight -= 1
    if status != semconv.STATUS_CANCELLED:
        group.ended(duration, st)
        if st.degenerate is not None:
            group.health.add(st.degenerate)
    if rec is not None:
        if status != semconv.STATUS_OK:  # failed or cancelled: always kept, beyond the budget
            _decide(st, True, semconv.KEPT_ERROR, 1.0)
            group.counts[semconv.KEPT_ERROR] += 1
        else:
            kept, dropped = (group.round or group.new_round()).offer(duration, st)
            if kept is not None:  # every tree is kept (budget -1): not among the slowest so far
                _decide(kept, True, semconv.KEPT_SAMPLE, 1.0)
                group.counts[semconv.KEPT_SAMPLE] += 1
            if dropped is not None:
                _decide(dropped, False)
                group.not_kept += 1
    if group.in_flight <= 0:
        _group_done(st.key, group)


def exemplar_context(st: rs.Trajectory | None) -> Callable[[], otel_context.Context]:
    """The exemplar context of the values of ``st`` (and of its LLM calls): its span once its tree was
    exported, else none.

    Called when the values are recorded (at the next collection): a tree that was dropped, or is
    not decided yet, has no span to click through to, and a value outside any trajectory none of
    its own, so those carry no exemplar (an empty context: the SDK's trace-based filter offers none)."""

    def context() -> otel_context.Context:
        if st is None or st.kept is None:
            return otel_context.Context()
        trace_id, span_id = st.kept
        span = trace.NonRecordingSpan(SpanContext(trace_id, span_id, False, _SAMPLED))
        return trace.set_span_in_context(span, otel_context.Context())

    return context


def _decide(st: rs.Trajectory, keep: bool, because: str = "", rate: float = 1.0, rank: int | None = None) -> None:
    """Export ``st``'s whole tree (marked why, with its sample rate) or drop it."""
    trees = PROCESS.telemetry.trees
    rec, tree = st.rec, st.tree
    st.rec = st.tree = None  # decided once
    if rec is None or trees is None:
        return
    if not keep:
        if tree is not None:
            trees.end(tree, False)
        st.children, st.handbacks = [], []
        return
    st.kept = (rec.trace_id, rec.span_id)
    rec.attributes[semconv.ATTR_ROLLOUT_KEPT_BECAUSE] = because
    rec.attributes[semconv.ATTR_ROLLOUT_SAMPLE_RATE] = rate
    if rank is not None:
        rec.attributes[semconv.ATTR_ROLLOUT_SLOWEST_RANK] = rank
    recs = [rec, *st.children]
    spans = span_records.readable_all(recs, trees.resource, trees.scope, st.trace_state)
    for data in st.handbacks:  # the reward worker's spans of this trajectory, with its resource
        found = span_records.from_wire(data, rec.trace_id)
        if found is not None:
            resource, theirs = found
            spans += span_records.readable_all(theirs, resource, trees.scope, st.trace_state)
    dropped = st.dropped + (tree.dropped if tree is not None else 0)
    if dropped:
        rec.attributes[semconv.ATTR_ROLLOUT_TREE_DROPPED] = dropped
    st.children, st.handbacks = [], []
    if tree is not None:
        trees.end(tree, True, spans)
    else:
        trees.export(spans)


def _group_done(key: tuple[int, bool], group: rs.Group) -> None:
    """All of this worker's trajectories of a step are done: its kept trees, long-tail figures, an export."""
    if group.round is not None:
        slowest, sample, rate = group.round.finish()
        group.round = None
        for st, rank in slowest:
            _decide(st, True, semconv.KEPT_SLOWEST, 1.0, rank)
        for st in sample:
            _decide(st, True, semconv.KEPT_SAMPLE, rate)
        group.counts[semconv.KEPT_SLOWEST] += len(slowest)
        group.counts[semconv.KEPT_SAMPLE] += len(sample)
        group.kept += len(slowest) + len(sample)
        group.rate = rate
    durations, seen, group.durations, group.seen = group.durations, group.seen, [], 0
    found, group.slowest = group.slowest, None
    counts, group.counts = group.counts, dict.fromkeys(group.counts, 0)
    not_kept, group.not_kept = group.not_kept, 0
    rate, group.rate = group.rate, None
    batch_span, group.batch_span = group.batch_span, None
    link, group.link = group.link, None
    ratios = group.health.ratios()
    if ratios is not None:
        gauge = rs.metrics().degenerate_ratio
        for kind, ratio in ratios.items():
            gauge.set(ratio, {semconv.ATTR_ROLLOUT_VALIDATE: key[1], semconv.ATTR_ROLLOUT_DEGENERATE_KIND: kind})
    if found is not None:
        slowest_s, st = found
        median = statistics.median(durations)
        ratio = slowest_s / median if median > 0 else 1.0
        rs.metrics().tail_ratio.set(ratio, {semconv.ATTR_ROLLOUT_VALIDATE: key[1]})
        event: dict[str, Any] = {
            semconv.ATTR_ROLLOUT_SUBMIT_STEP: key[0],
            semconv.ATTR_ROLLOUT_VALIDATE: key[1],
            semconv.ATTR_ROLLOUT_DURATION: slowest_s,
            semconv.ATTR_ROLLOUT_TAIL_RATIO: ratio,
            semconv.ATTR_ROLLOUT_TRAJECTORIES: seen,
        }
        for attr, value in (
            (semconv.ATTR_ROLLOUT_SAMPLE_INDEX, st.sample_index),
            (semconv.ATTR_ROLLOUT_INDEX, st.rollout_index),
            (semconv.ATTR_ROLLOUT_RESPONSE_TOKENS, st.response_tokens),
        ):
            if value is not None:
                event[attr] = value
        if st.kept is not None:  # its tree was exported
            event[semconv.ATTR_ROLLOUT_SLOWEST_TRACE_ID] = format(st.kept[0], "032x")
            event[semconv.ATTR_ROLLOUT_SLOWEST_SPAN_ID] = format(st.kept[1], "016x")
        if rs.recording():
            for because, n in counts.items():
                event[semconv.ATTR_ROLLOUT_KEPT_PREFIX + because] = n
            event[semconv.ATTR_ROLLOUT_NOT_KEPT] = not_kept
            if rate is not None:
                event[semconv.ATTR_ROLLOUT_SAMPLE_RATE] = rate
        if batch_span is not None and batch_span.is_recording():
            batch_span.add_event(semconv.EVENT_SLOWEST_TRAJECTORY, event)
        elif rs.recording():
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
def _outputs_of(st: rs.Trajectory, outputs: Any, worker: Any = None) -> None:
    """Token counts, turns, reward and generation health of the trajectory, from its last (unpadded) output."""
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
        limits = rs.STATE.limits
        if limits is None:
            limits = rs.STATE.limits = health.Limits.of_worker(worker)
        st.repetition, st.degenerate = health.measure(response_ids, limits)
    if response_mask is not None:
        st.generated_tokens = int(sum(response_mask))
    st.num_turns = as_int(getattr(out, "num_turns", None))
    reward = getattr(out, "reward_score", None)
    if isinstance(reward, (int, float)) and not isinstance(reward, bool):
        st.reward = float(reward)


def child_record(
    traj: rs.Trajectory, name: str, attrs: dict[str, Any], kind: SpanKind = SpanKind.INTERNAL
) -> Rec | None:
    """A record of a call inside ``traj`` (an LLM or tool call), if ``traj`` is recorded."""
    parent = traj.rec
    if parent is None:
        return None
    rec = Rec(name, parent.trace_id, new_id(), parent.span_id, time.time_ns(), attrs, kind)
    return rec if traj.child(rec) else None


async def compute_score_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``AgentLoopWorker._compute_score(outputs, kwargs)``: the trajectory's context goes to the
    reward worker (``reward_worker.carry``), its spans come back (``reward_worker.take_handback``);
    its reward and token counts onto the trajectory."""
    traj = rs.TRAJECTORY.get()
    if traj is not None:
        args, kwargs = reward_worker.carry(args, kwargs, defer=traj.rec is not None) or (args, kwargs)
    result = await wrapped(*args, **kwargs)
    if traj is not None:
        _after_score(traj, instance, args, kwargs)
    return result


@safe("rollout reward hand-back")
def _after_score(traj: rs.Trajectory, worker: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    outputs = kwargs.get("outputs", args[0] if args else None)
    data = reward_worker.take_handback(outputs)  # before verl's code reads the reward's extra info
    if data is not None and traj.rec is not None:
        traj.handback(data)
    _outputs_of(traj, outputs, worker)


# ------------------------------------------------------------------------------ tool calls
@safe("rollout tool span start")
def _tool_start(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Rec, Any] | None:
    traj = rs.TRAJECTORY.get()
    if traj is None or traj.rec is None:
        return None
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
    rec = child_record(traj, semconv.SPAN_ROLLOUT_TOOL_PREFIX + name, attrs)
    trees = PROCESS.telemetry.trees
    if rec is None or trees is None:
        return None
    if traj.tree is not None:
        trees.join(traj.tree, rec.span_id)  # a user span inside the tool is the tool's child: in the tree
    ctx = SpanContext(rec.trace_id, rec.span_id, False, _SAMPLED, traj.trace_state)
    return rec, otel_context.attach(trace.set_span_in_context(trace.NonRecordingSpan(ctx)))


@safe("rollout tool span end")
def _tool_end(state: tuple[Rec, Any], result: Any, error: BaseException | None) -> None:
    rec, token = state
    otel_context.detach(token)
    # verl turns a failing tool into an error text with reward 0.0; arguments and results are
    # never recorded (they may hold prompt or user data)
    if isinstance(result, tuple) and len(result) > 1 and isinstance(result[1], (int, float)):
        rec.attributes[semconv.ATTR_ROLLOUT_TOOL_REWARD] = float(result[1])
    rs.ended(rec, time.time_ns(), rs.status_of(error), error)


async def call_tool_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return await call_traced_async(_tool_start(args, kwargs), _tool_end, wrapped, *args, **kwargs)
