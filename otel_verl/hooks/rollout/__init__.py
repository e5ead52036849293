"""Rollout: one span per trajectory and per LLM call, in the agent-loop worker processes.

* ``trajectory``: trajectory spans with their reward-scoring and tool-call spans, the long tail;
* ``llm``: LLM call spans (``gen_ai.*``);
* ``handoff``: how the step's trace context reaches the workers (v0 carrier, v1 links), and the
  TaskRunner's ``verl.rollout.dispatch`` span with the wait for the workers to start;
* ``keep``: which trajectory trees are exported, decided when they end;
* ``span_records``: otel-verl's spans of such a tree as plain records until then, made SDK spans
  only when kept, and their wire form from another process;
* ``engine_handback``: the engine's spans of an undecided tree, back to the tree's process;
* ``reward_worker``: the reward-loop worker's span around each trajectory's scoring (user reward code);
* ``server``: the rollout replicas' own busy clock, in the LLM server actors (any backend);
* ``engine_context``, ``engine``: the LLM call's context to the engine (vLLM, SGLang), whose own
  request spans join the trajectory, and the engine's metrics per replica;
* ``engine_metrics``: those metrics, the engine's Prometheus families bridged into the process's
  OTLP pipeline (its histograms added to each collected batch);
* ``ray_actor``: the Ray actor-class copies of verl's methods get the same wrappers (and servers theirs);
* ``state``: per-process state those share (open trajectories, step groups, span budget).

Every trajectory is recorded (cheaply: plain records) and at most ``OTEL_VERL_ROLLOUT_SPANS_PER_STEP``
trees per step (and validate flag) and worker are exported, chosen when they end: the slowest
first, then a uniform sample, failed ones always (``keep``); the spans other processes make in a
tree (the reward worker's, the engine's) come back to it (``reward_worker``, ``engine_handback``).
The histograms count every trajectory and call. Every wrapper stays a coroutine. Spans and
attributes: docs/rollouts.md and docs/reference.md.
"""

from __future__ import annotations

from otel_verl.hooks import targets
from otel_verl.hooks.hookset import Hook
from otel_verl.hooks.rollout import engine, handoff, llm, ray_actor, reward_worker, trajectory
from otel_verl.process.resource import UNKNOWN_ACTOR, ray_actor_class


def not_in_task_runner() -> bool:
    """The worker-side hooks on verl's actor classes apply everywhere but the TaskRunner.

    The TaskRunner sends those classes to their actors. There a wrapped method no longer pickles
    by reference: cloudpickle sends a copy with a snapshot of its module's globals, and verl's
    ``_agent_loop_registry`` in that snapshot misses the agent loops ``agent_loop_config_path``
    registers in the worker (a custom agent loop then fails with "not registered").

    An actor whose class cannot be told counts as the TaskRunner: there the hooks would break the
    user's agent loops, anywhere else leaving them off loses only the rollout spans.
    """
    actor = ray_actor_class()
    return actor is None or not (actor == UNKNOWN_ACTOR or actor.startswith("TaskRunner"))


def not_in_a_worker() -> bool:
    """The TaskRunner-side hooks on verl's data classes apply everywhere but verl's other actors
    (in a process that is no Ray actor, such as the launcher, they are inert: nothing dispatches there)."""
    actor = ray_actor_class()
    return actor is None or actor == UNKNOWN_ACTOR or actor.startswith("TaskRunner")


HOOKS = [
    Hook(targets.AGENT_LOOP, "AgentLoopManager.generate_sequences", handoff.traced_manager_generate, replace=True),
    Hook(
        targets.AGENT_LOOP_TQ,
        "AgentLoopManagerTQ.generate_sequences",
        handoff.manager_tq_generate_wrapper,
        optional=True,
    ),
    Hook(
        targets.AGENT_LOOP,
        "AgentLoopWorker.generate_sequences",
        handoff.worker_generate_wrapper,
        optional=True,
        only_if=not_in_task_runner,
    ),
    Hook(
        targets.AGENT_LOOP,
        "AgentLoopWorker._run_agent_loop",
        trajectory.run_agent_loop_wrapper,
        only_if=not_in_task_runner,
    ),
    Hook(
        targets.AGENT_LOOP,
        "AgentLoopWorker._compute_score",
        trajectory.compute_score_wrapper,
        only_if=not_in_task_runner,
    ),
    Hook(
        targets.REWARD_LOOP,
        "RewardLoopWorker.compute_score",
        reward_worker.compute_score_wrapper,
        only_if=not_in_task_runner,
    ),
    # v0: the workers' start times come out of their replies before verl merges them (TaskRunner)
    Hook(targets.PROTOCOL, "DataProto.concat", handoff.concat_wrapper, only_if=not_in_a_worker),
    Hook(targets.LLM_SERVER, "LLMServerClient.generate", llm.generate_wrapper),
    Hook(targets.LLM_SERVER, "LLMServerClient._acquire_server", llm.acquire_server_wrapper, optional=True),
    Hook(targets.LLM_SERVER, "LLMServerClient._vllm_request_id", llm.request_id_wrapper),
    *engine.HOOKS,
    Hook(targets.TOOL_AGENT_LOOP, "ToolAgentLoop._call_tool", trajectory.call_tool_wrapper, optional=True),
    # worker side of Ray's actor-class loading (the driver side must stay unpatched: it pickles)
    Hook(targets.RAY_FUNCTION_MANAGER, "_inject_tracing_into_class", ray_actor.load_actor_class_wrapper),
]
