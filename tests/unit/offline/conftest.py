"""Fixtures of the ``otel_verl.offline`` tests: a small v1-style run's files (hermetic)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.otlp_json import gauge, llm_call, span, traj_hist, write_metrics, write_spans

from otel_verl import semconv


@pytest.fixture
def v1_run(tmp_path: Path) -> Path:
    """Two v1-style steps: stage spans in the step trace, trajectories in traces of their own."""
    return write_v1_run(tmp_path / "telemetry")


@pytest.fixture
def v1_run_legacy(tmp_path: Path) -> Path:
    """``v1_run`` as older otel-verl wrote it: its LLM calls named ``verl.rollout.llm_call``."""
    return write_v1_run(tmp_path / "legacy", legacy=True)


def write_v1_run(folder: Path, legacy: bool = False) -> Path:
    folder.mkdir()
    tr, workers, rollouts = [], [], []
    layout = {1: (0.0, {"gen": 1.0, "old_log_prob": 0.25, "update_actor": 0.5}), 2: (10.0, {"gen": 2.0, "adv": 0.1})}
    slowest = {}
    for step, (t, stages) in layout.items():
        trace = f"{step:016x}"
        sid, root = span(
            semconv.SPAN_STEP, trace, t, t + sum(stages.values()) + 0.2, verl__step=step, verl__driver="v1"
        )
        tr.append(root)
        cursor = t + 0.1
        for stage, seconds in stages.items():
            stage_id, s = span(
                f"verl.{stage}", trace, cursor, cursor + seconds, sid, verl__stage=stage, verl__step=step
            )
            tr.append(s)
            if stage != "gen":
                wg_id, wg = span(f"verl.wg.actor_rollout_{stage}", trace, cursor, cursor + seconds * 0.9, stage_id)
                tr.append(wg)
                _, w = span(f"verl.worker.{stage}", trace, cursor + 0.01, cursor + seconds * 0.8, wg_id, verl__rank=0)
                workers.append(w)
            cursor += seconds
        for i, dur in enumerate((0.2, 0.7 * step, 0.4)):
            rtrace = f"{step:08x}{i:08x}"
            attrs = {"verl__rollout__submit_step": step, "verl__rollout__sample_index": i, "verl__rollout__index": 0}
            tid, traj = span(semconv.SPAN_ROLLOUT_TRAJECTORY, rtrace, t + 0.1, t + 0.1 + dur, **attrs)
            _, llm = llm_call(rtrace, t + 0.12, t + 0.05 + dur, tid, legacy, verl__rollout__submit_step=step)
            rollouts += [traj, llm]
            if i == 1:
                slowest[step] = (tid, dur)
        # a longer validation trajectory of the same step is not the step's slowest training one
        _, val = span(
            semconv.SPAN_ROLLOUT_TRAJECTORY,
            f"{step:08x}{99:08x}",
            t,
            t + 5,
            verl__rollout__submit_step=step,
            verl__rollout__validate=True,
        )
        rollouts.append(val)
    write_spans(folder, "taskrunner", 10, tr)
    write_spans(folder, "worker0", 11, workers)
    write_spans(folder, "agent_loop_worker", 12, rollouts)
    for step, reward in ((1, 0.25), (2, 0.75)):
        write_metrics(
            folder,
            "taskrunner",
            10,
            step * 10.0 + 5,
            [
                gauge(semconv.M_TRAINING_STEP, step),
                gauge(semconv.M_REWARD, reward, **{semconv.ATTR_REWARD_SOURCE: "score"}),
                gauge(semconv.M_KL, reward / 10, **{semconv.ATTR_KL_SOURCE: "kl_loss"}),
                gauge(semconv.M_THROUGHPUT, 100.0 * step),
                gauge("verl.actor.entropy", 5.0 - step),
            ],
        )
    write_metrics(folder, "agent_loop_worker", 12, 5.0, [traj_hist([1, 1, 0, 0], 0.7)])
    write_metrics(folder, "agent_loop_worker", 12, 15.0, [traj_hist([2, 3, 1, 0], 2.9)])  # cumulative: latest wins
    (folder / "expected.json").write_text(json.dumps({str(k): v for k, v in slowest.items()}))
    return folder
