"""LLM call spans: every engine call of an agent loop (``LLMServerClient.generate``).

One CLIENT span per call, a child of the trajectory, named and attributed by the GenAI conventions
(``semconv.llm_call_span_name``: ``text_completion <model>``, so that backends with LLM views take it
for what it is; readers find it with ``semconv.is_llm_call``). Operation ``text_completion``: verl
sends the engine a templated prompt as token ids and takes its continuation back; the model is the
one the rollout serves (``model_name``); the conversation is verl's request id of the trajectory (the
one its load balancer keeps a sticky session for); the sampling settings, usage, finish reason and
``error.type``. Never the prompt or the response. ``LLMServerClient._acquire_server`` adds the server
(its id, and as ``server.address``/``server.port`` the replica's HTTP address that id is) and the
seconds the load balancer took to hand it out (and, on v1, the first call of a prompt group adds that
server to the group's status: ``poll_lag.note_replica``); ``LLMServerClient._vllm_request_id`` the id the engine
knows the call by (``gen_ai.response.id``). A record until its trajectory's tree is decided
(``trajectory``); the ``verl.rollout.llm_call.duration`` histogram and the GenAI client metrics
(``gen_ai.client.operation.duration``, ``gen_ai.client.token.usage``) count every call, kept or not.
``_vllm_request_id`` also carries the call's trace context to the rollout server and its engine
(``engine_context``); the engine's spans of an undecided tree come back in the server's reply
(``engine_handback``) and follow the tree's fate.
"""

from __future__ import annotations

import re
import time
from typing import Any

from opentelemetry.trace import SpanKind

from otel_verl import semconv
from otel_verl._safe import safe
from otel_verl._values import as_int
from otel_verl.hooks import poll_lag
from otel_verl.hooks.rollout import engine_context, engine_handback, trajectory
from otel_verl.hooks.rollout import state as rs
from otel_verl.hooks.spans import call_traced_async


def _provider(instance: Any) -> str | None:
    st = rs.STATE
    if st.provider is None:
        try:
            st.provider = str(instance.config.actor_rollout_ref.rollout.name)
        except Exception:  # noqa: BLE001 - a custom client may have another config
            st.provider = ""
    return st.provider or None


_MODEL_MAX = 256  # a name, not a path: bounded whatever the config holds


def model_name(config: Any) -> str | None:
    """The model verl's rollout serves, as ``gen_ai.request.model``.

    ``rollout.prometheus.served_model_name`` when set (its last path part: the name verl has the
    engine serve under); else ``actor_rollout_ref.model.path``: a Hugging Face id (``Qwen/Qwen3-8B``)
    as is, a Hub cache folder (``.../models--Qwen--Qwen3-8B/snapshots/<hash>``) as its id, any other
    path (local, ``hdfs://``, ...) by its last part only: the rest names the user's folders.
    """
    ref = config.actor_rollout_ref
    served = None
    try:
        served = ref.rollout.prometheus.served_model_name
    except Exception:  # noqa: BLE001 - older verl: no prometheus block
        pass
    if isinstance(served, str) and served.strip("/ "):
        name = served.strip("/ ").rsplit("/", 1)[-1]
    else:
        path = ref.model.path
        if not isinstance(path, str) or not path.strip("/ "):
            return None
        name = _name_of_path(path.strip().rstrip("/"))
    return name[:_MODEL_MAX] or None


def _name_of_path(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    for part in parts:
        if part.startswith("models--") and part.count("--") >= 2:  # the Hub cache's folder of one model
            return "/".join(part.split("--", 2)[1:])
    if len(parts) == 2 and "://" not in path and path[0] not in "/.~":  # org/name: a Hub id
        return path
    return parts[-1]


def _model(instance: Any) -> str | None:
    st = rs.STATE
    if st.model is None:
        try:
            st.model = model_name(instance.config) or ""
        except Exception:  # noqa: BLE001 - a custom client may have another config
            st.model = ""
    return st.model or None


_ID_MAX = 256  # verl's ids are uuids; a custom agent loop's are bounded all the same


def _an_id(value: Any) -> str | None:
    return value[:_ID_MAX] if isinstance(value, str) and value else None


def _request_attributes(
    instance: Any, traj: rs.Trajectory, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        **_gen_ai_attributes(instance).duration,  # operation, provider, model: the metrics' own
        semconv.ATTR_ROLLOUT_SUBMIT_STEP: traj.step,
        semconv.ATTR_ROLLOUT_VALIDATE: traj.validate,
    }
    # generate(request_id, ...): the agent loop's id of the trajectory, the same for all its turns
    conversation = _an_id(args[0] if args else kwargs.get("request_id"))
    if conversation:
        attrs[semconv.GEN_AI_CONVERSATION_ID] = conversation
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
        top_k = params.get("top_k")
        if isinstance(top_k, (int, float)) and not isinstance(top_k, bool) and top_k > 0:  # -1 / 0: no top-k
            attrs[semconv.GEN_AI_REQUEST_TOP_K] = float(top_k)  # a double in the conventions
        seed = params.get("seed")
        if isinstance(seed, int) and not isinstance(seed, bool):
            attrs[semconv.GEN_AI_REQUEST_SEED] = seed
    return attrs


def _gen_ai_attributes(instance: Any) -> rs.GenAIAttributes:
    """The GenAI client metrics' attributes of this process's calls: the conventions' required and
    conditionally required ones otel-verl knows, no per-call value (bounded series)."""
    st = rs.STATE
    if st.gen_ai is None:
        base: dict[str, Any] = {semconv.GEN_AI_OPERATION_NAME: semconv.GEN_AI_OPERATION_TEXT_COMPLETION}
        provider = _provider(instance)
        if provider:
            base[semconv.GEN_AI_PROVIDER_NAME] = provider
        model = _model(instance)
        if model:
            base[semconv.GEN_AI_REQUEST_MODEL] = model
        st.gen_ai = rs.GenAIAttributes(base)
    return st.gen_ai


def _token_count(ids: Any) -> int | None:
    try:
        return len(ids) if ids is not None else None
    except TypeError:  # not a sequence: no count
        return None


@safe("rollout llm call start")
def _llm_start(instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> rs.LLMCall:
    traj = rs.TRAJECTORY.get()
    validate = traj.validate if traj is not None else False
    input_tokens = _token_count(kwargs.get("prompt_ids"))
    rec = None
    if traj is not None and traj.rec is not None:
        attrs = _request_attributes(instance, traj, args, kwargs)
        if input_tokens is not None:
            attrs[semconv.GEN_AI_USAGE_INPUT_TOKENS] = input_tokens
        name = semconv.llm_call_span_name(attrs.get(semconv.GEN_AI_REQUEST_MODEL))
        rec = trajectory.child_record(traj, name, attrs, SpanKind.CLIENT)
    gen_ai = _gen_ai_attributes(instance)
    call = rs.LLMCall(rec, rs.clock(), {semconv.ATTR_ROLLOUT_VALIDATE: validate}, traj, gen_ai, input_tokens)
    call.token = rs.LLM_CALL.set(call)  # _acquire_server, inside the call, finds it here
    return call


def _response_attributes(attrs: dict[str, Any], output: Any, output_tokens: int | None) -> None:
    if output_tokens is not None:
        attrs[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = output_tokens
    stop = getattr(output, "stop_reason", None)
    if stop is not None:
        attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = (str(stop),)  # a sequence, as the SDK stores it
    preempted = as_int(getattr(output, "num_preempted", None))
    if preempted is not None and preempted >= 0:
        attrs[semconv.ATTR_ROLLOUT_PREEMPTIONS] = preempted
    extra = getattr(output, "extra_fields", None)
    if isinstance(extra, dict):
        cached = as_int(extra.get("num_cached_tokens"))  # vLLM's prefix-cache hits, part of the input tokens
        if cached is not None and cached >= 0:
            attrs[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = cached
        version = as_int(extra.get("global_steps"))
        if version is not None:
            attrs[semconv.ATTR_ROLLOUT_WEIGHT_VERSION] = version


@safe("rollout llm call end")
def _llm_end(call: rs.LLMCall, output: Any, error: BaseException | None) -> None:
    if output is not None:
        _take_engine_spans(output)  # first: before verl's code reads the reply's extra fields
    if call.token is not None:
        rs.LLM_CALL.reset(call.token)
        call.token = None
    duration = rs.clock() - call.start
    status = rs.status_of(error)
    error_type = _error_type(error) if error is not None else None
    output_tokens = _token_count(getattr(output, "token_ids", None)) if output is not None else None
    _record(call, duration, status, error_type, output_tokens)
    rec = call.rec
    if rec is None:
        return
    rec.attributes[semconv.ATTR_ROLLOUT_STATUS] = status
    if error_type is not None:  # the GenAI conventions require it on a failed call
        rec.attributes[semconv.ATTR_ERROR_TYPE] = error_type
    if output is not None:
        _response_attributes(rec.attributes, output, output_tokens)
    rs.ended(rec, time.time_ns(), status, error)


def _record(call: rs.LLMCall, duration: float, status: str, error_type: str | None, output_tokens: int | None) -> None:
    """The call's histograms, every call's, kept or not: ``verl.rollout.llm_call.duration`` and the
    GenAI client metrics (its duration; its tokens when it returned), queued as one entry."""
    inst = rs.metrics()
    values = [(inst.llm_call, duration, {**call.attrs, semconv.ATTR_ROLLOUT_STATUS: status})]
    gen_ai = call.gen_ai
    if gen_ai is not None:
        attrs = gen_ai.duration if error_type is None else {**gen_ai.duration, semconv.ATTR_ERROR_TYPE: error_type}
        values.append((inst.gen_ai_duration, duration, attrs))
        if error_type is None and output_tokens is not None:  # a failed call reports no usage
            if call.input_tokens is not None:
                values.append((inst.gen_ai_tokens, call.input_tokens, gen_ai.input))
            values.append((inst.gen_ai_tokens, output_tokens, gen_ai.output))
    # exemplar: the trajectory's span (its trace holds the call) once its tree was exported, else none
    inst.deferred.record_all(tuple(values), trajectory.exemplar_context(call.trajectory))


def _error_type(error: BaseException) -> str:
    module, qualname = type(error).__module__, type(error).__qualname__
    return f"{module}.{qualname}" if module and module != "builtins" else qualname


async def generate_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    call = _llm_start(instance, args, kwargs)
    if call is None:  # no end hook then: the engine's spans are taken here
        output = await wrapped(*args, **kwargs)
        _safe_take_engine_spans(output)
        return output
    return await call_traced_async(call, _llm_end, wrapped, *args, **kwargs)  # _llm_end takes them


@safe("rollout engine hand-back")
def _safe_take_engine_spans(output: Any) -> None:
    _take_engine_spans(output)


def _take_engine_spans(output: Any) -> None:
    data = engine_handback.take(output)  # before verl's code reads the reply's extra fields
    traj = rs.TRAJECTORY.get()
    if data is not None and traj is not None and traj.rec is not None:
        traj.handback(data)


# verl's server id is the replica's HTTP address as verl writes it: ``host:port``, ``[v6]:port``
_HOST_PORT = re.compile(r"(?:\[([0-9A-Fa-f:.]{2,45})\]|([A-Za-z0-9._-]{1,253})):([0-9]{1,5})")


def server_endpoint(server_id: str) -> tuple[str, int] | None:
    """``server.address`` and ``server.port`` of the replica whose id verl's load balancer handed
    out, when that id is an address (verl's engines: the replica's HTTP server); None for any other
    id (a custom balancer's names, the CPU harness's actor names)."""
    m = _HOST_PORT.fullmatch(server_id)
    if m is None:
        return None
    port = int(m.group(3))
    return (m.group(1) or m.group(2), port) if 0 < port < 65536 else None


@safe("rollout server id")
def _note_server(result: Any, waited_s: float) -> None:
    call = rs.LLM_CALL.get()
    if call is not None and call.rec is not None and isinstance(result, tuple) and result:
        server_id = str(result[0])
        attrs = call.rec.attributes
        attrs[semconv.ATTR_ROLLOUT_SERVER_ID] = server_id
        attrs[semconv.ATTR_ROLLOUT_SERVER_WAIT] = waited_s
        endpoint = server_endpoint(server_id)
        if endpoint is not None:
            attrs[semconv.ATTR_SERVER_ADDRESS], attrs[semconv.ATTR_SERVER_PORT] = endpoint


async def acquire_server_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    start = time.perf_counter()  # the load balancer's answer: its queueing shows here
    result = await wrapped(*args, **kwargs)
    _note_server(result, time.perf_counter() - start)
    if isinstance(result, tuple) and result:
        await poll_lag.note_replica(result[0])  # v1: the group's status names its replica (once per group)
    return result


@safe("rollout engine context")
def _carry(instance: Any, request_id: Any) -> Any:
    call = rs.LLM_CALL.get()
    if call is not None and call.rec is not None:
        response_id = _an_id(request_id)  # verl's own id, as the engine gets it (the server strips ours)
        if response_id:
            call.rec.attributes[semconv.GEN_AI_RESPONSE_ID] = response_id
    if not engine_context.enabled(_provider(instance)):
        return request_id
    if call is None:
        return request_id  # not inside an LLM call we traced: no context of ours to hand on
    if call.rec is None:  # a trajectory left unrecorded: an unsampled parent leaves the engine's span out
        return engine_context.attach(request_id, engine_context.unsampled_traceparent())
    rec = call.rec
    return engine_context.attach(request_id, engine_context.record_traceparent(rec.trace_id, rec.span_id), held=True)


def request_id_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``LLMServerClient._vllm_request_id(request_id)``: verl's id for one engine call, with the
    call's ``traceparent`` for the server (which takes it off again: ``server``)."""
    request_id = wrapped(*args, **kwargs)
    carried = _carry(instance, request_id)
    return request_id if carried is None else carried
