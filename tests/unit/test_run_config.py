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


def test_credentials_in_ordinary_values_are_redacted_whole_or_cut(monkeypatch):
    """Credentials inside values (URL userinfo, query tokens, connection strings) under ordinary
    keys: gone from the attribute, whether it fits or is cut to the cap, and no part of one is left."""
    secrets = {
        "trainer.wandb_base_url": ("https://user:wandbpw9@wandb.internal/", "wandbpw9"),
        "data.train_files": ("https://hub.example/train.parquet?token=tok3n8", "tok3n8"),
        "trainer.store": ("DefaultEndpointsProtocol=https;AccountName=a;AccountKey=AcctK3y7==;x=y", "AcctK3y7"),
        "trainer.db": ("postgres://verl:dbpa55w0rd@db:5432/runs", "dbpa55w0rd"),
        "trainer.auth_header": ("Authorization: Bearer b34rer6", "b34rer6"),
    }
    long_secret = "L0ngS3cretT4il"
    overrides = [f"++{key}='{value}'" for key, (value, _) in secrets.items()]
    # a value longer than the cap, with a credential near its end: left out whole, never cut
    overrides.append(f"+trainer.notes='{'n' * 40_000} https://u:{long_secret}@host/'")
    cfg = _verl_config(overrides)
    full = config_json(cfg, limit=10**7)
    capped = config_json(cfg)
    small = config_json(cfg, limit=len(full.encode()) // 2)
    for text in (full, capped, small):
        assert text is not None
        for _, secret in secrets.values():
            assert secret not in text
        assert long_secret not in text and long_secret[:6] not in text and long_secret[-6:] not in text
    data = json.loads(full)
    assert data["trainer"]["db"] == f"postgres://{redact.REDACTED}@db:5432/runs"
    assert data["data"]["train_files"] == f"https://hub.example/train.parquet?token={redact.REDACTED}"
    assert json.loads(capped)[semconv.CONFIG_TRUNCATED_KEY] > 0  # the long value was left out, whole
    assert "trainer" in json.loads(capped) and "notes" not in json.loads(capped)["trainer"]
