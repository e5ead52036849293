"""The rollout replica's own clock (``otel_verl.hooks.rollout.server``): a server actor class is
recognised by its ``generate`` protocol when Ray loads it worker-side, and
``verl.rollout.replica.busy_time`` counts the union of its requests' intervals.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import wrapt

from otel_verl import semconv
from otel_verl.hooks.rollout import server


class _Server:
    """verl's server protocol (``vLLMHttpServer.generate``'s parameters), no engine behind it."""

    def __init__(self, replica_rank: int) -> None:
        self.replica_rank = replica_rank

    async def generate(self, prompt_ids, sampling_params, request_id, image_data=None, priority=0):
        await asyncio.sleep(0.05)
        return list(prompt_ids)


class _NotAServer:
    async def generate(self, batch):  # another actor's generate: left alone
        return batch


def _loaded_actor_class(cls: type) -> type:
    """``cls`` as a Ray worker loads it: Ray's subclass with copies, pickled, then the worker's load path."""
    import ray._private.function_manager as fm
    import verl  # noqa: F401 - otel-verl registers its hooks (Ray's load path among them) on import verl
    from ray import cloudpickle
    from ray.actor import _modify_class
    from ray.util.tracing.tracing_helper import _inject_tracing_into_class

    actor_class = _modify_class(cls)
    _inject_tracing_into_class(actor_class)
    loaded = cloudpickle.loads(cloudpickle.dumps(actor_class))
    fm._inject_tracing_into_class(loaded)
    return loaded


@pytest.fixture
def fresh_server():
    """A process no hook has named yet (``_fresh_process``)."""


def _busy_points(captured) -> list:
    return captured.metric_points().get(semconv.M_ROLLOUT_REPLICA_BUSY_TIME, [])


def test_a_server_actor_class_gets_the_replica_clock_and_counts_overlap_once(captured, fresh_server):
    loaded = _loaded_actor_class(_Server)
    assert isinstance(loaded.__dict__["generate"], wrapt.FunctionWrapper)
    instance = loaded.__new__(loaded)
    instance.replica_rank = 3

    spans: list[tuple[float, float]] = []  # each call as its caller saw it

    async def one(i: int) -> list:
        start = time.monotonic()
        try:
            return await instance.generate(prompt_ids=[i], sampling_params={}, request_id=str(i))
        finally:
            spans.append((start, time.monotonic()))

    async def three_overlapping() -> list:
        return await asyncio.gather(*(one(i) for i in range(3)))

    assert asyncio.run(three_overlapping()) == [[0], [1], [2]]  # verl's results unchanged
    (point,) = _busy_points(captured)
    assert point.attributes == {semconv.ATTR_ROLLOUT_REPLICA: 3}
    union = max(e for _, e in spans) - min(s for s, _ in spans)  # they overlap: one interval
    assert 0.05 <= point.value <= union + 1e-3  # each sleeps 50 ms inside generate
    assert point.value < 0.75 * sum(e - s for s, e in spans)  # not the three summed
    from otel_verl.process.state import PROCESS

    assert PROCESS.identity.role == semconv.ROLE_ROLLOUT_SERVER  # named before its pipeline is built


def test_other_actor_classes_are_left_alone(captured, fresh_server):
    loaded = _loaded_actor_class(_NotAServer)
    assert not isinstance(loaded.__dict__["generate"], wrapt.FunctionWrapper)


def test_an_error_in_generate_passes_through_and_the_clock_stops(captured, fresh_server):
    class Failing(_Server):
        async def generate(self, prompt_ids, sampling_params, request_id):
            raise RuntimeError("engine died")

    loaded = _loaded_actor_class(Failing)
    instance = loaded.__new__(loaded)
    instance.replica_rank = 0
    with pytest.raises(RuntimeError, match="engine died"):
        asyncio.run(instance.generate(prompt_ids=[1], sampling_params={}, request_id="r"))
    first = server._STATE.clock.busy_s()
    assert first == server._STATE.clock.busy_s()  # not running on: the request ended


def test_the_clock_is_the_union_of_intervals_and_never_goes_back():
    now = [0.0]
    clock = server.ReplicaClock(clock=lambda: now[0])
    clock.begin()  # t=0 a
    now[0] = 1.0
    clock.begin()  # t=1 b
    now[0] = 2.0
    assert clock.busy_s() == 2.0  # running interval included
    clock.end()  # t=2 a ends
    now[0] = 3.0
    clock.end()  # t=3 b ends: busy 0..3
    now[0] = 10.0
    assert clock.busy_s() == 3.0  # idle 3..10 not counted
    clock.begin()
    now[0] = 11.5
    clock.end()
    assert clock.busy_s() == 4.5


@pytest.mark.parametrize(
    ("module", "klass"),
    [
        ("verl.workers.rollout.vllm_rollout.vllm_async_server", "vLLMHttpServer"),
        ("verl.workers.rollout.sglang_rollout.async_sglang_server", "SGLangHttpServer"),
        ("verl.workers.rollout.trtllm_rollout.trtllm_async_server", "TRTLLMHttpServer"),
    ],
)
def test_the_protocol_matches_each_of_verls_servers(module, klass):
    """Read from verl's source: importing these needs vLLM / SGLang / TensorRT-LLM installed."""
    import ast
    import importlib.util

    (root,) = importlib.util.find_spec("verl").submodule_search_locations  # no import of the module
    path = Path(root).parent.joinpath(*module.split(".")).with_suffix(".py")
    tree = ast.parse(path.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == klass]
    (gen,) = [n for n in cls.body if isinstance(n, ast.AsyncFunctionDef) and n.name == "generate"]
    params = {a.arg for a in gen.args.args + gen.args.kwonlyargs}
    assert set(server.PROTOCOL) <= params, params


def test_the_protocol_matches_the_harness_server_and_not_other_generates():
    from verl_cpu_harness.hfcpu import HFCPUServer

    assert server.is_server_generate(HFCPUServer.generate)
    assert not server.is_server_generate(_NotAServer.generate)


def test_the_server_exports_when_idle(captured, fresh_server, monkeypatch):
    from otel_verl.process.state import PROCESS

    asked: list[str] = []
    monkeypatch.setattr(PROCESS.telemetry, "request_flush", lambda **kw: asked.append("spans"))
    monkeypatch.setattr(PROCESS.telemetry, "submit", lambda work: asked.append("metrics later"))
    loaded = _loaded_actor_class(_Server)
    instance = loaded.__new__(loaded)
    instance.replica_rank = 0
    asyncio.run(instance.generate(prompt_ids=[1], sampling_params={}, request_id="r"))
    assert asked == ["spans", "metrics later"]
