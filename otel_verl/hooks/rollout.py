"""Rollout: one span per trajectory and per LLM call, in the agent-loop worker processes.

* ``AgentLoopWorker._run_agent_loop`` (one call per trajectory = prompt x ``rollout.n``; inherited
  by v1's ``AgentLoopWorkerTQ``) -> ``verl.rollout.trajectory``: submit step, sample and rollout
  index, agent (``gen_ai.agent.name``), validate flag, status; token counts, turns and reward come
  from ``AgentLoopWorker._compute_score`` (its ``outputs[-1]`` is the unpadded ``AgentLoopOutput``).
* ``LLMServerClient.generate`` (every engine call) -> ``verl.rollout.llm_call`` with ``gen_ai.*``
  usage attributes; ``_acquire_server`` adds the server id and the load balancer's wait.
* ``AgentLoopWorker._compute_score`` -> ``verl.rollout.reward``; ``ToolAgentLoop._call_tool`` ->
  ``execute_tool <name>`` (GenAI conventions; never the tool's arguments or result). Both are
  children of a sampled trajectory's span and cost nothing for the others.
* v0: the TaskRunner puts the ``gen`` stage's context into the ``DataProto`` handed to
  ``AgentLoopManager.generate_sequences``; ``AgentLoopWorker.generate_sequences`` takes it out
  again (verl never sees it) and opens ``verl.rollout.generate``, so each step's trace holds its
  trajectories.
* v1 dispatches fire-and-forget (``AgentLoopManagerTQ.generate_sequences``) and may train on a
  trajectory at a later step, so trajectories are roots of their own traces, each with one span
  *link* (attribute ``verl.step`` = submit step) to the ``verl.gen`` span of the step that
  submitted it. verl submits a step's prompts in ``prepare_step``, under ``verl.step`` and before
  that step's ``gen`` stage starts: the TaskRunner fixes the id that ``verl.gen`` span will get
  (``propagation.promise_span_id``) and sends it in the ``TensorDict`` as a carrier (refills during
  ``gen`` send ``gen`` itself; validation sends the current span). The worker's
  ``AgentLoopWorkerTQ.generate_sequences`` takes it out before verl's code runs (else the first
  ``_run_agent_loop`` call that sees it as a keyword does); the spawned tasks inherit the link.
  A dispatch outside any span (async warm-up before step 1) has no link;
  ``verl.rollout.submit_step`` is always there.

Only ``OTEL_VERL_ROLLOUT_SPANS_PER_STEP`` trajectories per step (and validate flag) and worker get
spans (their LLM calls too); the histograms count every trajectory and call. When a step's
trajectories in a worker are all done, ``verl.rollout.tail_ratio`` (slowest / median duration) is
set and the slowest one is named in a ``verl.rollout.slowest_trajectory`` event (on the v0 batch
span; v1: on a short ``verl.rollout.tail`` span). Every wrapper stays a coroutine and costs a few
microseconds when its trajectory is not sampled.
"""

from __future__ import annotations

import contextvars
import inspect
import statistics
import sys
import time
from collections import OrderedDict
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode

from otel_verl import gpu, propagation, semconv
from otel_verl._safe import safe
from otel_verl.config import settings
from otel_verl.hooks import Hook, SpanState, call_traced_async, close_span, open_span
from otel_verl.metrics import DURATION_BUCKETS
from otel_verl.runtime import RUNTIME

AGENT_LOOP = "verl.experimental.agent_loop.agent_loop"
AGENT_LOOP_TQ = "verl.trainer.ppo.v1.agent_loop_tq"
LLM_SERVER = "verl.workers.rollout.llm_server"
TOOL_AGENT_LOOP = "verl.experimental.agent_loop.tool_agent_loop"

TOKEN_BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
_MAX_GROUPS = 16  # (step, validate) groups remembered per process for the span budget

_traj_var: contextvars.ContextVar[_Trajectory | None] = contextvars.ContextVar("otel_verl_traj", default=None)
_llm_var: contextvars.ContextVar[_LLMCall | None] = contextvars.ContextVar("otel_verl_llm", default=None)
_batch_var: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_verl_rollout_batch", default=None)
# v1: the span a dispatch links its trajectories to (set around AgentLoopWorkerTQ.generate_sequences)
_link_var: contextvars.ContextVar[SpanContext | None] = contextvars.ContextVar("otel_verl_rollout_link", default=None)


# ------------------------------------------------------------------------------ state
class _Instruments:
    def __init__(self, meter: Any) -> None:
        self.meter = meter
        self.trajectory = meter.create_histogram(
            semconv.M_ROLLOUT_TRAJECTORY_DURATION,
            unit="s",
            description="Duration of one rollout trajectory (agent loop incl. reward)",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.llm_call = meter.create_histogram(
            semconv.M_ROLLOUT_LLM_CALL_DURATION,
            unit="s",
            description="Duration of one LLM server generate call",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.response_tokens = meter.create_histogram(
            semconv.M_ROLLOUT_RESPONSE_TOKENS,
            unit="{token}",
            description="Response tokens of one trajectory (verl's response_length)",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.tail_ratio = meter.create_gauge(
            semconv.M_ROLLOUT_TAIL_RATIO,
            unit="1",
            description="Slowest / median trajectory duration of a step in this worker",
        )


class _Group:
    """The trajectories of one (submit step, validate) in this worker."""

    __slots__ = ("spans", "in_flight", "done", "batch_span", "link")

    def __init__(self) -> None:
        self.spans = 0
        self.in_flight = 0
        self.done: list[tuple[float, _Trajectory]] = []
        self.batch_span: Any = None
        self.link: SpanContext | None = None  # v1: the dispatching span, for the tail span


class _Trajectory:
    __slots__ = (
        "span",
        "start",
        "key",
        "step",
        "validate",
        "agent",
        "sample_index",
        "rollout_index",
        "prompt_tokens",
        "response_tokens",
        "generated_tokens",
        "num_turns",
        "reward",
    )

    def __init__(self) -> None:
        self.span: Any = None
        self.prompt_tokens: int | None = None
        self.response_tokens: int | None = None
        self.generated_tokens: int | None = None
        self.num_turns: int | None = None
        self.reward: float | None = None


class _LLMCall:
    __slots__ = ("span", "start", "attrs")

    def __init__(self, span: Any, start: float, attrs: dict[str, Any]) -> None:
        self.span = span
        self.start = start
        self.attrs = attrs


class _State:
    def __init__(self) -> None:
        self.instruments: _Instruments | None = None
        self.groups: OrderedDict[tuple[int, bool], _Group] = OrderedDict()
        self.identified = False
        self.provider: str | None = None

    def inst(self) -> _Instruments:
        meter = RUNTIME.telemetry.meter
        inst = self.instruments
        if inst is None or inst.meter is not meter:
            inst = self.instruments = _Instruments(meter)
        return inst

    def group(self, key: tuple[int, bool]) -> _Group:
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = _Group()
            while len(self.groups) > _MAX_GROUPS:
                old_key, old = next(iter(self.groups.items()))
                if old.in_flight:
                    break
                del self.groups[old_key]
        return group


_STATE = _State()


def reset() -> None:
    """Forget per-process rollout state (tests)."""
    global _STATE
    _STATE = _State()


def _identify() -> None:
    if not _STATE.identified:
        _STATE.identified = True
        if RUNTIME.trainer is None:  # the TaskRunner keeps its identity
            RUNTIME.identify(role=semconv.ROLE_AGENT_LOOP)
            gpu.ensure_worker_metrics()  # process.* gauges (no GPU of its own: none of those)


def _as_int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        if hasattr(value, "item"):
            value = value.item()
        return int(value)
    except (TypeError, ValueError):
        return None


def _sampled(group: _Group) -> bool:
    budget = settings().rollout_spans_per_step
    if budget < 0:
        return True
    if group.spans >= budget:
        return False
    group.spans += 1
    return True


def _finish(span: Any, error: BaseException | None) -> str:
    status = semconv.STATUS_OK
    if error is not None:
        import asyncio

        status = semconv.STATUS_CANCELLED if isinstance(error, asyncio.CancelledError) else semconv.STATUS_ERROR
        if span is not None:
            if status == semconv.STATUS_ERROR:
                span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    if span is not None:
        span.set_attribute(semconv.ATTR_ROLLOUT_STATUS, status)
    return status


# ------------------------------------------------------------------------------ trajectory
@safe("rollout trajectory start")
def _trajectory_start(args: tuple[Any, ...], kwargs: dict[str, Any], link: SpanContext | None) -> _Trajectory | None:
    _identify()
    trajectory = kwargs.get("trajectory", args[1] if len(args) > 1 else None)
    if not isinstance(trajectory, dict):
        trajectory = {}
    st = _Trajectory()
    step = _as_int(trajectory.get("step"))
    if step is None or step < 0:
        step = _as_int(kwargs.get("global_steps"))
    st.step = step if step is not None else -1
    st.validate = bool(trajectory.get("validate", False))
    agent = kwargs.get("agent_name")
    st.agent = agent if isinstance(agent, str) else str(agent)
    st.sample_index = _as_int(trajectory.get("sample_index"))
    session = _as_int(kwargs.get("session_id"))  # v1: the n-th rollout of the prompt
    st.rollout_index = session if session is not None else _as_int(trajectory.get("rollout_n"))
    st.key = (st.step, st.validate)
    group = _STATE.group(st.key)
    group.in_flight += 1
    batch_span = _batch_var.get()
    if batch_span is not None:
        group.batch_span = batch_span
    if link is None:
        link = _link_var.get()
    if link is not None:
        group.link = link
    if _sampled(group):
        attrs: dict[str, Any] = {
            semconv.ATTR_ROLLOUT_SUBMIT_STEP: st.step,
            semconv.ATTR_ROLLOUT_VALIDATE: st.validate,
            semconv.GEN_AI_AGENT_NAME: st.agent,
        }
        if st.sample_index is not None:
            attrs[semconv.ATTR_ROLLOUT_SAMPLE_INDEX] = st.sample_index
        if st.rollout_index is not None:
            attrs[semconv.ATTR_ROLLOUT_INDEX] = st.rollout_index
        st.span = RUNTIME.telemetry.tracer.start_span(
            semconv.SPAN_ROLLOUT_TRAJECTORY, kind=SpanKind.INTERNAL, attributes=attrs, links=_links(link, st.step)
        )
    st.start = time.perf_counter()
    return st


@safe("rollout trajectory end")
def _trajectory_end(st: _Trajectory, error: BaseException | None) -> None:
    duration = time.perf_counter() - st.start
    status = _finish(st.span, error)
    inst = _STATE.inst()
    attrs = {semconv.ATTR_ROLLOUT_VALIDATE: st.validate, semconv.GEN_AI_AGENT_NAME: st.agent}
    inst.trajectory.record(duration, {**attrs, semconv.ATTR_ROLLOUT_STATUS: status})
    if st.response_tokens is not None:
        inst.response_tokens.record(st.response_tokens, attrs)
    span = st.span
    if span is not None:
        for key, value in (
            (semconv.ATTR_ROLLOUT_PROMPT_TOKENS, st.prompt_tokens),
            (semconv.ATTR_ROLLOUT_RESPONSE_TOKENS, st.response_tokens),
            (semconv.ATTR_ROLLOUT_GENERATED_TOKENS, st.generated_tokens),
            (semconv.ATTR_ROLLOUT_NUM_TURNS, st.num_turns),
            (semconv.ATTR_ROLLOUT_REWARD, st.reward),
        ):
            if value is not None:
                span.set_attribute(key, value)
        span.end()
    group = _STATE.groups.get(st.key)
    if group is None:
        return
    group.in_flight -= 1
    if status != semconv.STATUS_CANCELLED:
        group.done.append((duration, st))
    if group.in_flight <= 0:
        _group_done(st.key, group, inst)


def _links(link: SpanContext | None, step: int) -> list[Link] | None:
    return [Link(link, {semconv.ATTR_STEP: step})] if link is not None else None


def _group_done(key: tuple[int, bool], group: _Group, inst: _Instruments) -> None:
    """All of this worker's trajectories of a step are done: long-tail figures and an export."""
    done, group.done = group.done, []
    batch_span, group.batch_span = group.batch_span, None
    link, group.link = group.link, None
    if done:
        slowest, st = max(done, key=lambda d: d[0])
        median = statistics.median(d for d, _ in done)
        ratio = slowest / median if median > 0 else 1.0
        inst.tail_ratio.set(ratio, {semconv.ATTR_ROLLOUT_VALIDATE: key[1]})
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
            ctx = st.span.get_span_context()
            event[semconv.ATTR_ROLLOUT_SLOWEST_SPAN_ID] = format(ctx.span_id, "016x")
        if batch_span is not None and batch_span.is_recording():
            batch_span.add_event(semconv.EVENT_SLOWEST_TRAJECTORY, event)
        elif settings().rollout_spans_per_step != 0:
            tail = RUNTIME.telemetry.tracer.start_span(
                semconv.SPAN_ROLLOUT_TAIL,
                context=otel_context.Context(),  # a root: v1 requests outlive the dispatch
                attributes={
                    semconv.ATTR_ROLLOUT_SUBMIT_STEP: key[0],
                    semconv.ATTR_ROLLOUT_VALIDATE: key[1],
                    semconv.ATTR_ROLLOUT_TAIL_RATIO: ratio,
                },
                links=_links(link, key[0]),
            )
            tail.add_event(semconv.EVENT_SLOWEST_TRAJECTORY, event)
            tail.end()
    RUNTIME.telemetry.export_soon()  # not in the agent loop's event loop


async def _run_agent_loop_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    # v1: every TensorDict key reaches here as a keyword; a carrier no hook took out must not go further
    link = _link_from(kwargs.pop(propagation.CARRIER_KEY)) if propagation.CARRIER_KEY in kwargs else None
    st = _trajectory_start(args, kwargs, link)
    if st is None:
        return await wrapped(*args, **kwargs)
    traj_token = _traj_var.set(st)
    ctx_token = otel_context.attach(trace.set_span_in_context(st.span)) if st.span is not None else None
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        _trajectory_end(st, exc)
        raise
    finally:
        if ctx_token is not None:
            otel_context.detach(ctx_token)
        _traj_var.reset(traj_token)
    _trajectory_end(st, None)
    return result


@safe("rollout output attributes")
def _note_outputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    st = _traj_var.get()
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
    st.num_turns = _as_int(getattr(out, "num_turns", None))
    reward = getattr(out, "reward_score", None)
    if isinstance(reward, (int, float)) and not isinstance(reward, bool):
        st.reward = float(reward)


@safe("rollout child span start")
def _child_start(name: str, attrs: dict[str, Any], kind: SpanKind = SpanKind.INTERNAL) -> SpanState | None:
    """A child span of the current trajectory, if that trajectory has one (sampled)."""
    traj = _traj_var.get()
    if traj is None or traj.span is None:
        return None
    return open_span(name, context=trace.set_span_in_context(traj.span), kind=kind, attributes=attrs)


@safe("rollout reward span end")
def _reward_end(state: SpanState, error: BaseException | None) -> None:
    traj = _traj_var.get()
    if traj is not None and traj.reward is not None:
        state[0].set_attribute(semconv.ATTR_ROLLOUT_REWARD, traj.reward)
    close_span(state, error)


async def _compute_score_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    state = _child_start(semconv.SPAN_ROLLOUT_REWARD, {})
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        if state is not None:
            _reward_end(state, exc)
        raise
    _note_outputs(args, kwargs)  # reward and token counts onto the trajectory
    if state is not None:
        _reward_end(state, None)
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
    close_span(state, error)


async def _call_tool_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    state = _tool_start(args, kwargs)
    if state is None:
        return await wrapped(*args, **kwargs)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        _tool_end(state, None, exc)
        raise
    _tool_end(state, result, None)
    return result


# ------------------------------------------------------------------------------ LLM call
def _provider(instance: Any) -> str | None:
    if _STATE.provider is None:
        try:
            _STATE.provider = str(instance.config.actor_rollout_ref.rollout.name)
        except Exception:  # noqa: BLE001 - a custom client may have another config
            _STATE.provider = ""
    return _STATE.provider or None


@safe("rollout llm call start")
def _llm_start(instance: Any, kwargs: dict[str, Any]) -> _LLMCall:
    traj = _traj_var.get()
    validate = traj.validate if traj is not None else False
    span = None
    if traj is not None and traj.span is not None:
        attrs: dict[str, Any] = {
            semconv.GEN_AI_OPERATION_NAME: semconv.GEN_AI_OPERATION_TEXT_COMPLETION,
            semconv.ATTR_ROLLOUT_SUBMIT_STEP: traj.step,
            semconv.ATTR_ROLLOUT_VALIDATE: validate,
        }
        provider = _provider(instance)
        if provider:
            attrs[semconv.GEN_AI_PROVIDER_NAME] = provider
        prompt_ids = kwargs.get("prompt_ids")
        if prompt_ids is not None:
            attrs[semconv.GEN_AI_USAGE_INPUT_TOKENS] = len(prompt_ids)
        params = kwargs.get("sampling_params")
        if isinstance(params, dict):
            for key, attr in (
                ("max_tokens", semconv.GEN_AI_REQUEST_MAX_TOKENS),
                ("temperature", semconv.GEN_AI_REQUEST_TEMPERATURE),
                ("top_p", semconv.GEN_AI_REQUEST_TOP_P),
            ):
                value = params.get(key)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    attrs[attr] = value
        span = RUNTIME.telemetry.tracer.start_span(
            semconv.SPAN_ROLLOUT_LLM_CALL,
            context=trace.set_span_in_context(traj.span),
            kind=SpanKind.CLIENT,
            attributes=attrs,
        )
    return _LLMCall(span, time.perf_counter(), {semconv.ATTR_ROLLOUT_VALIDATE: validate})


@safe("rollout llm call end")
def _llm_end(call: _LLMCall, output: Any, error: BaseException | None) -> None:
    duration = time.perf_counter() - call.start
    status = _finish(call.span, error)
    _STATE.inst().llm_call.record(duration, {**call.attrs, semconv.ATTR_ROLLOUT_STATUS: status})
    span = call.span
    if span is None:
        return
    if output is not None:
        token_ids = getattr(output, "token_ids", None)
        if token_ids is not None:
            span.set_attribute(semconv.GEN_AI_USAGE_OUTPUT_TOKENS, len(token_ids))
        stop = getattr(output, "stop_reason", None)
        if stop is not None:
            span.set_attribute(semconv.GEN_AI_RESPONSE_FINISH_REASONS, [str(stop)])
        preempted = _as_int(getattr(output, "num_preempted", None))
        if preempted is not None and preempted >= 0:
            span.set_attribute(semconv.ATTR_ROLLOUT_PREEMPTIONS, preempted)
        extra = getattr(output, "extra_fields", None)
        if isinstance(extra, dict):
            cached = _as_int(extra.get("num_cached_tokens"))
            if cached is not None:
                span.set_attribute(semconv.ATTR_ROLLOUT_CACHED_TOKENS, cached)
            version = _as_int(extra.get("global_steps"))
            if version is not None:
                span.set_attribute(semconv.ATTR_ROLLOUT_WEIGHT_VERSION, version)
    span.end()


async def _generate_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    call = _llm_start(instance, kwargs)
    if call is None:
        return await wrapped(*args, **kwargs)
    token = _llm_var.set(call)
    try:
        output = await wrapped(*args, **kwargs)
    except BaseException as exc:
        _llm_end(call, None, exc)
        raise
    finally:
        _llm_var.reset(token)
    _llm_end(call, output, None)
    return output


@safe("rollout server id")
def _note_server(result: Any, waited_s: float) -> None:
    call = _llm_var.get()
    if call is not None and call.span is not None and isinstance(result, tuple) and result:
        call.span.set_attribute(semconv.ATTR_ROLLOUT_SERVER_ID, str(result[0]))
        call.span.set_attribute(semconv.ATTR_ROLLOUT_SERVER_WAIT, waited_s)


async def _acquire_server_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    start = time.perf_counter()  # the load balancer's answer: its queueing shows here
    result = await wrapped(*args, **kwargs)
    _note_server(result, time.perf_counter() - start)
    return result


# ------------------------------------------------------------------------------ v0 hand-off
@safe("rollout carrier inject")
def _inject(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if RUNTIME.trainer is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    prompts = kwargs.get("prompts", args[0] if args else None)
    if type(prompts).__name__ != "DataProto" or not propagation.inject(prompts):
        return None
    return prompts


@safe("rollout carrier cleanup")
def _take(prompts: Any) -> None:
    propagation.take(prompts)


def _caller_is_async() -> bool:
    frame = sys._getframe(2)  # 0: here, 1: the wrapper, 2: its caller (wrapt's C proxy adds no frame)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("wrapt"):
        frame = frame.f_back
    return frame is not None and bool(frame.f_code.co_flags & inspect.CO_COROUTINE)


async def _inject_then_await(inner: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    prompts = _inject(args, kwargs)
    try:
        return await inner(instance, *args, **kwargs)
    finally:
        if prompts is not None:
            _take(prompts)


def _manager_generate_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``AgentLoopManager.generate_sequences`` is verl's ``auto_await``: it looks at its caller's
    frame to decide whether to return a coroutine. Called from a coroutine, this wrapper must
    not stand in between, so it calls the undecorated function and returns the coroutine itself."""
    inner = getattr(getattr(wrapped, "__func__", wrapped), "__wrapped__", None)
    if inner is not None and _caller_is_async():
        return _inject_then_await(inner, instance, args, kwargs)
    prompts = _inject(args, kwargs)
    try:
        return wrapped(*args, **kwargs)  # runs to completion (asyncio.run or verl's thread)
    finally:
        if prompts is not None:
            _take(prompts)


@safe("rollout batch start")
def _batch_start(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
    _identify()
    batch = kwargs.get("batch", args[0] if args else None)
    parent = propagation.take(batch) if type(batch).__name__ == "DataProto" else None
    if parent is None:
        return None  # not dispatched from a traced step: trajectories still get their own spans
    meta = getattr(batch, "meta_info", {}) or {}
    attrs: dict[str, Any] = {semconv.ATTR_ROLLOUT_VALIDATE: bool(meta.get("validate", False))}
    step = _as_int(meta.get("global_steps"))
    if step is not None:
        attrs[semconv.ATTR_ROLLOUT_SUBMIT_STEP] = step
    try:
        attrs[semconv.ATTR_ROLLOUT_BATCH_SIZE] = len(batch)
    except Exception:  # noqa: BLE001
        pass
    return open_span(semconv.SPAN_ROLLOUT_BATCH, context=parent, kind=SpanKind.SERVER, attributes=attrs)


@safe("rollout batch end")
def _batch_end(state: SpanState, error: BaseException | None) -> None:
    close_span(state, error)
    RUNTIME.telemetry.request_flush()


async def _worker_generate_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    state = _batch_start(args, kwargs)
    if state is None:
        link = _take_link(args, kwargs)  # v1 (TensorDict): the tasks verl spawns inherit the link
        if link is None:
            return await wrapped(*args, **kwargs)
        link_token = _link_var.set(link)
        try:
            return await wrapped(*args, **kwargs)
        finally:
            _link_var.reset(link_token)
    batch_token = _batch_var.set(state[0])
    try:
        return await call_traced_async(state, _batch_end, wrapped, *args, **kwargs)
    finally:
        _batch_var.reset(batch_token)


# ------------------------------------------------------------------------------ v1 hand-off (links)
@safe("rollout v1 link target")
def _v1_link_context() -> Any:
    """The context a v1 dispatch sends: the ``verl.gen`` span of the current step (promised when
    the dispatch runs under ``verl.step``, before that stage starts), else the current span."""
    if RUNTIME.trainer is None:
        return None
    span = trace.get_current_span()
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None  # outside any span (async warm-up before the first step): no link
    if getattr(span, "name", None) == semconv.SPAN_STEP:
        span_id = propagation.promise_span_id(RUNTIME.telemetry.tracer, ctx.trace_id, semconv.SPAN_GEN)
        if span_id is not None:
            ctx = SpanContext(ctx.trace_id, span_id, False, ctx.trace_flags, ctx.trace_state)
    return trace.set_span_in_context(NonRecordingSpan(ctx))


@safe("rollout v1 carrier inject")
def _inject_v1(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    prompts = kwargs.get("prompts", args[0] if args else None)
    if type(prompts).__name__ != "TensorDict":
        return None
    context = _v1_link_context()
    if context is None or not propagation.inject(prompts, context):
        return None
    return prompts


def _manager_tq_generate_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``AgentLoopManagerTQ.generate_sequences`` (TaskRunner, plain method): the carrier rides in the
    prompts for this call only (``prompts.chunk`` copies it into every worker's chunk)."""
    prompts = _inject_v1(args, kwargs)
    try:
        return wrapped(*args, **kwargs)
    finally:
        if prompts is not None:
            _take(prompts)


@safe("rollout v1 carrier keyword")
def _link_from(value: Any) -> SpanContext | None:
    context = propagation.extract(value)
    if context is None:
        return None
    link = trace.get_current_span(context).get_span_context()
    return link if link.is_valid else None


@safe("rollout v1 carrier take")
def _take_link(args: tuple[Any, ...], kwargs: dict[str, Any]) -> SpanContext | None:
    batch = kwargs.get("batch", args[0] if args else None)
    if type(batch).__name__ != "TensorDict" or propagation.CARRIER_KEY not in batch.keys():
        return None
    context = propagation.take(batch)
    link = trace.get_current_span(context).get_span_context() if context is not None else None
    return link if link is not None and link.is_valid else None


# ------------------------------------------------------------------------------ Ray actor classes
# Ray's ``_inject_tracing_into_class`` puts a copy of every method into the actor class it
# creates (``ray.remote(AgentLoopWorker)`` -> a subclass): in the TaskRunner that copy is
# taken from verl's class and pickled by value, so in the agent-loop worker the actor's
# methods are plain copies that the hooks on ``AgentLoopWorker`` never see. When the worker
# loads the actor class, the copies of the methods we trace get our wrappers too.
_ACTOR_METHODS = {
    "generate_sequences": _worker_generate_wrapper,
    "_run_agent_loop": _run_agent_loop_wrapper,
    "_compute_score": _compute_score_wrapper,
}


def _is_agent_loop_worker(klass: Any) -> bool:
    return klass.__name__ == "AgentLoopWorker" and klass.__module__ == AGENT_LOOP


@safe("rollout actor class")
def _patch_actor_class(cls: Any) -> None:
    mro = getattr(cls, "__mro__", ())
    base = next((k for k in mro if _is_agent_loop_worker(k) and k.__dict__.get("__ray_actor_class__") is None), None)
    if base is None or base is cls:
        return
    import wrapt

    for name, wrapper in _ACTOR_METHODS.items():
        for klass in mro:
            if klass is base:
                break  # verl's own class: wrapped by the hooks below
            own = klass.__dict__.get(name)
            if own is None:
                continue
            if not isinstance(own, wrapt.FunctionWrapper):
                wrapt.wrap_function_wrapper(klass, name, wrapper)
            break


def _load_actor_class_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    _patch_actor_class(args[0] if args else kwargs.get("_cls"))
    return result


HOOKS = [
    Hook(AGENT_LOOP, "AgentLoopManager.generate_sequences", _manager_generate_wrapper, optional=True),
    Hook(AGENT_LOOP_TQ, "AgentLoopManagerTQ.generate_sequences", _manager_tq_generate_wrapper, optional=True),
    Hook(AGENT_LOOP, "AgentLoopWorker.generate_sequences", _worker_generate_wrapper, optional=True),
    Hook(AGENT_LOOP, "AgentLoopWorker._run_agent_loop", _run_agent_loop_wrapper),
    Hook(AGENT_LOOP, "AgentLoopWorker._compute_score", _compute_score_wrapper),
    Hook(LLM_SERVER, "LLMServerClient.generate", _generate_wrapper),
    Hook(LLM_SERVER, "LLMServerClient._acquire_server", _acquire_server_wrapper, optional=True),
    Hook(TOOL_AGENT_LOOP, "ToolAgentLoop._call_tool", _call_tool_wrapper, optional=True),
    # worker side of Ray's actor-class loading only (the driver side must stay unpatched: it pickles)
    Hook("ray._private.function_manager", "_inject_tracing_into_class", _load_actor_class_wrapper, optional=True),
]
