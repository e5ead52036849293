"""The run's config as ``verl.config``: verl's real full config, redacted and capped."""

from __future__ import annotations

import json
import os

from otel_verl import redact, semconv
from otel_verl.run_config import config_json


def _verl_config(overrides: list[str]):
    import hydra
    import verl

    folder = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with hydra.initialize_config_dir(config_dir=folder, version_base=None):
        return hydra.compose(config_name="ppo_trainer", overrides=overrides)


def test_config_attribute_of_verl_full_config_is_redacted_and_capped():
    cfg = _verl_config(
        [
            "+trainer.wandb_api_key=sk-live-ABC",
            "+ray_kwargs.ray_init.runtime_env.env_vars.HF_TOKEN=hf_XYZ",
            "actor_rollout_ref.actor.ppo_mini_batch_size=7",
        ]
    )
    text = config_json(cfg)
    assert text is not None and len(text.encode()) <= semconv.CONFIG_MAX_BYTES
    assert "sk-live-ABC" not in text and "hf_XYZ" not in text
    data = json.loads(text)
    assert data["trainer"]["wandb_api_key"] == redact.REDACTED
    assert data["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]["HF_TOKEN"] == redact.REDACTED
    assert data["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] == 7
    actor = cfg.actor_rollout_ref.actor
    assert data["actor_rollout_ref"]["actor"]["ppo_max_token_len_per_gpu"] == actor.ppo_max_token_len_per_gpu
    assert data["data"]["prompt_key"] == "prompt"
    # over the cap: the longest values are left out and counted, short ones kept, still no secret
    limit = len(text.encode()) * 3 // 4
    small = config_json(cfg, limit=limit)
    assert small is not None and len(small.encode()) <= limit and "sk-live-ABC" not in small
    cut = json.loads(small)
    assert cut[semconv.CONFIG_TRUNCATED_KEY] > 0
    assert cut["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] == 7
    assert cut["trainer"]["wandb_api_key"] == redact.REDACTED
