"""LLM call spans: every engine call of an agent loop (``LLMServerClient.generate``).

``verl.rollout.llm_call`` (CLIENT, child of the sampled trajectory) with the ``gen_ai.*`` request
and usage attributes; ``LLMServerClient._acquire_server`` adds the server id and the seconds the
load balancer took to hand it out. The ``verl.rollout.llm_call.duration`` histogram counts every
call, sampled or not. ``LLMServerClient._vllm_request_id`` (the id verl makes for each engine
call) carries the call's trace context to the rollout server and its engine (``engine_context``).
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from otel_verl import semconv
from otel_verl._safe import safe
from otel_verl._values import as_int
from otel_verl.hooks.rollout import engine_context
from otel_verl.hooks.rollout import state as rs
from otel_verl.hooks.spans import call_traced_async, start_span


def _provider(instance: Any) -> str | None:
    st = rs.STATE
    if st.provider is None:
        try:
            st.provider = str(instance.config.actor_rollout_ref.rollout.name)
        except Exception:  # noqa: BLE001 - a custom client may have another config
            st.provider = ""
    return st.provider or None


def _request_attributes(instance: Any, traj: rs.Trajectory, kwargs: dict[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        semconv.GEN_AI_OPERATION_NAME: semconv.GEN_AI_OPERATION_TEXT_COMPLETION,
        semconv.ATTR_ROLLOUT_SUBMIT_STEP: traj.step,
        semconv.ATTR_ROLLOUT_VALIDATE: traj.validate,
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
    return attrs


@safe("rollout llm call start")
def _llm_start(instance: Any, kwargs: dict[str, Any]) -> rs.LLMCall:
    traj = rs.TRAJECTORY.get()
    validate = traj.validate if traj is not None else False
    span = None
    if traj is not None and traj.span is not None:
        span = start_span(
            semconv.SPAN_ROLLOUT_LLM_CALL,
            context=trace.set_span_in_context(traj.span),
            kind=SpanKind.CLIENT,
            attributes=_request_attributes(instance, traj, kwargs),
        )
    call = rs.LLMCall(span, time.perf_counter(), {semconv.ATTR_ROLLOUT_VALIDATE: validate})
    call.token = rs.LLM_CALL.set(call)  # _acquire_server, inside the call, finds it here
    return call


def _response_attributes(attrs: dict[str, Any], output: Any) -> None:
    token_ids = getattr(output, "token_ids", None)
    if token_ids is not None:
        attrs[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = len(token_ids)
    stop = getattr(output, "stop_reason", None)
    if stop is not None:
        attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = [str(stop)]
    preempted = as_int(getattr(output, "num_preempted", None))
    if preempted is not None and preempted >= 0:
        attrs[semconv.ATTR_ROLLOUT_PREEMPTIONS] = preempted
    extra = getattr(output, "extra_fields", None)
    if isinstance(extra, dict):
        cached = as_int(extra.get("num_cached_tokens"))
        if cached is not None:
            attrs[semconv.ATTR_ROLLOUT_CACHED_TOKENS] = cached
        version = as_int(extra.get("global_steps"))
        if version is not None:
            attrs[semconv.ATTR_ROLLOUT_WEIGHT_VERSION] = version


@safe("rollout llm call end")
def _llm_end(call: rs.LLMCall, output: Any, error: BaseException | None) -> None:
    if call.token is not None:
        rs.LLM_CALL.reset(call.token)
        call.token = None
    duration = time.perf_counter() - call.start
    status = rs.status_of(call.span, error)
    rs.metrics().llm_call.record(duration, {**call.attrs, semconv.ATTR_ROLLOUT_STATUS: status})
    span = call.span
    if span is None:
        return
    attrs: dict[str, Any] = {semconv.ATTR_ROLLOUT_STATUS: status}
    if output is not None:
        _response_attributes(attrs, output)
    span.set_attributes(attrs)  # one call: the SDK takes the span's lock once
    span.end()


async def generate_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return await call_traced_async(_llm_start(instance, kwargs), _llm_end, wrapped, *args, **kwargs)


@safe("rollout server id")
def _note_server(result: Any, waited_s: float) -> None:
    call = rs.LLM_CALL.get()
    if call is not None and call.span is not None and isinstance(result, tuple) and result:
        call.span.set_attributes(
            {semconv.ATTR_ROLLOUT_SERVER_ID: str(result[0]), semconv.ATTR_ROLLOUT_SERVER_WAIT: waited_s}
        )


async def acquire_server_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    start = time.perf_counter()  # the load balancer's answer: its queueing shows here
    result = await wrapped(*args, **kwargs)
    _note_server(result, time.perf_counter() - start)
    return result


@safe("rollout engine context")
def _carry(instance: Any, request_id: Any) -> Any:
    if not engine_context.enabled(_provider(instance)):
        return request_id
    call = rs.LLM_CALL.get()
    if call is None:
        return request_id  # not inside an LLM call we traced: no context of ours to hand on
    # the sampled call's span; in a trajectory the span budget left out, its unsampled parent
    context = trace.set_span_in_context(call.span) if call.span is not None else None
    return engine_context.attach(request_id, engine_context.traceparent(context))


def request_id_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``LLMServerClient._vllm_request_id(request_id)``: verl's id for one engine call, with the
    call's ``traceparent`` for the server (which takes it off again: ``server``)."""
    request_id = wrapped(*args, **kwargs)
    carried = _carry(instance, request_id)
    return request_id if carried is None else carried
