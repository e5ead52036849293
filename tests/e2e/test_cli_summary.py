"""``otel-verl summary`` on the files of a real instrumented run (the cached v0 GRPO run)."""

from __future__ import annotations

import io
import re

import pytest

from otel_verl.exits import CommandError
from otel_verl.offline.summary import summary

pytestmark = pytest.mark.e2e


def _row(text: str, label: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"  {label} "))
    return line[len(label) + 2 :].split()


def test_summary_of_a_real_run(verl_runs):
    run = verl_runs.get("v0", "grpo", steps=2)
    assert run.returncode == 0, run.output[-4000:]
    out, err = io.StringIO(), io.StringIO()
    assert summary(run.telemetry_dir, out=out, err=err) == 0
    text = out.getvalue()
    assert err.getvalue() == ""  # nothing skipped in a clean run
    assert re.fullmatch(
        r"verl run \w+ \(service verl-e2e, driver v0, .*\): 2 training steps, [\d.]+ s in steps", text.splitlines()[0]
    )
    assert _row(text, "step")[:2] == ["1", "2"]
    for stage in ("gen", "update_actor"):  # verl's own timing_s/<stage>, to the printed precision
        shown = [float(v) for v in _row(text, stage)]
        assert shown == pytest.approx([run.console[n][f"timing_s/{stage}"] for n in (1, 2)], abs=0.006), stage
    # the metrics table's last columns are steps 1 and 2 (a step 0 column holds the validation before training)
    assert _row(text, "actor/grad_norm")[-2:] == [f"{run.console[n]['actor/grad_norm']:.4g}" for n in (1, 2)]
    assert _row(text, "critic/score/mean")[-2:] == [f"{run.console[n]['critic/score/mean']:.4g}" for n in (1, 2)]
    assert "taskrunner" in text and "worker rank 0" in text and "agent_loop_worker" in text
    for n in (1, 2):
        line = next(line for line in text.splitlines() if line.startswith(f"  step {n}: trace "))
        assert "worker spans from ranks 0" in line
    training = [
        s for s in run.spans if s.name == "verl.rollout.trajectory" and not s.attributes.get("verl.rollout.validate")
    ]
    slowest = max(training, key=lambda s: s.seconds)
    assert "slowest rollout trajectory (training trajectories only;" in text
    assert f"\n  {slowest.seconds:.2f} s, " in text


def test_summary_of_an_empty_folder(tmp_path):
    with pytest.raises(CommandError, match="no telemetry files"):
        summary(tmp_path)
