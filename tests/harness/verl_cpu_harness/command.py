"""Hydra overrides for ``python -m verl.trainer.main_ppo`` on the CPU harness."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from .assets import Assets


def ray_num_cpus(driver: str, n_gpus: int) -> int:
    """Logical CPUs for Ray (slots, not cores), enough for what verl holds at once.

    Held: TaskRunner 1 + the worker placement group 3 per GPU (max_colocate_count=3) +
    TransferQueue controller and storage units 1 + 2 (v1 only); actors with default
    resources (agent-loop, reward, load balancer) need one free slot to be scheduled.
    Too few and verl hangs silently waiting for a placement group. Ray's default (the
    core count, 2 here) is far too small.
    """
    held = 1 + 3 * n_gpus + (3 if driver == "v1" else 0)
    return max(8, held + 2)


# Rollout backends: the harness's own HF server, or verl's vLLM rollout on vLLM's CPU build
ROLLOUTS = ("hfcpu", "vllm")
# Model the harness uses per rollout (assets.MODELS): vLLM's CPU attention needs head size 32+.
ROLLOUT_MODEL = {"hfcpu": "tiny", "vllm": "tiny-hd32"}
VLLM_KV_CACHE_BYTES = 64 * 2**20  # ~130k tokens of the tiny model; vLLM's CPU default takes GiBs
VLLM_BUCKET_MB = 16  # the weight-sync bucket (verl's default, 2 GiB, is one shared-memory block)


def vllm_args() -> list[str]:
    """verl's vLLM rollout on vLLM's CPU build (``verl_cpu_harness.vllm_cpu``): no sleep mode on
    CPU (so the engine keeps its KV cache between steps), no compilation or CUDA graphs, an
    explicit KV cache and a small weight-transfer bucket."""
    return [
        "actor_rollout_ref.rollout.name=vllm",
        "+actor_rollout_ref.rollout.enable_sleep_mode=False",
        "actor_rollout_ref.rollout.free_cache_engine=False",
        "actor_rollout_ref.rollout.enforce_eager=True",
        f"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes={VLLM_KV_CACHE_BYTES}",
        f"actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes={VLLM_BUCKET_MB}",
    ]


def verl_args(
    assets: Assets,
    *,
    driver: Literal["v1", "v0"] = "v1",
    algo: Literal["grpo", "ppo"] = "grpo",
    rollout: Literal["hfcpu", "vllm"] = "hfcpu",
    steps: int = 2,
    n_gpus: int = 1,
    val_before_train: bool = True,
    test_freq: int = -1,
    extra: Sequence[str] = (),
) -> list[str]:
    """Overrides for a tiny run: ``algo="ppo"`` is GAE + critic + actor KL loss.

    ``n_gpus`` is the number of (fake) GPUs, i.e. data-parallel training ranks and rollout
    replicas. ``rollout="vllm"``: verl's vLLM rollout (``vllm_args``; the assets of
    ``ROLLOUT_MODEL["vllm"]``). Later entries of ``extra`` override earlier ones (Hydra keeps the last).
    """
    if driver not in ("v1", "v0"):
        raise ValueError(f"driver must be 'v1' or 'v0', got {driver!r}")
    if algo not in ("grpo", "ppo"):
        raise ValueError(f"algo must be 'grpo' or 'ppo', got {algo!r}")
    if rollout not in ROLLOUTS:
        raise ValueError(f"rollout must be one of {ROLLOUTS}, got {rollout!r}")
    model = str(assets.model_dir)
    args = [
        f"trainer.use_v1={driver == 'v1'}",
        "trainer.device=cpu",
        f"algorithm.adv_estimator={'grpo' if algo == 'grpo' else 'gae'}",
        # data
        f"data.train_files={assets.train_file}",
        f"data.val_files={assets.val_file}",
        "data.train_batch_size=4",
        "data.max_prompt_length=32",
        "data.max_response_length=16",
        "data.dataloader_num_workers=0",
        # actor / ref model (sdpa: no flash-attn on CPU; fsdp2: FSDP1 needs device params)
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.model.use_remove_padding=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        # rollout: HF generate behind the async server API (verl_cpu_harness.hfcpu)
        "actor_rollout_ref.rollout.name=hfcpu",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",  # default is 2
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        *(vllm_args() if rollout == "vllm" else []),
        # reward
        f"reward.custom_reward_function.path={assets.reward_file}",
        "reward.custom_reward_function.name=compute_score",
        "reward.num_workers=1",
        # trainer
        "trainer.logger=[console]",
        "trainer.project_name=verl_cpu_harness",
        f"trainer.experiment_name={driver}_{algo}" + ("_vllm" if rollout == "vllm" else ""),
        f"trainer.default_local_dir={assets.root / 'checkpoints'}",
        f"trainer.n_gpus_per_node={n_gpus}",
        "trainer.nnodes=1",
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=-1",
        f"trainer.test_freq={test_freq}",
        f"trainer.val_before_train={val_before_train}",
        "trainer.resume_mode=disable",
        # Ray: fake GPUs so verl's resource check and placement groups work
        f"+ray_kwargs.ray_init.num_gpus={n_gpus}",
        f"ray_kwargs.ray_init.num_cpus={ray_num_cpus(driver, n_gpus)}",
    ]
    if algo == "ppo":
        args += [
            "critic.enable=True",
            "critic.strategy=fsdp2",
            f"critic.model.path={model}",
            "+critic.model.override_config.attn_implementation=sdpa",
            "critic.model.use_remove_padding=False",
            "critic.ppo_mini_batch_size=4",
            "critic.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.use_kl_loss=True",
            "actor_rollout_ref.actor.kl_loss_coef=0.01",
        ]
    if driver == "v1":
        # TransferQueue's default 8 storage units (1 CPU each) exhaust the Ray CPU slots and
        # hang in initialize_simple_storage.
        args.append("transfer_queue.backend.SimpleStorage.num_data_storage_units=2")
    return args + list(extra)
