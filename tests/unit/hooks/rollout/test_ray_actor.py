"""The Ray actor-class patch (``otel_verl.hooks.rollout.ray_actor``): the copies of verl's methods
in Ray's actor subclass, loaded worker-side, get the same wrappers (and trace once, not twice).
"""

from __future__ import annotations

import asyncio

import wrapt
from verl_cpu_harness.agent_loop import StubbedWorker, by_name, hist, make_batch, make_worker

from otel_verl import semconv


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
