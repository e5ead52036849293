"""Rollout spans with verl's real agent-loop classes.

The real ``AgentLoopWorker.generate_sequences`` / ``_run_agent_loop`` / ``_compute_score``,
``LLMServerClient.generate`` / ``_acquire_server`` and ``AgentLoopManager.generate_sequences``
(verl's ``auto_await``) run here; only the Ray boundary (load balancer and server handles) and
the agent loop itself (a registered test agent) are stand-ins.
"""

from __future__ import annotations

import asyncio
import pickle

import numpy as np
import pytest
import wrapt
from omegaconf import OmegaConf
from opentelemetry import trace

from otel_verl import propagation, semconv
from otel_verl.config import settings
from otel_verl.hooks.rollout import state as rollout_state
from otel_verl.process.state import PROCESS

pytest.importorskip("verl.experimental.agent_loop.agent_loop")

from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopManager,
    AgentLoopMetrics,
    AgentLoopOutput,
    AgentLoopWorker,
    register,
)
from verl.protocol import DataProto  # noqa: E402
from verl.workers.rollout.llm_server import LLMServerClient  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

PROMPT = [11, 12, 13]


@register("otel_test_agent")
class EchoAgentLoop:
    """One LLM turn; response length = 2 + sample index (so lengths differ per trajectory)."""

    def __init__(self, server_manager, **kwargs):
        self.server_manager = server_manager

    async def run(self, sampling_params, **kwargs):
        n = 2 + int(kwargs["index"])
        out = await self.server_manager.generate(
            "req", prompt_ids=PROMPT, sampling_params={**sampling_params, "max_tokens": n}
        )
        if kwargs.get("fail"):
            raise RuntimeError("agent failed")
        return AgentLoopOutput(
            prompt_ids=PROMPT,
            response_ids=out.token_ids,
            response_mask=[1] * len(out.token_ids),
            num_turns=2,
            reward_score=0.25 * n,
            metrics=AgentLoopMetrics(),
        )


class _Remote:
    def __init__(self, fn):
        self.remote = fn


class FakeServer:
    def __init__(self, delays=None):
        self.delays = delays or {}

        async def generate(*, request_id, prompt_ids, sampling_params, image_data=None, video_data=None, **kw):
            n = sampling_params["max_tokens"]
            await asyncio.sleep(self.delays.get(n, 0.0))
            return TokenOutput(
                token_ids=[7] * n,
                stop_reason="completed",
                num_preempted=0,
                extra_fields={"global_steps": 3, "num_cached_tokens": 2},
            )

        self.generate = _Remote(generate)


class FakeBalancer:
    def __init__(self, server):
        async def fields():
            return []

        async def acquire_server(request_id):
            await asyncio.sleep(0.02)  # queueing in the load balancer
            return "replica-0", server

        self.require_acquire_fields = _Remote(fields)
        self.require_release_fields = _Remote(fields)
        self.acquire_server = _Remote(acquire_server)
        self.release_server = _Remote(lambda **kw: None)


CONFIG = OmegaConf.create(
    {
        "data": {},
        "actor_rollout_ref": {
            "rollout": {
                "name": "vllm",
                "temperature": 1.0,
                "top_p": 1.0,
                "top_k": -1,
                "calculate_log_probs": False,
                "val_kwargs": {"top_p": 1.0, "top_k": -1, "temperature": 0},
                "agent": {"default_agent_loop": "otel_test_agent"},
            }
        },
    }
)


class StubbedWorker(AgentLoopWorker):
    """The real worker with verl's padding/postprocessing (tokenizer work) left out."""

    async def _agent_loop_postprocess(self, output, validate, **kwargs):
        await self._compute_score([output], kwargs=kwargs)
        return output

    def _postprocess(self, outputs, input_non_tensor_batch, validate):
        return outputs


def make_worker(delays=None):
    client = LLMServerClient.__new__(LLMServerClient)
    LLMServerClient.__init__(client, CONFIG, FakeBalancer(FakeServer(delays)))
    worker = StubbedWorker.__new__(StubbedWorker)
    worker.config = CONFIG
    worker.rollout_config = CONFIG.actor_rollout_ref.rollout
    worker.llm_client = client
    worker.tokenizer = worker.processor = worker.hf_model_type = worker.dataset_cls = None
    worker.tools = []
    worker.reward_loop_worker_handles = None
    return worker


def make_batch(step=3, validate=False, prompts=2, n=2, **extra):
    index = np.repeat(np.arange(prompts), n)
    non_tensor = {"index": index, "raw_prompt": np.array(["p"] * len(index), dtype=object)}
    non_tensor.update(extra)
    return DataProto(non_tensor_batch=non_tensor, meta_info={"global_steps": step, "validate": validate})


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    monkeypatch.setenv("OTEL_VERL_PROCESS_METRICS", "false")  # covered in tests/unit/instruments/test_instruments_gpu.py
    settings.cache_clear()
    rollout_state.reset()
    yield
    rollout_state.reset()
    monkeypatch.delenv("OTEL_VERL_PROCESS_METRICS")
    settings.cache_clear()


def by_name(captured, name):
    return [s for s in captured.finished() if s.name == name]


def hist(captured, name):
    return captured.metric_points().get(name, [])


def test_every_trajectory_and_llm_call_gets_a_span_with_verl_outputs(captured):
    worker = make_worker()
    outputs = asyncio.run(worker.generate_sequences(make_batch()))
    assert len(outputs) == 4

    trajs = by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY)
    assert len(trajs) == 4
    seen = set()
    for t in trajs:
        a = t.attributes
        seen.add((a[semconv.ATTR_ROLLOUT_SAMPLE_INDEX], a[semconv.ATTR_ROLLOUT_INDEX]))
        n = 2 + a[semconv.ATTR_ROLLOUT_SAMPLE_INDEX]
        assert a[semconv.ATTR_ROLLOUT_SUBMIT_STEP] == 3
        assert a[semconv.ATTR_ROLLOUT_VALIDATE] is False
        assert a[semconv.GEN_AI_AGENT_NAME] == "otel_test_agent"
        assert a[semconv.ATTR_ROLLOUT_STATUS] == semconv.STATUS_OK
        assert a[semconv.ATTR_ROLLOUT_PROMPT_TOKENS] == len(PROMPT)
        assert a[semconv.ATTR_ROLLOUT_RESPONSE_TOKENS] == n
        assert a[semconv.ATTR_ROLLOUT_GENERATED_TOKENS] == n
        assert a[semconv.ATTR_ROLLOUT_NUM_TURNS] == 2
        assert a[semconv.ATTR_ROLLOUT_REWARD] == 0.25 * n
    assert seen == {(0, 0), (0, 1), (1, 0), (1, 1)}

    calls = by_name(captured, semconv.SPAN_ROLLOUT_LLM_CALL)
    assert len(calls) == 4
    parents = {t.context.span_id: t for t in trajs}
    for c in calls:
        traj = parents[c.parent.span_id]  # child of its trajectory
        a = c.attributes
        assert c.kind == trace.SpanKind.CLIENT
        assert a[semconv.GEN_AI_OPERATION_NAME] == "text_completion"
        assert a[semconv.GEN_AI_PROVIDER_NAME] == "vllm"
        assert a[semconv.GEN_AI_USAGE_INPUT_TOKENS] == len(PROMPT)
        assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == traj.attributes[semconv.ATTR_ROLLOUT_RESPONSE_TOKENS]
        assert a[semconv.GEN_AI_REQUEST_MAX_TOKENS] == a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS]
        assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("completed",)
        assert a[semconv.ATTR_ROLLOUT_CACHED_TOKENS] == 2
        assert a[semconv.ATTR_ROLLOUT_PREEMPTIONS] == 0
        assert a[semconv.ATTR_ROLLOUT_WEIGHT_VERSION] == 3
        assert a[semconv.ATTR_ROLLOUT_SERVER_ID] == "replica-0"
        assert 0.02 <= a[semconv.ATTR_ROLLOUT_SERVER_WAIT] < (c.end_time - c.start_time) / 1e9

    rewards = by_name(captured, semconv.SPAN_ROLLOUT_REWARD)  # reward scoring: a child per trajectory
    assert sorted(parents[r.parent.span_id].context.span_id for r in rewards) == sorted(parents)
    for r in rewards:
        assert (
            r.attributes[semconv.ATTR_ROLLOUT_REWARD]
            == parents[r.parent.span_id].attributes[semconv.ATTR_ROLLOUT_REWARD]
        )

    (duration,) = hist(captured, semconv.M_ROLLOUT_TRAJECTORY_DURATION)
    assert duration.count == 4
    (tokens,) = hist(captured, semconv.M_ROLLOUT_RESPONSE_TOKENS)
    assert tokens.count == 4 and tokens.sum == 2 + 2 + 3 + 3
    assert tokens.attributes == {semconv.ATTR_ROLLOUT_VALIDATE: False, semconv.GEN_AI_AGENT_NAME: "otel_test_agent"}
    (llm,) = hist(captured, semconv.M_ROLLOUT_LLM_CALL_DURATION)
    assert llm.count == 4
    assert list(llm.explicit_bounds)[:3] == [0.005, 0.01, 0.025]


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


def test_sampling_limits_spans_but_histograms_count_every_trajectory(captured, monkeypatch):
    monkeypatch.setenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP", "3")
    settings.cache_clear()
    try:
        worker = make_worker()
        asyncio.run(worker.generate_sequences(make_batch(step=1, prompts=3)))  # 6 trajectories
        asyncio.run(worker.generate_sequences(make_batch(step=2, prompts=3)))
    finally:
        monkeypatch.delenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP")
        settings.cache_clear()
    trajs = by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY)
    steps = [t.attributes[semconv.ATTR_ROLLOUT_SUBMIT_STEP] for t in trajs]
    assert sorted(steps) == [1, 1, 1, 2, 2, 2]  # the budget is per step
    assert len(by_name(captured, semconv.SPAN_ROLLOUT_LLM_CALL)) == 6  # only under sampled trajectories
    (duration,) = hist(captured, semconv.M_ROLLOUT_TRAJECTORY_DURATION)
    assert duration.count == 12
    (llm,) = hist(captured, semconv.M_ROLLOUT_LLM_CALL_DURATION)
    assert llm.count == 12


def test_zero_budget_means_no_spans(captured, monkeypatch):
    monkeypatch.setenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP", "0")
    settings.cache_clear()
    try:
        asyncio.run(make_worker().generate_sequences(make_batch()))
    finally:
        monkeypatch.delenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP")
        settings.cache_clear()
    assert not [s for s in captured.finished() if s.name.startswith("verl.rollout.")]
    (duration,) = hist(captured, semconv.M_ROLLOUT_TRAJECTORY_DURATION)
    assert duration.count == 4


def test_v0_trajectories_join_the_driver_gen_span_and_carrier_never_reaches_verl(captured, v0_trainer):
    worker = make_worker()
    batch = make_batch(step=3)
    tracer = PROCESS.telemetry.tracer
    with tracer.start_as_current_span("verl.gen") as gen:
        assert propagation.inject(batch)
    sent = pickle.loads(pickle.dumps(batch))  # what Ray hands the worker
    assert propagation.CARRIER_KEY in sent.meta_info
    asyncio.run(worker.generate_sequences(sent))
    assert propagation.CARRIER_KEY not in sent.meta_info

    (batch_span,) = by_name(captured, semconv.SPAN_ROLLOUT_BATCH)
    assert batch_span.parent.span_id == gen.get_span_context().span_id
    assert batch_span.attributes[semconv.ATTR_ROLLOUT_SUBMIT_STEP] == 3
    assert batch_span.attributes[semconv.ATTR_ROLLOUT_BATCH_SIZE] == 4
    trajs = by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY)
    assert {t.parent.span_id for t in trajs} == {batch_span.context.span_id}
    assert {t.context.trace_id for t in trajs} == {gen.get_span_context().trace_id}


def test_manager_injects_for_the_call_only_and_keeps_auto_await_semantics(captured, v0_trainer):
    """``AgentLoopManager.generate_sequences`` (verl's auto_await) called plainly and awaited."""
    chunks = []

    class Stop(Exception):
        pass

    async def remote(chunk):
        chunks.append(pickle.loads(pickle.dumps(chunk)))
        raise Stop

    manager = AgentLoopManager.__new__(AgentLoopManager)
    manager.agent_loop_workers = [type("W", (), {"generate_sequences": _Remote(remote)})()]
    tracer = PROCESS.telemetry.tracer
    prompts = make_batch()
    with tracer.start_as_current_span("verl.gen") as gen:
        with pytest.raises(Stop):
            manager.generate_sequences(prompts)  # sync caller: auto_await runs it
    assert propagation.CARRIER_KEY not in prompts.meta_info  # driver's batch left as it was
    parent = propagation.take(chunks[0])
    assert trace.get_current_span(parent).get_span_context().span_id == gen.get_span_context().span_id

    async def caller():
        with tracer.start_as_current_span("verl.gen") as gen2:
            coro = manager.generate_sequences(prompts)  # awaiting caller: must get a coroutine
            assert asyncio.iscoroutine(coro)
            with pytest.raises(Stop):
                await coro
            return gen2

    gen2 = asyncio.run(caller())
    parent = propagation.take(chunks[1])
    assert trace.get_current_span(parent).get_span_context().span_id == gen2.get_span_context().span_id
    assert propagation.CARRIER_KEY not in prompts.meta_info


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


def test_ray_actor_class_copies_get_the_wrappers_in_the_worker(captured):
    """Ray copies every method into its actor subclass (``_inject_tracing_into_class``) and pickles
    that subclass by value from the TaskRunner: in the worker the copies bypass the class hooks.
    Loading the class through Ray's worker-side function manager must wrap the copies again."""
    import ray._private.function_manager as fm
    from ray import cloudpickle
    from ray.actor import _modify_class
    from ray.util.tracing.tracing_helper import _inject_tracing_into_class

    Class = _modify_class(StubbedWorker)  # what ray.remote(...) builds in the TaskRunner
    _inject_tracing_into_class(Class)  # driver side: copies of the methods in Class.__dict__
    assert "_run_agent_loop" in Class.__dict__
    loaded = cloudpickle.loads(cloudpickle.dumps(Class))  # what the agent-loop worker receives
    assert not isinstance(loaded.__dict__["_run_agent_loop"], wrapt.FunctionWrapper)

    fm._inject_tracing_into_class(loaded)  # the worker's load path (function_manager)
    assert isinstance(loaded.__dict__["_run_agent_loop"], wrapt.FunctionWrapper)
    assert isinstance(loaded.__dict__["generate_sequences"], wrapt.FunctionWrapper)

    worker = make_worker()
    worker.__class__ = loaded
    asyncio.run(worker.generate_sequences(make_batch()))
    assert len(by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY)) == 4  # once each, not twice
    (duration,) = hist(captured, semconv.M_ROLLOUT_TRAJECTORY_DURATION)
    assert duration.count == 4


# ------------------------------------------------------------------------------ v1: links to the gen span
agent_loop_tq = pytest.importorskip("verl.trainer.ppo.v1.agent_loop_tq")
TQ_CONFIG = OmegaConf.merge(CONFIG, {"actor_rollout_ref": {"rollout": {"n": 2}}})


def make_td(step=3, prompts=2):
    import torch
    from tensordict import NonTensorData, NonTensorStack, TensorDict

    td = TensorDict({"index": torch.arange(prompts)}, batch_size=[prompts])
    td["uid"] = NonTensorStack(*[f"uid{i}" for i in range(prompts)])
    td["global_steps"] = NonTensorData(step)
    return td


def tq_worker_class():
    """``AgentLoopWorkerTQ`` as the agent-loop worker process loads it from the TaskRunner: Ray's
    actor subclass pickled by value, then its worker-side load path (our wrappers on the copies)."""
    import ray._private.function_manager as fm
    from ray import cloudpickle

    loaded = cloudpickle.loads(cloudpickle.dumps(agent_loop_tq.AgentLoopWorkerTQ.__ray_metadata__.modified_class))
    fm._inject_tracing_into_class(loaded)
    assert isinstance(loaded.__dict__["generate_sequences"], wrapt.FunctionWrapper)

    class Stubbed(loaded):
        async def _agent_loop_postprocess(self, output, validate, **kwargs):  # no TransferQueue
            self.seen_keys.append(set(kwargs))
            await self._compute_score([output], kwargs=kwargs)

    return Stubbed


def run_tq_worker(td, monkeypatch):
    async def kv_put(**kw):
        return None

    monkeypatch.setattr(agent_loop_tq.tq, "async_kv_put", kv_put, raising=False)
    worker = make_worker()
    worker.__class__ = tq_worker_class()
    worker.config = TQ_CONFIG
    worker.rollout_config = TQ_CONFIG.actor_rollout_ref.rollout
    worker.background_tasks = set()
    worker.seen_keys = []

    async def run():
        await worker.generate_sequences(td)  # returns once the tasks are spawned (fire-and-forget)
        while worker.background_tasks:
            await asyncio.gather(*list(worker.background_tasks))

    asyncio.run(run())
    return worker


def dispatch_v1(prompts, monkeypatch):
    """The TaskRunner's ``AgentLoopManagerTQ.generate_sequences`` (real) with one stand-in worker;
    returns the chunk the worker would have received (pickled as Ray does)."""
    chunks = []

    def remote(chunk):
        chunks.append(pickle.loads(pickle.dumps(chunk)))
        return None

    monkeypatch.setattr(agent_loop_tq, "ray", type("R", (), {"get": staticmethod(lambda refs: refs)}))
    manager = agent_loop_tq.AgentLoopManagerTQ.__new__(agent_loop_tq.AgentLoopManagerTQ)
    manager.agent_loop_workers = [type("W", (), {"generate_sequences": _Remote(remote)})()]
    manager.generate_sequences(prompts)
    (chunk,) = chunks
    return chunk


def test_v1_dispatch_under_step_links_trajectories_to_the_gen_span_that_starts_later(captured, v0_trainer, monkeypatch):
    tracer = PROCESS.telemetry.tracer
    prompts = make_td(step=3)
    with tracer.start_as_current_span(semconv.SPAN_STEP) as step:
        chunk = dispatch_v1(prompts, monkeypatch)  # verl's prepare_step: before the gen stage
        assert propagation.CARRIER_KEY not in prompts.keys()  # the driver's batch is left as it was
        with tracer.start_as_current_span(semconv.SPAN_GEN) as gen:
            pass
        with tracer.start_as_current_span(semconv.SPAN_GEN) as gen_again:  # parameter_sync_step > 1
            pass
    gen_ctx = gen.get_span_context()
    assert gen_ctx.trace_id == step.get_span_context().trace_id
    assert gen_again.get_span_context().span_id != gen_ctx.span_id  # promised once, to the first

    assert propagation.CARRIER_KEY in chunk.keys()
    worker = run_tq_worker(chunk, monkeypatch)
    assert propagation.CARRIER_KEY not in chunk.keys()  # taken out before verl's code ran
    assert worker.seen_keys and all(propagation.CARRIER_KEY not in keys for keys in worker.seen_keys)

    trajs = by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY)
    assert len(trajs) == 4  # 2 prompts x n=2
    for t in trajs:
        assert t.parent is None  # a root: rollouts outlive the dispatch
        (link,) = t.links
        assert (link.context.trace_id, link.context.span_id) == (gen_ctx.trace_id, gen_ctx.span_id)
        assert link.attributes == {semconv.ATTR_STEP: 3}
        assert t.attributes[semconv.ATTR_ROLLOUT_SUBMIT_STEP] == 3
    (tail,) = by_name(captured, semconv.SPAN_ROLLOUT_TAIL)
    assert [(lk.context.span_id, dict(lk.attributes)) for lk in tail.links] == [
        (gen_ctx.span_id, {semconv.ATTR_STEP: 3})
    ]


def test_v1_dispatch_inside_gen_links_to_it_and_without_a_span_sends_nothing(captured, v0_trainer, monkeypatch):
    tracer = PROCESS.telemetry.tracer
    with tracer.start_as_current_span(semconv.SPAN_STEP):
        with tracer.start_as_current_span(semconv.SPAN_GEN) as gen:  # a refill from replay_buffer.sample
            chunk = dispatch_v1(make_td(step=4), monkeypatch)
    parent = propagation.take(chunk)
    assert trace.get_current_span(parent).get_span_context().span_id == gen.get_span_context().span_id

    chunk = dispatch_v1(make_td(step=1), monkeypatch)  # async warm-up before the first step
    assert propagation.CARRIER_KEY not in chunk.keys()
    run_tq_worker(chunk, monkeypatch)  # a call without a carrier works as before
    trajs = by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY)
    assert len(trajs) == 4 and all(not t.links and t.parent is None for t in trajs)


def test_a_carrier_that_reaches_run_agent_loop_is_taken_out_there(captured):
    """Belt and braces: if the generate_sequences hook were missing, v1 passes every TensorDict key
    to ``_run_agent_loop`` as a keyword; it must never reach the agent loop or TransferQueue."""
    tracer = PROCESS.telemetry.tracer
    with tracer.start_as_current_span(semconv.SPAN_GEN) as gen:
        carrier = {}
        from opentelemetry import propagate

        propagate.inject(carrier)
    seen = []

    class Recording(StubbedWorker):
        async def _agent_loop_postprocess(self, output, validate, **kwargs):
            seen.append(set(kwargs))
            return await super()._agent_loop_postprocess(output, validate, **kwargs)

    worker = make_worker()
    worker.__class__ = Recording
    traj = {"step": 2, "sample_index": 0, "rollout_n": 0, "validate": False}
    import json

    kwargs = {propagation.CARRIER_KEY: json.dumps(carrier), "index": 0, "session_id": 0}
    asyncio.run(worker._run_agent_loop({"temperature": 1.0}, trajectory=traj, agent_name="otel_test_agent", **kwargs))
    assert seen and propagation.CARRIER_KEY not in seen[0]
    (t,) = by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY)
    (link,) = t.links
    assert link.context.span_id == gen.get_span_context().span_id


def test_promised_span_id_needs_an_sdk_tracer():
    assert propagation.promise_span_id(trace.NoOpTracer(), 1, semconv.SPAN_GEN) is None
