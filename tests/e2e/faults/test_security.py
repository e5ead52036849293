"""Secrets never leave: a real run with secrets in its config and in Ray's runtime_env
(``cluster_run``, tests/e2e/conftest.py, shared with test_existing_cluster).

The run's verl config goes out as one ``verl.config`` attribute on ``verl.init`` with the values of
secret-looking keys replaced (``otel_verl.redact``); the same rule keeps secret-looking ``OTEL_*``
variables out of Ray's ``runtime_env``. The rules themselves: tests/unit/test_redact.py,
test_run_config.py, hooks/test_ray_launch.py.
"""

from __future__ import annotations

import json

import pytest
from support.shared_runs import HF_SECRET, WANDB_SECRET

from otel_verl import redact, semconv

# ---------------------------------------------------------------- a real run with secrets in its config


@pytest.mark.e2e
def test_real_run_exports_its_config_without_the_secrets(cluster_run):
    run = cluster_run  # tests/e2e/conftest.py: a job on a running cluster, secrets in its config
    assert run.returncode == 0, run.output[-4000:]
    assert WANDB_SECRET in run.output  # verl itself prints its config: the secret was really in it
    # every file the run wrote (a signal's file exists once it has a line: this run logs no records)
    files = sorted(p for p in run.telemetry_dir.rglob("*") if p.is_file())
    assert any(f.name.startswith("traces-") for f in files) and any(f.name.startswith("metrics-") for f in files)
    for path in files:
        raw = path.read_bytes()
        assert WANDB_SECRET.encode() not in raw and HF_SECRET.encode() not in raw, path.name
    (init,) = [s for s in run.spans if s.name == semconv.SPAN_INIT]
    cfg = json.loads(init.attributes[semconv.ATTR_CONFIG])
    assert cfg["trainer"]["wandb_api_key"] == redact.REDACTED
    assert cfg["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]["HF_TOKEN"] == redact.REDACTED
    assert cfg["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] == 4  # the harness's real value
    assert cfg["trainer"]["total_training_steps"] == 2 and cfg["data"]["train_batch_size"] == 4
