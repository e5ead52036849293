"""``uninstrument()`` leaves nothing of otel-verl behind: the hooks, and also what is patched at run
time (``ThreadPoolExecutor.submit``, the copies in a Ray actor class, the SDK tracer's sampler and
id generator), and no stall watchdog or reporter thread keeps running."""

from __future__ import annotations

import concurrent.futures.thread as cft
import threading

import wrapt
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from otel_verl import VerlInstrumentor, config
from otel_verl.process.state import PROCESS


def _ray_actor_class_loaded_in_a_worker():
    """verl's reward-loop worker as Ray builds its actor class in the TaskRunner and a worker loads it."""
    from ray import cloudpickle
    from ray.actor import _modify_class
    from ray.util.tracing.tracing_helper import _inject_tracing_into_class
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    actor_class = _modify_class(RewardLoopWorker)
    _inject_tracing_into_class(actor_class)  # driver side: copies of the methods in its __dict__
    return cloudpickle.loads(cloudpickle.dumps(actor_class))


def test_uninstrument_undoes_every_patch_and_stops_every_thread(monkeypatch):
    import ray._private.function_manager as fm

    from otel_verl import propagation
    from otel_verl.hooks.rollout import reward_worker
    from otel_verl.stall import watchdog

    monkeypatch.setenv("OTEL_VERL_RUN_ID", "run-u")
    monkeypatch.setenv(config.STALL_AFTER, "600")
    config.settings.cache_clear()
    submit = cft.ThreadPoolExecutor.__dict__["submit"]
    tp = TracerProvider()
    tracer = tp.get_tracer("t")
    sampler, ids = tracer.sampler, tracer.id_generator
    loaded = _ray_actor_class_loaded_in_a_worker()
    copy = loaded.__dict__["compute_score"]

    instrumentor = VerlInstrumentor()
    instrumentor.instrument(tracer_provider=tp, meter_provider=MeterProvider())
    try:
        reward_worker.carry_context_into_executors()  # a reward worker's first call
        fm._inject_tracing_into_class(loaded)  # the worker loads the actor class: its copies are wrapped
        assert propagation.promise_span_id(tracer, 1, "verl.gen") is not None  # the v1 sampler shim
        watchdog.WATCHDOG.start()  # fit started
        assert isinstance(cft.ThreadPoolExecutor.__dict__["submit"], wrapt.FunctionWrapper)
        assert isinstance(loaded.__dict__["compute_score"], wrapt.FunctionWrapper)
        assert tracer.sampler is not sampler and tracer.id_generator is not ids
        threads = [t for t in threading.enumerate() if t.name.startswith("otel-verl-stall")]
        assert {t.name for t in threads} == {"otel-verl-stall", "otel-verl-stall-watch"}
    finally:
        instrumentor.uninstrument()
        PROCESS.use_providers(None, None)
        config.settings.cache_clear()

    assert cft.ThreadPoolExecutor.__dict__["submit"] is submit
    assert loaded.__dict__["compute_score"] is copy
    assert tracer.sampler is sampler and tracer.id_generator is ids
    for thread in threads:
        thread.join(30)  # both wake at once when stopped
    assert [t.name for t in threads if t.is_alive()] == []


def test_only_the_hookset_and_patches_wrap_anything():
    """One rule in one place: a run-time patch goes through ``otel_verl.patches`` (undone by
    ``uninstrument()``), a hook through its ``HookSet``; no other module wraps or replaces on its own."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "otel_verl"
    allowed = {package / "patches.py", package / "hooks" / "hookset.py"}
    found = []
    for path in sorted(package.rglob("*.py")):
        if path in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            name = getattr(node, "attr", None) or getattr(node, "id", None)
            if name in ("wrap_function_wrapper", "wrap_object", "patch_function_wrapper"):
                found.append(f"{path.relative_to(package)}:{node.lineno}")
    assert found == []
