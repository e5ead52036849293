"""The LLM call's trace context, from the agent-loop worker to the rollout engine.

verl's client calls its server as ``server.generate.remote(request_id=..., prompt_ids=...,
sampling_params=..., ...)``; no server's ``generate`` takes extra keyword arguments (Ray checks
them against the signature at the caller), a private key in ``sampling_params`` would reach the
engine's own ``SamplingParams(**...)`` and fail if nothing removed it, and Ray's own
``_ray_trace_ctx`` is refused at the caller while Ray tracing is off. The one argument that can
carry it and is harmless wherever it is not removed is the request id: verl makes a fresh one per
engine call (``LLMServerClient._vllm_request_id``) and the server only hands it on as a string.

* In the agent-loop worker (``llm``), ``_vllm_request_id``'s answer gets the call's W3C
  ``traceparent`` appended after ``SEPARATOR``: the LLM call's record, whose tree is
  decided only when its trajectory ends, after ``HELD_SEPARATOR`` (the server holds the engine's
  spans and hands them back: ``engine_handback``); inside a trajectory that is not recorded, an
  unsampled parent (so the engine's span is left out too). Only for the engines that trace
  requests (``ENGINES``) and while ``OTEL_VERL_ENGINE_TRACING`` allows it.
* In the server actor (``server``), before verl's ``generate`` runs, the suffix is taken off again
  (verl, the load balancer's bookkeeping and the engine see verl's own id) and the context is kept
  in ``ENGINE_HEADERS`` for the engine call of that request (``engine``: vLLM's ``trace_headers``,
  SGLang's ``external_trace_header``).

A suffix is read only in its exact W3C form (``version-traceid-spanid-flags``, lower-case hex) at
the end of the id; anything else is left as it is and carries no context. Where the server hook is
missing the engine sees the longer id, nothing else changes.
"""

from __future__ import annotations

import contextvars
import random
import re
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from otel_verl.config import settings

SEPARATOR = "|otel-verl|"
HELD_SEPARATOR = "|otel-verl-held|"  # the engine's spans go back with the reply (engine_handback)
ENGINES = ("vllm", "sglang")  # rollout backends whose engine traces a request given a traceparent
_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
MAX_REQUEST_ID_CHARS = 4096  # a longer id is left alone (and read no further)
_PROPAGATOR = TraceContextTextMapPropagator()

# W3C trace headers ({"traceparent": ...}) for the engine call of the request this task serves
ENGINE_HEADERS: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "otel_verl_engine_headers", default=None
)


def enabled(provider: str | None) -> bool:
    """Whether calls to rollout backend ``provider`` carry their context to the engine."""
    return settings().engine_tracing != "false" and provider in ENGINES


def traceparent(context: otel_context.Context | None) -> str | None:
    """The W3C ``traceparent`` of the span in ``context`` (None: no valid span there)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=context)
    value = carrier.get("traceparent")
    return value if isinstance(value, str) and _TRACEPARENT.fullmatch(value) else None


def record_traceparent(trace_id: int, span_id: int) -> str:
    """The ``traceparent`` of a sampled span record (``hooks.rollout.span_records.Rec``)."""
    return f"00-{trace_id:032x}-{span_id:016x}-01"


def unsampled_traceparent() -> str:
    """A ``traceparent`` whose children are not sampled (fresh ids: it names no span of ours)."""
    return f"00-{random.getrandbits(128) | 1:032x}-{random.getrandbits(64) | 1:016x}-00"


def attach(request_id: Any, parent: str | None, held: bool = False) -> Any:
    """``request_id`` carrying ``parent`` (a ``traceparent``; ``held``: the server is to hand the
    engine's spans back); unchanged when either is not usable."""
    if parent is None or not isinstance(request_id, str) or SEPARATOR in request_id or HELD_SEPARATOR in request_id:
        return request_id
    if len(request_id) > MAX_REQUEST_ID_CHARS:
        return request_id
    return f"{request_id}{HELD_SEPARATOR if held else SEPARATOR}{parent}"


def detach(request_id: Any) -> tuple[Any, str | None, bool]:
    """``(verl's request id, traceparent or None, held)`` from what the server was given."""
    if not isinstance(request_id, str) or len(request_id) > MAX_REQUEST_ID_CHARS + 100:
        return request_id, None, False
    for separator, held in ((HELD_SEPARATOR, True), (SEPARATOR, False)):
        base, sep, parent = request_id.rpartition(separator)
        if sep and _TRACEPARENT.fullmatch(parent) is not None:
            return base, parent, held
    return request_id, None, False
