"""How the step's trace context reaches the agent-loop workers (``otel_verl.hooks.rollout.handoff``),
with verl's real ``AgentLoopManager`` / ``AgentLoopWorker`` and v1 ``AgentLoopManagerTQ`` /
``AgentLoopWorkerTQ``: the v0 ``DataProto`` carrier and batch span, verl's ``auto_await``, the v1
``TensorDict`` carrier and links to the ``verl.gen`` span.
"""

from __future__ import annotations

import asyncio
import pickle

import pytest
import wrapt
from omegaconf import OmegaConf
from opentelemetry import trace
from verl.experimental.agent_loop.agent_loop import AgentLoopManager
from verl.trainer.ppo.v1 import agent_loop_tq
from verl_cpu_harness.agent_loop import CONFIG, StubbedWorker, _Remote, by_name, make_batch, make_worker

from otel_verl import propagation, semconv
from otel_verl.process.state import PROCESS


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
    dispatches = {s.context.span_id: s for s in by_name(captured, semconv.SPAN_ROLLOUT_DISPATCH)}
    dispatch = dispatches[trace.get_current_span(parent).get_span_context().span_id]  # the workers' parent
    assert dispatch.parent.span_id == gen.get_span_context().span_id
    assert dispatch.status.status_code == trace.StatusCode.ERROR  # verl's error, recorded

    async def caller():
        with tracer.start_as_current_span("verl.gen") as gen2:
            coro = manager.generate_sequences(prompts)  # awaiting caller: must get a coroutine
            assert asyncio.iscoroutine(coro)
            with pytest.raises(Stop):
                await coro
            return gen2

    gen2 = asyncio.run(caller())
    parent = propagation.take(chunks[1])
    dispatches = {s.context.span_id: s for s in by_name(captured, semconv.SPAN_ROLLOUT_DISPATCH)}
    dispatch = dispatches[trace.get_current_span(parent).get_span_context().span_id]
    assert dispatch.parent.span_id == gen2.get_span_context().span_id
    assert propagation.CARRIER_KEY not in prompts.meta_info


# ------------------------------------------------------------------------------ v1: links to the gen span
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


# ------------------------------------------------------------------ verl's auto_await is kept intact
def test_manager_generate_keeps_verls_auto_await_semantics_for_every_caller():
    """The replacement is verl's own ``auto_await`` around the traced coroutine: awaited from a
    coroutine it returns a coroutine, called plainly it runs to completion, in a running loop from
    a plain function it runs in verl's thread, exactly as without otel-verl."""
    import asyncio

    from verl.utils.ray_utils import auto_await

    from otel_verl.hooks.rollout import handoff

    calls = []

    @auto_await
    async def generate_sequences(self, prompts):
        calls.append(prompts)
        await asyncio.sleep(0)
        return f"out:{prompts}"

    traced = handoff.traced_manager_generate(generate_sequences)
    assert traced is not None and not asyncio.iscoroutinefunction(traced)
    assert traced(object(), "plain") == "out:plain"  # no running loop: asyncio.run

    async def caller():
        return await traced(object(), "awaited")  # a coroutine caller gets a coroutine

    assert asyncio.run(caller()) == "out:awaited"

    async def loop_then_plain():
        def plain():
            return traced(object(), "threaded")  # running loop, plain caller: verl's thread pool

        return plain()

    assert asyncio.run(loop_then_plain()) == "out:threaded"
    assert calls == ["plain", "awaited", "threaded"]


def test_manager_generate_of_another_shape_is_left_alone():
    from otel_verl.hooks.rollout import handoff

    async def not_auto_awaited(self, prompts):
        return prompts

    def plain(self, prompts):
        return prompts

    assert handoff.traced_manager_generate(not_auto_awaited) is None
    assert handoff.traced_manager_generate(plain) is None
