"""Every verl and Ray module otel-verl hooks into, by name (the verl 0.9 layout).

One place to look when a verl or Ray release moves things: the hook modules name their
targets from here, ``otel-verl doctor`` checks each one exists in the installed versions.
"""

from __future__ import annotations

PERFORMANCE = "verl.utils.profiler.performance"  # _timer: every stage verl times
TRACKING = "verl.utils.tracking"  # Tracking.log: every value verl logs
TRAINER_V0 = "verl.trainer.ppo.ray_trainer"  # RayPPOTrainer (legacy driver)
TRAINER_V1 = "verl.trainer.ppo.v1.trainer_base"  # PPOTrainer (verl 0.9 default)
SINGLE_CONTROLLER = "verl.single_controller.ray.base"  # func_generator: worker-group methods
ENGINE_WORKERS = "verl.workers.engine_workers"  # ActorRolloutRefWorker, TrainingWorker
AGENT_LOOP = "verl.experimental.agent_loop.agent_loop"  # AgentLoopManager / AgentLoopWorker (v0)
REPLAY_BUFFER = "verl.trainer.ppo.v1.replay_buffer"  # ReplayBuffer.sample: v1 waits for finished rollouts
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
