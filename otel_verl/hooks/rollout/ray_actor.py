"""verl's Ray actor classes (agent-loop, reward-loop workers): copies of verl's methods get the wrappers.

Ray's ``_inject_tracing_into_class`` puts a copy of every method into the actor class it creates
(``ray.remote(AgentLoopWorker)`` -> a subclass; the same for ``RewardLoopWorker``): in the
TaskRunner that copy is taken from verl's class and pickled by value, so in the worker the
actor's methods are plain copies that the hooks on verl's class never see. When the worker loads the actor class, the
copies of the methods we trace get our wrappers too, and a rollout server's ``generate`` (any
backend's, by its protocol: ``server``) the replica clock. The hook is on a private Ray name: when a
Ray release renames it, it says so once with Ray's version, and only the rollout spans are lost.
"""

from __future__ import annotations

from typing import Any

from otel_verl import patches
from otel_verl._safe import safe
from otel_verl.hooks import targets
from otel_verl.hooks.rollout import handoff, reward_worker, server, trajectory

# verl's actor classes (module, name) -> the methods traced on them
ACTOR_METHODS: dict[tuple[str, str], dict[str, Any]] = {
    (targets.AGENT_LOOP, "AgentLoopWorker"): {
        "generate_sequences": handoff.worker_generate_wrapper,
        "_run_agent_loop": trajectory.run_agent_loop_wrapper,
        "_compute_score": trajectory.compute_score_wrapper,
    },
    (targets.REWARD_LOOP, "RewardLoopWorker"): {"compute_score": reward_worker.compute_score_wrapper},
}


def _verl_class(klass: Any) -> dict[str, Any] | None:
    return ACTOR_METHODS.get((klass.__module__, klass.__name__))


@safe("rollout actor class")
def _patch_actor_class(cls: Any) -> None:
    mro = getattr(cls, "__mro__", ())
    base = next((k for k in mro if _verl_class(k) is not None and k.__dict__.get("__ray_actor_class__") is None), None)
    if base is None:
        _patch_server_class(mro)
        return
    if base is cls:
        return
    for name, wrapper in (_verl_class(base) or {}).items():
        for klass in mro:
            if klass is base:
                break  # verl's own class: wrapped by the hooks on it
            own = klass.__dict__.get(name)
            if own is None:
                continue
            if not _calls(own, wrapper):
                patches.wrap(klass, name, wrapper)  # undone by uninstrument()
            break


def _patch_server_class(mro: tuple[type, ...]) -> None:
    """A rollout server (any backend's: found by its ``generate``'s protocol) gets the replica clock."""
    for klass in mro:
        own = klass.__dict__.get("generate")
        if own is None:
            continue
        if server.is_server_generate(own) and not _calls(own, server.generate_wrapper):
            patches.wrap(klass, "generate", server.generate_wrapper)
        return


def _calls(method: Any, wrapper: Any) -> bool:
    """Whether ``method`` already runs ``wrapper``: itself, or through Ray's tracing wrapper, which
    wraps verl's method as this process resolves it (by reference: the class hook's wrapper)."""
    for _ in range(8):  # a short __wrapped__ chain; never loop forever on a cycle
        if method is None:
            return False
        if getattr(method, "_self_wrapper", None) is wrapper:  # wrapt's FunctionWrapper or BoundFunctionWrapper
            return True
        method = getattr(method, "__wrapped__", None)
    return False


def load_actor_class_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    _patch_actor_class(args[0] if args else kwargs.get("_cls"))
    return result
