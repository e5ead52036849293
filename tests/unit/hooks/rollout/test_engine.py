"""The LLM call's context to the rollout engine (``engine_context``, ``llm``, ``server``, ``engine``):
verl's real agent-loop worker and ``LLMServerClient``; a server of verl's protocol and an engine
with vLLM's ``AsyncLLM`` signatures behind it (vLLM itself runs in tests/e2e/test_vllm_rollout.py).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
import wrapt
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from verl.workers.rollout.replica import TokenOutput
from verl_cpu_harness.agent_loop import CONFIG, FakeBalancer, _Remote, by_name, llm_calls, make_batch, make_worker

from otel_verl import semconv
from otel_verl.config import settings
from otel_verl.hooks.rollout import engine, engine_context, server

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


# ------------------------------------------------------------------ the carrier itself
def test_attach_then_detach_gives_verls_id_and_the_context_back():
    carried = engine_context.attach("abc123", TP)
    assert carried == f"abc123{engine_context.SEPARATOR}{TP}"
    assert engine_context.detach(carried) == ("abc123", TP, False)
    held = engine_context.attach("abc123", TP, held=True)
    assert held == f"abc123{engine_context.HELD_SEPARATOR}{TP}"
    assert engine_context.detach(held) == ("abc123", TP, True)


@pytest.mark.parametrize(
    "given",
    [
        "plain-id",
        f"id{engine_context.SEPARATOR}",
        f"id{engine_context.SEPARATOR}{TP.upper()}",  # W3C is lower-case hex
        f"id{engine_context.SEPARATOR}00-{'0' * 32}-b7ad6b7169203331-01",  # invalid trace id
        f"id{engine_context.SEPARATOR}00-0af7651916cd43dd8448eb211c80319c-{'0' * 16}-01",  # invalid span id
        f"id{engine_context.SEPARATOR}{TP}-extra",
        f"id{engine_context.SEPARATOR}{TP}\n",
        f"id{engine_context.SEPARATOR}ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "x" * 10_000 + f"{engine_context.SEPARATOR}{TP}",  # too long to be read
        f"id{engine_context.HELD_SEPARATOR}{TP}-extra",
        12345,
        None,
    ],
)
def test_anything_but_an_exact_traceparent_suffix_is_left_alone(given):
    assert engine_context.detach(given) == (given, None, False)


def test_attach_leaves_ids_it_cannot_carry_unchanged():
    assert engine_context.attach("id", None) == "id"
    assert engine_context.attach(42, TP) == 42
    already = engine_context.attach("id", TP)
    assert engine_context.attach(already, TP) == already  # never two suffixes


def test_traceparent_of_sampled_unsampled_and_no_span():
    sampled = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, False, TraceFlags(1))
    unsampled = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, False, TraceFlags(0))
    assert engine_context.traceparent(trace.set_span_in_context(NonRecordingSpan(sampled))) == TP
    assert engine_context.traceparent(trace.set_span_in_context(NonRecordingSpan(unsampled))) == TP[:-2] + "00"
    assert engine_context.traceparent(otel_context.Context()) is None


# ------------------------------------------------------------------ through verl's client, a server, an engine
class _FakeAsyncLLM:
    """vLLM's ``AsyncLLM.generate`` signature (an async generator, ``trace_headers`` keyword-only)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    async def generate(self, prompt, sampling_params, request_id, *, prompt_text=None, trace_headers=None, priority=0):
        self.calls.append((request_id, trace_headers))
        yield sampling_params["max_tokens"]


class _EngineServer:
    """verl's server protocol (``vLLMHttpServer.generate``), an engine behind it."""

    replica_rank = 0

    def __init__(self) -> None:
        self.engine = _FakeAsyncLLM()
        self.request_ids: list[str] = []

    async def generate(self, prompt_ids, sampling_params, request_id, image_data=None, video_data=None, priority=0):
        self.request_ids.append(request_id)
        last = None
        async for out in self.engine.generate(prompt_ids, sampling_params, request_id):
            last = out
        return TokenOutput(token_ids=[7] * last, stop_reason="completed", extra_fields={"global_steps": 3})


@pytest.fixture
def engine_server(monkeypatch):
    class Server(_EngineServer):
        pass

    class Engine(_FakeAsyncLLM):
        pass

    wrapt.wrap_function_wrapper(Server, "generate", server.generate_wrapper)  # what ray_actor does
    wrapt.wrap_function_wrapper(Engine, "generate", engine.vllm_generate_wrapper)  # the vLLM hook
    srv = Server()
    srv.engine = Engine()
    return srv


def _worker_on(srv, rollout_name="vllm"):
    worker = make_worker()
    config = CONFIG.copy()
    config.actor_rollout_ref.rollout.name = rollout_name
    worker.llm_client.config = config

    class Handle:
        generate = _Remote(lambda **kw: srv.generate(**kw))

    worker.llm_client._load_balancer = FakeBalancer(Handle())
    return worker


def _engine_parents(srv) -> list[str]:
    return [headers["traceparent"] for _, headers in srv.engine.calls]


def test_every_engine_call_gets_its_llm_calls_context_and_verls_own_request_id(captured, engine_server):
    asyncio.run(_worker_on(engine_server).generate_sequences(make_batch()))

    calls = llm_calls(captured)
    assert len(calls) == 4 and len(engine_server.engine.calls) == 4
    expected = {f"00-{c.context.trace_id:032x}-{c.context.span_id:016x}-{c.context.trace_flags:02x}" for c in calls}
    assert set(_engine_parents(engine_server)) == expected  # each engine request under its own LLM call
    for request_id in engine_server.request_ids + [rid for rid, _ in engine_server.engine.calls]:
        uuid.UUID(hex=request_id)  # verl's fresh id per call, nothing of ours left on it


def test_a_trajectory_left_out_hands_the_engine_an_unsampled_parent(captured, engine_server, monkeypatch):
    monkeypatch.setenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP", "0")
    settings.cache_clear()
    asyncio.run(_worker_on(engine_server).generate_sequences(make_batch()))

    assert llm_calls(captured) == []
    parents = _engine_parents(engine_server)
    assert len(parents) == 4 and all(int(p[-2:], 16) & 1 == 0 for p in parents)  # the engine's span left out too


@pytest.mark.parametrize(("setting", "rollout"), [("false", "vllm"), ("auto", "hfcpu")])
def test_no_context_travels_when_off_or_for_an_engine_without_tracing(
    captured, engine_server, monkeypatch, setting, rollout
):
    monkeypatch.setenv("OTEL_VERL_ENGINE_TRACING", setting)
    settings.cache_clear()
    asyncio.run(_worker_on(engine_server, rollout).generate_sequences(make_batch()))

    assert [headers for _, headers in engine_server.engine.calls] == [None] * 4
    assert len(llm_calls(captured)) == 4


def test_headers_verl_gave_the_engine_are_kept(captured, engine_server):
    async def call():
        token = engine_context.ENGINE_HEADERS.set({"traceparent": TP})
        try:
            async for _ in engine_server.engine.generate([1], {"max_tokens": 1}, "r", trace_headers={"x": "1"}):
                pass
        finally:
            engine_context.ENGINE_HEADERS.reset(token)

    asyncio.run(call())
    assert engine_server.engine.calls == [("r", {"x": "1"})]


# ------------------------------------------------------------------ vLLM's engine start
class _Processor:
    def __init__(self, log_stats: bool, tracing_enabled: bool = False) -> None:
        self.log_stats = log_stats
        self.tracing_enabled = tracing_enabled


class _FakeVllm:
    """``AsyncLLM.from_vllm_config``'s shape: ``disable_log_stats`` decides the stats."""

    given: dict = {}

    def __init__(self, log_stats: bool, tracing: bool) -> None:
        self.output_processor = _Processor(log_stats, tracing)

    @classmethod
    def from_vllm_config(cls, vllm_config=None, *, disable_log_stats: bool = False, tracing: bool = False):
        cls.given = {"disable_log_stats": disable_log_stats}
        return cls(not disable_log_stats, tracing)


@pytest.fixture
def fake_vllm(monkeypatch):
    class Vllm(_FakeVllm):
        pass

    wrapt.wrap_function_wrapper(Vllm, "from_vllm_config", engine.from_vllm_config_wrapper)
    yield Vllm


def test_engine_start_turns_on_its_stats_and_request_tracing(captured, fake_vllm):
    made = fake_vllm.from_vllm_config("cfg", disable_log_stats=True)  # verl's default
    assert fake_vllm.given == {"disable_log_stats": False}
    assert made.output_processor.tracing_enabled is True
    # the pipeline was built before the engine: vLLM's spans (global tracer) go to it
    from otel_verl.process.state import PROCESS

    assert PROCESS.identity.role == semconv.ROLE_ROLLOUT_SERVER


def test_engine_tracing_false_leaves_vllm_as_verl_configured_it(captured, fake_vllm, monkeypatch):
    monkeypatch.setenv("OTEL_VERL_ENGINE_TRACING", "false")
    settings.cache_clear()
    made = fake_vllm.from_vllm_config("cfg", disable_log_stats=True)
    assert fake_vllm.given == {"disable_log_stats": True}
    assert made.output_processor.tracing_enabled is False


def test_tracing_without_stats_is_switched_off_instead_of_killing_the_engine(captured, fake_vllm, monkeypatch, caplog):
    """The user's own ``otlp_traces_endpoint`` with verl's ``disable_log_stats=True``: vLLM would die
    at the first finished request (``assert req_state.stats is not None``)."""
    monkeypatch.setenv("OTEL_VERL_ENGINE_TRACING", "false")
    settings.cache_clear()
    made = fake_vllm.from_vllm_config("cfg", disable_log_stats=True, tracing=True)
    assert made.output_processor.tracing_enabled is False
    assert "needs its stats" in caplog.text


def test_sglang_request_gets_the_carried_header_unless_it_has_one():
    class Req:
        def __init__(self, header=None):
            self.external_trace_header = header

    seen = []

    async def generate_request(obj, request=None):
        seen.append(obj.external_trace_header)
        yield obj

    wrapped = wrapt.FunctionWrapper(generate_request, engine.sglang_generate_request_wrapper)

    async def call():
        token = engine_context.ENGINE_HEADERS.set({"traceparent": TP})
        try:
            for req in (Req(), Req({"traceparent": "theirs"})):
                async for _ in wrapped(req):
                    pass
        finally:
            engine_context.ENGINE_HEADERS.reset(token)

    asyncio.run(call())
    assert seen == [{"traceparent": TP}, {"traceparent": "theirs"}]


def test_stats_that_stay_off_leave_tracing_off_and_say_so(captured, fake_vllm, caplog):
    """An engine whose start ignores ``disable_log_stats``: no tracing (it would kill the engine)."""

    class Stubborn(_FakeVllm):
        @classmethod
        def from_vllm_config(cls, vllm_config=None, *, disable_log_stats: bool = False, tracing: bool = False):
            return cls(False, tracing)

    wrapt.wrap_function_wrapper(Stubborn, "from_vllm_config", engine.from_vllm_config_wrapper)
    made = Stubborn.from_vllm_config("cfg", disable_log_stats=True)
    assert made.output_processor.tracing_enabled is False
    assert "needs its stats" in caplog.text


# ------------------------------------------------------------------ the engine's spans follow their tree
class _TracingAsyncLLM(_FakeAsyncLLM):
    """Records a span under its ``trace_headers`` as vLLM's output processor does (``llm_request`` on
    the global provider, ended before the finished output reaches ``generate``'s caller)."""

    async def generate(self, prompt, sampling_params, request_id, *, prompt_text=None, trace_headers=None, priority=0):
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        from otel_verl.process.state import PROCESS

        self.calls.append((request_id, trace_headers))
        parent = TraceContextTextMapPropagator().extract(trace_headers or {})
        tracer = PROCESS.telemetry.tracer_provider.get_tracer("vllm")
        tracer.start_span(semconv.SPAN_ENGINE_REQUEST, context=parent, kind=trace.SpanKind.SERVER).end()
        yield sampling_params["max_tokens"]


def test_the_engines_spans_follow_their_trajectorys_tree(captured, engine_server, monkeypatch):
    monkeypatch.setenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP", "1")
    monkeypatch.setenv("OTEL_VERL_ROLLOUT_SLOWEST_PER_STEP", "1")
    settings.cache_clear()

    class Engine(_TracingAsyncLLM):
        pass

    wrapt.wrap_function_wrapper(Engine, "generate", engine.vllm_generate_wrapper)
    engine_server.engine = Engine()
    asyncio.run(_worker_on(engine_server).generate_sequences(make_batch()))

    assert len(engine_server.engine.calls) == 4  # every call was traced by the engine ...
    trajectories = by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY)
    calls = llm_calls(captured)
    engine_spans = by_name(captured, semconv.SPAN_ENGINE_REQUEST)
    assert len(trajectories) == 1 and len(calls) == 1  # ... one tree was kept
    assert len(engine_spans) == 1  # and only its engine span was exported: no orphans
    assert engine_spans[0].parent.span_id == calls[0].context.span_id
    assert engine_spans[0].context.trace_id == trajectories[0].context.trace_id
    assert all(p.endswith("-01") for p in _engine_parents(engine_server))  # records are sampled
    from otel_verl.process.state import PROCESS

    assert PROCESS.telemetry.trees.held == 0  # nothing left behind in the server's hold-back


def test_a_reply_hands_the_engine_spans_back_only_to_the_worker():
    from otel_verl.hooks.rollout import engine_handback

    reply = TokenOutput(token_ids=[1], extra_fields={engine_handback.HANDBACK_KEY: ("data",), "global_steps": 3})
    assert engine_handback.take(reply) == ("data",)
    assert reply.extra_fields == {"global_steps": 3}  # verl's code never sees the key
    assert engine_handback.take(reply) is None
    assert engine_handback.take(object()) is None
