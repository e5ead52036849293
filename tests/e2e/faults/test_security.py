"""Security: nothing listens unless configured, and then on loopback; secrets never leave.

* A default instrumented process (exporters ``otlp``) opens no listening socket: the listening
  sockets of the process are the same before instrumenting and after a traced step with
  metrics. ``OTEL_METRICS_EXPORTER=prometheus`` opens exactly one, on 127.0.0.1 unless
  ``OTEL_EXPORTER_PROMETHEUS_HOST`` says otherwise.
* The run's verl config goes out as one ``verl.config`` attribute on ``verl.init`` with the
  values of secret-looking keys replaced (``otel_verl.redact``); the same rule keeps secret-looking
  ``OTEL_*`` variables out of Ray's ``runtime_env``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from otel_verl import config, redact, semconv
from otel_verl.hooks import ray_launch
from otel_verl.run_config import config_json

CHILD = textwrap.dedent(
    """
    import json, psutil

    def bound():
        out = []
        for c in psutil.Process().net_connections(kind="inet"):
            if c.status == psutil.CONN_LISTEN or (c.type == 2 and c.laddr):  # TCP listening, UDP bound
                out.append([c.laddr.ip, c.laddr.port])
        return sorted(out)

    before = bound()
    from otel_verl import VerlInstrumentor
    from otel_verl.process.state import PROCESS
    VerlInstrumentor().instrument()
    from verl.utils.profiler import marked_timer
    from verl.utils.tracking import Tracking

    class Trainer:  # what the trainer hook remembers: the step counter
        global_steps = 1
        train_dataloader = [0]

    trainer = PROCESS.trainer = Trainer()
    tracking = Tracking(project_name="p", experiment_name="e", default_backend=[])
    timing = {}
    with marked_timer("step", timing):
        with marked_timer("gen", timing):
            pass
    tracking.log(data={"actor/kl_loss": 0.1, **{f"timing_s/{k}": v for k, v in timing.items()}}, step=1)
    PROCESS.telemetry.request_flush()
    PROCESS.telemetry.flush(1.0)
    print(json.dumps({"before": before, "after": bound()}))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(tmp_path, env: dict[str, str]) -> tuple[list, list]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    base.update({"OTEL_VERL_RUN_ID": "security", "OTEL_VERL_SHUTDOWN_TIMEOUT": "1", **env})
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], env=base, cwd=tmp_path, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return [tuple(x) for x in result["before"]], [tuple(x) for x in result["after"]]


def test_a_default_run_opens_no_listening_socket(tmp_path):
    # all defaults: OTLP exporters (to localhost:4317, nothing there), logs included
    before, after = _child(tmp_path, {"OTEL_EXPORTER_OTLP_TIMEOUT": "1"})
    assert after == before == []


def test_file_exporters_open_no_listening_socket(tmp_path):
    env = {"OTEL_TRACES_EXPORTER": "otlp_json_file", "OTEL_METRICS_EXPORTER": "otlp_json_file"}
    env |= {"OTEL_LOGS_EXPORTER": "otlp_json_file", "OTEL_VERL_FILE_DIR": str(tmp_path / "t")}
    before, after = _child(tmp_path, env)
    assert after == before == []
    assert list((tmp_path / "t").glob("traces-*.jsonl"))  # the step did produce telemetry


@pytest.mark.parametrize(("host", "bound_ip"), [(None, "127.0.0.1"), ("0.0.0.0", "0.0.0.0")])
def test_prometheus_pull_endpoint_binds_loopback_unless_configured(tmp_path, host, bound_ip):
    port = _free_port()
    env = {"OTEL_TRACES_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "prometheus"}
    env["OTEL_EXPORTER_PROMETHEUS_PORT"] = str(port)
    if host is not None:
        env["OTEL_EXPORTER_PROMETHEUS_HOST"] = host
    before, after = _child(tmp_path, env)
    assert before == []
    assert after == [(bound_ip, port)]


# ---------------------------------------------------------------- redaction rule
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
    env = redact.redact_env({"WANDB_API_KEY": "k", "HOME": "/root"})
    assert env == {"WANDB_API_KEY": redact.REDACTED, "HOME": "/root"}


def _verl_config(overrides: list[str]):
    hydra = pytest.importorskip("hydra")
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


def test_ray_runtime_env_leaves_out_secret_looking_variables(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer x")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/keys/client.pem")
    monkeypatch.setenv("OTEL_EXPORTER_VENDOR_API_KEY", "vendor-key")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")
    monkeypatch.setenv(config.RAY_RUNTIME_ENV_SECRETS, "false")
    config.settings.cache_clear()
    try:
        env = ray_launch.otel_env()
        assert "OTEL_EXPORTER_OTLP_ENDPOINT" in env and config.RAY_RUNTIME_ENV_SECRETS in env
        for name in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_CLIENT_KEY", "OTEL_EXPORTER_VENDOR_API_KEY"):
            assert name not in env
        monkeypatch.setenv(config.RAY_RUNTIME_ENV_SECRETS, "true")
        config.settings.cache_clear()
        assert "OTEL_EXPORTER_VENDOR_API_KEY" in ray_launch.otel_env()
    finally:
        config.settings.cache_clear()


# ---------------------------------------------------------------- a real run with secrets in its config
WANDB_SECRET = "wandb-SECRET-4f1c9e"
HF_SECRET = "hf_SECRET_9a7b3d"


@pytest.mark.e2e
def test_real_run_exports_its_config_without_the_secrets(verl_runs):
    run = verl_runs.get(
        "v0",
        "grpo",
        extra=[
            f"+trainer.wandb_api_key={WANDB_SECRET}",
            f"+ray_kwargs.ray_init.runtime_env.env_vars.HF_TOKEN={HF_SECRET}",
        ],
    )
    assert run.returncode == 0, run.output[-4000:]
    assert WANDB_SECRET in run.output  # verl itself prints its config: the secret was really in it
    files = sorted(run.telemetry_dir.iterdir())
    assert any(f.name.startswith("traces-") for f in files) and any(f.name.startswith("logs-") for f in files)
    for path in files:
        raw = path.read_bytes()
        assert WANDB_SECRET.encode() not in raw and HF_SECRET.encode() not in raw, path.name
    (init,) = [s for s in run.spans if s.name == semconv.SPAN_INIT]
    cfg = json.loads(init.attributes[semconv.ATTR_CONFIG])
    assert cfg["trainer"]["wandb_api_key"] == redact.REDACTED
    assert cfg["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]["HF_TOKEN"] == redact.REDACTED
    assert cfg["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] == 4  # the harness's real value
    assert cfg["trainer"]["total_training_steps"] == 2 and cfg["data"]["train_batch_size"] == 4
