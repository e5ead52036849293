"""Every verl and Ray module otel-verl hooks into, by name (the verl 0.9 layout).

One place to look when a verl or Ray release moves things: the hook modules name their
targets from here, ``otel-verl doctor`` checks each one exists in the installed versions.
``TARGETS`` holds every hooked name with the shape its wrapper expects (a name that exists with
another shape is skipped, not wrapped), its mechanism (a documented verl hook, or a patch of a
public or private name), the release it exists since, and, for a target that stands in for another
where that one is missing, which (``fallback_for``); ``docs/generated/hooks.md`` is made from it.

verl's documented hooks are preferred where they carry the same fact (``hooks.callbacks``): v1's
checkpoint callback says "verl saved step N in folder D" (the patch of ``_save_checkpoint`` stays,
for what the callback did not say: verl 0.9.0, a callback object that cannot take a wrapper); v1's
``on_step_begin``/``on_step_end`` bound a step where the ``_timer`` patch made no step span (a verl
whose private timer moved). The ``_timer`` patch stays the step's first source: it is verl's own
measure of the step (``timing_s/step``), the stage spans' parent, and v0 has no step callbacks.
"""

from __future__ import annotations

from dataclasses import dataclass

PERFORMANCE = "verl.utils.profiler.performance"  # _timer: every stage verl times
TRACKING = "verl.utils.tracking"  # Tracking.log: every value verl logs
TRAINER_V0 = "verl.trainer.ppo.ray_trainer"  # RayPPOTrainer (legacy driver)
TRAINER_V1 = "verl.trainer.ppo.v1.trainer_base"  # PPOTrainer (verl 0.9 default)
CHECKPOINT_CALLBACK = "verl.trainer.ppo.checkpoint_callback"  # CheckpointCallback: v1's driver-side save hook
SINGLE_CONTROLLER = "verl.single_controller.ray.base"  # func_generator: worker-group methods
ENGINE_WORKERS = "verl.workers.engine_workers"  # ActorRolloutRefWorker, TrainingWorker
AGENT_LOOP = "verl.experimental.agent_loop.agent_loop"  # AgentLoopManager / AgentLoopWorker (v0)
REPLAY_BUFFER = "verl.trainer.ppo.v1.replay_buffer"  # ReplayBuffer.sample, _wait_for_next_poll: v1 waits for rollouts
AGENT_LOOP_TQ = "verl.trainer.ppo.v1.agent_loop_tq"  # AgentLoopManagerTQ (v1)
TRANSFER_QUEUE = "transfer_queue"  # async_kv_put / kv_list: when v1's rollouts were done (hooks/poll_lag.py)
REWARD_LOOP = "verl.experimental.reward_loop.reward_loop"  # RewardLoopWorker.compute_score (reward workers)
TOOL_AGENT_LOOP = "verl.experimental.agent_loop.tool_agent_loop"  # ToolAgentLoop._call_tool
LLM_SERVER = "verl.workers.rollout.llm_server"  # LLMServerClient: every engine call
RAY = "ray"  # ray.init
RAY_FUNCTION_MANAGER = "ray._private.function_manager"  # _inject_tracing_into_class (private)
CHECKPOINT_MANAGER = "verl.utils.checkpoint.checkpoint_manager"  # BaseCheckpointManager: the workers' retention
CHECKPOINT_ENGINE = "verl.checkpoint_engine.base"  # CheckpointEngineManager: replicas sleep/wake/sync
PROTOCOL = "verl.protocol"  # DataProto.concat: v0's agent-loop replies merged (their start times taken out)
RAY_UTILS = "verl.utils.ray_utils"  # auto_await, re-applied around AgentLoopManager.generate_sequences
VLLM_ASYNC_LLM = "vllm.v1.engine.async_llm"  # AsyncLLM: the engine in verl's vLLM rollout server
SGLANG_TOKENIZER_MANAGER = "sglang.srt.managers.tokenizer_manager"  # SGLang's request entry (server process)


# -- every hooked name, with the shape its wrapper expects, its mechanism, and since when ----------
HOOK = "verl hook"  # an extension point verl documents (survives refactors)
PUBLIC = "patch, public name"  # a wrapped public function or method
PRIVATE = "patch, private name"  # a wrapped ``_``-prefixed name (or one in a private module)
MECHANISMS = (HOOK, PUBLIC, PRIVATE)


@dataclass(frozen=True)
class Shape:
    """What a wrapper relies on beyond the name: checked before wrapping (``hooks.compat.check``).

    ``params``: the parameters it reads (by name or position), each must still be in the signature;
    ``coroutine``: True when it awaits the call (the target must stay ``async def``), False when it
    must not be one, None when either works. A ``Class.method`` target also needs ``Class`` to be a class.
    """

    params: tuple[str, ...] = ()
    coroutine: bool | None = None


@dataclass(frozen=True)
class Target:
    module: str
    name: str  # "func" or "Class.method"
    mechanism: str
    since: str  # the first release of the owning package with this name in this shape (the tested one for others)
    shape: Shape = Shape()
    fallback_for: str = ""  # the key of the target this one stands in for where that one says nothing

    @property
    def key(self) -> str:
        return f"{self.module}.{self.name}"


def _t(
    module: str, name: str, since: str, *params: str, coroutine: bool | None = None, fallback_for: str = ""
) -> Target:
    private = any(part.startswith("_") and not part.startswith("__") for part in (*module.split("."), *name.split(".")))
    return Target(module, name, PRIVATE if private else PUBLIC, since, Shape(params, coroutine), fallback_for)


def _hook(module: str, name: str, since: str, *params: str, fallback_for: str = "") -> Target:
    """A documented verl hook (attached to each object, ``hooks.callbacks``): sync, reads ``params``."""
    return Target(module, name, HOOK, since, Shape(params, False), fallback_for)


_ON_SAVE = f"{CHECKPOINT_CALLBACK}.CheckpointCallback.on_save"
_TIMER = f"{PERFORMANCE}._timer"


_V0_TRAINER = "RayPPOTrainer"
_WORKER_METHODS = ("compute_log_prob", "compute_ref_log_prob", "update_actor", "save_checkpoint", "load_checkpoint")
_TRAINING_METHODS = ("train_mini_batch", "train_batch", "infer_batch", "save_checkpoint", "load_checkpoint")
_REPLICA_OPERATIONS = (
    "sleep_replicas",
    "wake_up_replicas",
    "abort_replicas",
    "resume_generation_replicas",
    "release_kv_cache_replicas",
    "resume_kv_cache_replicas",
    "update_weights",
)

# "since": read from the verl 0.5.0 .. 0.9.1 wheels (the name present from that release on, with
# the parameters the wrapper reads); for Ray, TransferQueue, vLLM and SGLang the version tested.
TARGETS: tuple[Target, ...] = (
    _t(PERFORMANCE, "_timer", "verl 0.5.0", "name", "timing_raw", coroutine=False),
    _t(TRACKING, "Tracking.log", "verl 0.5.0", "data", "step", coroutine=False),
    _t(TRAINER_V0, f"{_V0_TRAINER}.__init__", "verl 0.5.0", "config"),
    _t(TRAINER_V0, f"{_V0_TRAINER}.init_workers", "verl 0.5.0"),
    _t(TRAINER_V0, f"{_V0_TRAINER}._validate", "verl 0.5.0", coroutine=False),
    _t(TRAINER_V0, f"{_V0_TRAINER}.fit", "verl 0.5.0", coroutine=False),
    _t(TRAINER_V0, f"{_V0_TRAINER}._save_checkpoint", "verl 0.5.0", coroutine=False),
    _t(TRAINER_V0, "compute_advantage", "verl 0.5.0", "data", coroutine=False),
    _t(TRAINER_V1, "PPOTrainer.__init__", "verl 0.9.0", "config"),
    _t(TRAINER_V1, "PPOTrainer.init", "verl 0.9.0"),
    _t(TRAINER_V1, "PPOTrainer._validate", "verl 0.9.0", coroutine=False),
    _t(TRAINER_V1, "PPOTrainer.fit", "verl 0.9.0", coroutine=False),
    _t(TRAINER_V1, "PPOTrainer._save_checkpoint", "verl 0.9.0", coroutine=False, fallback_for=_ON_SAVE),
    _hook(CHECKPOINT_CALLBACK, "CheckpointCallback.on_save", "verl 0.9.1", "trainer", "global_step", "checkpoint_dir"),
    _hook(TRAINER_V1, "PPOTrainer.on_step_begin", "verl 0.9.0", fallback_for=_TIMER),
    _hook(TRAINER_V1, "PPOTrainer.on_step_end", "verl 0.9.0", fallback_for=_TIMER),
    _t(TRAINER_V1, "PPOTrainer._compute_metrics", "verl 0.9.0", "batch", coroutine=False),
    _t(SINGLE_CONTROLLER, "func_generator", "verl 0.5.0", "method_name", coroutine=False),
    *(_t(ENGINE_WORKERS, f"ActorRolloutRefWorker.{m}", "verl 0.7.0") for m in _WORKER_METHODS),
    _t(ENGINE_WORKERS, "ActorRolloutRefWorker.update_weights", "verl 0.8.0"),
    *(_t(ENGINE_WORKERS, f"TrainingWorker.{m}", "verl 0.7.0") for m in _TRAINING_METHODS),
    *(
        _t(REPLAY_BUFFER, f"{c}.sample", "verl 0.9.0", "global_steps", "partition_id", "batch_size", coroutine=False)
        for c in ("ReplayBuffer", "ReplayBufferAsync")
    ),
    _t(REPLAY_BUFFER, "ReplayBuffer._wait_for_next_poll", "verl 0.9.0", "partition_id", coroutine=False),
    *(_t(CHECKPOINT_ENGINE, f"CheckpointEngineManager.{op}", "verl 0.8.0") for op in _REPLICA_OPERATIONS),
    _t(CHECKPOINT_MANAGER, "BaseCheckpointManager.register_checkpoint", "verl 0.8.0", "new_path", coroutine=False),
    _t(AGENT_LOOP, "AgentLoopManager.generate_sequences", "verl 0.5.0", "prompts"),
    _t(AGENT_LOOP_TQ, "AgentLoopManagerTQ.generate_sequences", "verl 0.9.0", "prompts", coroutine=False),
    _t(AGENT_LOOP, "AgentLoopWorker.generate_sequences", "verl 0.8.0", "batch", coroutine=True),
    _t(AGENT_LOOP, "AgentLoopWorker._run_agent_loop", "verl 0.8.0", "trajectory", "agent_name", coroutine=True),
    _t(AGENT_LOOP, "AgentLoopWorker._compute_score", "verl 0.8.0", "outputs", "kwargs", coroutine=True),
    _t(REWARD_LOOP, "RewardLoopWorker.compute_score", "verl 0.7.0", "data", coroutine=True),
    _t(TOOL_AGENT_LOOP, "ToolAgentLoop._call_tool", "verl 0.7.0", "tool_call", coroutine=True),
    _t(PROTOCOL, "DataProto.concat", "verl 0.5.0", "data", coroutine=False),
    _t(
        LLM_SERVER,
        "LLMServerClient.generate",
        "verl 0.8.0",
        "request_id",
        "prompt_ids",
        "sampling_params",
        coroutine=True,
    ),
    _t(LLM_SERVER, "LLMServerClient._acquire_server", "verl 0.8.0", "request_id", coroutine=True),
    _t(LLM_SERVER, "LLMServerClient._vllm_request_id", "verl 0.9.0", "request_id", coroutine=False),
    _t(TRANSFER_QUEUE, "async_kv_put", "TransferQueue 0.1.11", "key", "partition_id", "fields", "tag", coroutine=True),
    _t(TRANSFER_QUEUE, "kv_list", "TransferQueue 0.1.11", "partition_id", coroutine=False),
    _t(RAY, "init", "ray 2.60.0", "address", "runtime_env", coroutine=False),
    _t(RAY_FUNCTION_MANAGER, "_inject_tracing_into_class", "ray 2.60.0", "_cls", coroutine=False),
    _t(VLLM_ASYNC_LLM, "AsyncLLM.from_vllm_config", "vllm 0.33.0"),
    _t(VLLM_ASYNC_LLM, "AsyncLLM.generate", "vllm 0.33.0", "trace_headers"),
    _t(SGLANG_TOKENIZER_MANAGER, "TokenizerManager.generate_request", "sglang 0.5.23", "obj"),
)

_BY_KEY = {t.key: t for t in TARGETS}


def spec(module: str, name: str) -> Target | None:
    """The target ``module``.``name``, or None for a name this list does not hold (tests' own)."""
    return _BY_KEY.get(f"{module}.{name}")


def by_key(key: str) -> Target | None:
    """The target whose ``module.name`` is ``key``, or None."""
    return _BY_KEY.get(key)
