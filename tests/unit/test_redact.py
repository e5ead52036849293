"""The secret-redaction rule (``otel_verl.redact``): words, not substrings; only text is replaced."""

from __future__ import annotations

import pytest

from otel_verl import redact


@pytest.mark.parametrize(
    "key",
    [
        "hf_token",
        "HF_TOKEN",
        "token",
        "access_token",
        "wandb_api_key",
        "WANDB_API_KEY",
        "api_key",
        "apiKey",
        "openaiApiKey",
        "aws_secret_access_key",
        "secret",
        "client_secret",
        "password",
        "db.password",
        "mlflow-tracking-password",
        "credentials",
        "gcp_credential",
        "auth",
        "Authorization",
        "private_key",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
    ],
)
def test_secret_looking_keys(key):
    assert redact.is_secret_key(key)
    assert redact.redact({key: "s3cr3t"}) == {key: redact.REDACTED}


@pytest.mark.parametrize(
    "key",
    [
        "max_token_len",
        "ppo_max_token_len_per_gpu",
        "log_prob_max_token_len_per_gpu",
        "num_speculative_tokens",
        "max_num_batched_tokens",
        "tokenizer",
        "tokenizer_path",
        "skip_tokenizer_init",
        "token2text",
        "profile_token_start",
        "pad_token",
        "eos_token",
        "prompt_key",
        "reward_fn_key",
        "teacher_key",
        "key",
        "kl_loss_type",
        "keywords",
        "monkey",
        "authority_level",
        "tokens",
    ],
)
def test_ordinary_keys_are_kept(key):
    assert not redact.is_secret_key(key)
    assert redact.redact({key: "value"}) == {key: "value"}


def test_redact_is_nested_and_touches_only_text():
    cfg = {
        "trainer": {"wandb_api_key": "sk-1", "project_name": "p", "max_token_len": 8192},
        "ray": {"runtime_env": {"env_vars": {"HF_TOKEN": "hf_2", "PATH": "/bin"}}},
        "list": [{"password": "pw"}, {"name": "x"}],
        "numbers": {"api_key": 123, "token": None, "secret": True, "password": ""},
        "headers": {"Authorization": "Bearer 3"},
        "keys": {"secret_list": ["a", "b"]},
    }
    out = redact.redact(cfg)
    assert out["trainer"] == {"wandb_api_key": redact.REDACTED, "project_name": "p", "max_token_len": 8192}
    assert out["ray"]["runtime_env"]["env_vars"] == {"HF_TOKEN": redact.REDACTED, "PATH": "/bin"}
    assert out["list"] == [{"password": redact.REDACTED}, {"name": "x"}]
    assert out["numbers"] == cfg["numbers"]  # no text: nothing to hide
    assert out["headers"] == {"Authorization": redact.REDACTED}  # a dict under a secret key: its keys decide
    assert out["keys"] == {"secret_list": redact.REDACTED}
    assert cfg["trainer"]["wandb_api_key"] == "sk-1"  # a copy: the caller's config is untouched
