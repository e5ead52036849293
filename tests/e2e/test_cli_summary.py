"""``otel-verl summary`` on the files of a real instrumented run (the cached v0 GRPO run)."""

from __future__ import annotations

import io

import pytest

from otel_verl.offline.summary import summary

pytestmark = pytest.mark.e2e


def test_summary_of_a_real_run(verl_runs):
    run = verl_runs.get("v0", "grpo", steps=2)
    assert run.returncode == 0, run.output[-4000:]
    out = io.StringIO()
    assert summary(run.telemetry_dir, out=out) == 0
    text = out.getvalue()
    assert "taskrunner" in text and "worker rank 0" in text and "agent_loop_worker" in text
    for n in (1, 2):
        line = next(line for line in text.splitlines() if line.strip().startswith(f"step {n} ("))
        assert "gen=" in line and "update_actor=" in line and "ranks [0]" in line
    trajectories = [s for s in run.spans if s.name == "verl.rollout.trajectory"]
    assert f"rollout: {len(trajectories)} trajectory spans" in text
    logged = [run.console[n]["actor/grad_norm"] for n in (1, 2)]
    grad_line = next(line for line in text.splitlines() if "verl.actor.grad_norm:" in line)
    assert grad_line.split(":", 1)[1].strip() == ", ".join(f"{v:.6g}" for v in logged)


def test_summary_of_an_empty_folder(tmp_path):
    out = io.StringIO()
    assert summary(tmp_path, out=out) == 1
    assert "no telemetry files" in out.getvalue()
