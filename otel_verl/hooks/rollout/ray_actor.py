"""The agent-loop worker's Ray actor class: the copies of verl's methods get the same wrappers.

Ray's ``_inject_tracing_into_class`` puts a copy of every method into the actor class it creates
(``ray.remote(AgentLoopWorker)`` -> a subclass): in the TaskRunner that copy is taken from verl's
class and pickled by value, so in the agent-loop worker the actor's methods are plain copies
that the hooks on ``AgentLoopWorker`` never see. When the worker loads the actor class, the
copies of the methods we trace get our wrappers too. The hook is on a private Ray name: when a
Ray release renames it, it says so once with Ray's version, and only the rollout spans are lost.
"""

from __future__ import annotations

from typing import Any

import wrapt

from otel_verl._safe import safe
from otel_verl.hooks import targets
from otel_verl.hooks.rollout import handoff, trajectory

ACTOR_METHODS = {
    "generate_sequences": handoff.worker_generate_wrapper,
    "_run_agent_loop": trajectory.run_agent_loop_wrapper,
    "_compute_score": trajectory.compute_score_wrapper,
}


def _is_agent_loop_worker(klass: Any) -> bool:
    return klass.__name__ == "AgentLoopWorker" and klass.__module__ == targets.AGENT_LOOP


@safe("rollout actor class")
def _patch_actor_class(cls: Any) -> None:
    mro = getattr(cls, "__mro__", ())
    base = next((k for k in mro if _is_agent_loop_worker(k) and k.__dict__.get("__ray_actor_class__") is None), None)
    if base is None or base is cls:
        return
    for name, wrapper in ACTOR_METHODS.items():
        for klass in mro:
            if klass is base:
                break  # verl's own class: wrapped by the hooks on it
            own = klass.__dict__.get(name)
            if own is None:
                continue
            if not isinstance(own, wrapt.FunctionWrapper):
                wrapt.wrap_function_wrapper(klass, name, wrapper)
            break


def load_actor_class_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    _patch_actor_class(args[0] if args else kwargs.get("_cls"))
    return result
