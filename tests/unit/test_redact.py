"""The secret-redaction rules (``otel_verl.redact``): keys by their words, values by their shapes,
and verl's own config untouched."""

from __future__ import annotations

import glob
import json
import os

import pytest

from otel_verl import redact

R = redact.REDACTED


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
        # plurals and common names
        "passwords",
        "tokens",
        "access_tokens",
        "pwd",
        "db_pass",
        "ssh_key",
        "session_key",
        "hmac_key",
        "jwt",
        "github_pat",
        "MY_SERVICE_PASS",
        "secrets",
        "api_keys",
        # camel case, acronyms included
        "PassWord",
        "HFToken",
        "XApiKey",
        "AccountKey",
        # a misspelt singular header variable
        "OTEL_EXPORTER_OTLP_HEADER",
        "OTEL_EXPORTER_OTLP_TRACES_HEADER",
    ],
)
def test_secret_looking_keys(key):
    assert redact.is_secret_key(key)
    assert redact.redact({key: "s3cr3t"}) == {key: R}


@pytest.mark.parametrize(
    "key",
    [
        "max_token_len",
        "ppo_max_token_len_per_gpu",
        "log_prob_max_token_len_per_gpu",
        "num_speculative_tokens",
        "speculative_num_draft_tokens",
        "max_num_batched_tokens",
        "max_tokens",
        "max_new_tokens",
        "tokens_per_second",
        "tokenizer",
        "tokenizer_path",
        "skip_tokenizer_init",
        "token2text",
        "profile_token_start",
        "pad_token",
        "eos_token",
        "bos_token",
        "unk_token",
        "balance_dp_token",
        "prompt_key",
        "reward_fn_key",
        "teacher_key",
        "key",
        "kl_loss_type",
        "response_length",
        "keywords",
        "monkey",
        "authority_level",
        "bypass_mode",
        "patch_size",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
    ],
)
def test_ordinary_keys_are_kept(key):
    assert not redact.is_secret_key(key)
    assert redact.redact({key: "value"}) == {key: "value"}


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("HFToken", ["hf", "token"]),
        ("XApiKey", ["x", "api", "key"]),
        ("PassWord", ["pass", "word"]),
        ("wandbApiKey", ["wandb", "api", "key"]),
        ("WANDB_API_KEY", ["wandb", "api", "key"]),
        ("getHTTPResponse", ["get", "http", "response"]),
        ("wandb.api-key", ["wandb", "api", "key"]),
    ],
)
def test_words_split_at_separators_camel_case_and_acronyms(key, expected):
    assert redact.words(key) == expected


# (value under an ordinary key, the secret in it, what must stay)
CREDENTIAL_SHAPES = [
    ("https://user:hunter2pw@collector.example.com/v1/traces", "hunter2pw", "collector.example.com/v1/traces"),
    ("https://ghp_user_only@github.com/org/repo.git", "ghp_user_only", "github.com/org/repo.git"),
    ("postgres://admin:p@ss-w0rd@db.internal:5432/verl", "ss-w0rd", "db.internal:5432/verl"),
    ("redis://:r3dispw@cache:6379/0", "r3dispw", "cache:6379/0"),
    ("mongodb+srv://u:m0ngopw@cluster0.example.net/db", "m0ngopw", "cluster0.example.net/db"),
    ("https://collector:4318/v1/traces?api_key=k3y-123&tenant=rl", "k3y-123", "tenant=rl"),
    ("https://hub.example.com/model?token=t0k3n#frag", "t0k3n", "hub.example.com/model"),
    ("https://blob.example.net/c/f?sv=2022&sig=s1gnatur3%3D&se=2030", "s1gnatur3", "se=2030"),
    (
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=AbC123+/xyz==;EndpointSuffix=core.windows.net",
        "AbC123+/xyz==",
        "AccountName=acct",
    ),
    ("host=db user=verl password=pgpa55 dbname=runs", "pgpa55", "dbname=runs"),
    ("Authorization: Bearer eyAbc.def-ghi_jkl", "eyAbc.def-ghi_jkl", "Authorization"),
    ("authorization=Bearer%20b34rer,x-tenant=rl", "b34rer", "x-tenant=rl"),
    ("Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA==", "Basic"),
    ("u:grpcpw@collector:4317", "grpcpw", "collector:4317"),
    ("--wandb-api-key=wbk3y --project x", "wbk3y", "--project x"),
    ('{"password": "two words", "pad_token": "<pad>"}', "two words", '"pad_token": "<pad>"'),
    ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567", ""),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA", ""),
]


@pytest.mark.parametrize(("value", "secret", "kept"), CREDENTIAL_SHAPES)
def test_credentials_inside_values_under_ordinary_keys(value, secret, kept):
    config = {"trainer": {"url": value, "urls": ["x", value], "nested": [{"endpoint": value}]}}
    out = json.dumps(redact.redact(config))
    assert secret not in out
    assert out.count(R) >= 3 and kept in redact.redact_text(value)


def test_a_secret_at_the_end_of_a_long_value_is_caught():
    value = "x" * 100_000 + " https://u:longtail5ecret@host/ " + "y" * 100_000
    out = redact.redact_text(value)
    assert "longtail5ecret" not in out and len(out) < len(value)


@pytest.mark.parametrize(
    "value",
    [
        "https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct",
        "hdfs://namenode:8020/user/verl/ckpt",
        "~/data/gsm8k/train.parquet",
        "${oc.env:HOME}/models",
        "contact: team@example.com",
        "trainer.total_epochs=15",
        "actor_rollout_ref.rollout.name=vllm,actor_rollout_ref.rollout.n=5",
        "http://localhost:4318",
        "<|im_start|>",
    ],
)
def test_values_without_credentials_are_kept(value):
    assert redact.redact_text(value) == value
    assert not redact.has_secret(value)


def test_a_secret_keys_whole_subtree_is_replaced():
    cfg = {
        "hf_token": {"value": "hf_1"},
        "secrets": {"wandb": "w-2"},
        "api_key": ["k3", "k4"],
        "auth": [{"pass": "p5"}],
        "password": 123456,  # YAML reads an all-digits password as a number
        "headers": {"Authorization": "Bearer 3"},
    }
    out = redact.redact(cfg)
    assert out == dict.fromkeys(cfg, R)
    for secret in ("hf_1", "w-2", "k3", "k4", "p5", "123456", "Bearer"):
        assert secret not in json.dumps(out)


def test_what_carries_no_secret_stays_and_the_input_is_not_changed():
    cfg = {
        "trainer": {"wandb_api_key": "sk-1", "project_name": "p", "max_token_len": 8192},
        "ray": {"runtime_env": {"env_vars": {"HF_TOKEN": "hf_2", "PATH": "/bin"}}},
        "list": [{"password": "pw"}, {"name": "x"}],
        "empty": {"token": None, "secret": True, "password": "", "headers": {}, "api_key": []},
    }
    out = redact.redact(cfg)
    assert out["trainer"] == {"wandb_api_key": R, "project_name": "p", "max_token_len": 8192}
    assert out["ray"]["runtime_env"]["env_vars"] == {"HF_TOKEN": R, "PATH": "/bin"}
    assert out["list"] == [{"password": R}, {"name": "x"}]
    assert out["empty"] == cfg["empty"]  # None, a bool, empty text or containers: nothing to hide
    assert cfg["trainer"]["wandb_api_key"] == "sk-1"  # a copy: the caller's config is untouched


def test_an_object_that_is_no_json_type_becomes_its_redacted_text():
    class Endpoint:
        def __str__(self) -> str:
            return "https://u:0bj3ctpw@host/"

    assert redact.redact({"endpoint": Endpoint()}) == {"endpoint": f"https://{R}@host/"}


# ------------------------------------------------------------------ verl's real config
def _verl_config_folder() -> str:
    import verl

    return os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def test_verls_default_config_is_unchanged():
    """verl's resolved PPO config (as ``run_config`` reads it) has no secret: redaction changes nothing."""
    import hydra
    from omegaconf import OmegaConf

    with hydra.initialize_config_dir(config_dir=_verl_config_folder(), version_base=None):
        cfg = hydra.compose(config_name="ppo_trainer")
    data = OmegaConf.to_container(cfg, resolve=True)
    assert redact.redact(data) == data


def test_every_config_file_verl_ships_is_unchanged():
    import yaml

    files = sorted(glob.glob(os.path.join(_verl_config_folder(), "**", "*.yaml"), recursive=True))
    assert len(files) > 10
    for path in files:
        with open(path) as f:
            data = yaml.safe_load(f)
        assert redact.redact(data) == data, path
