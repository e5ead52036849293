"""End-to-end: the real trainer on a simulated next verl release, logging to tensorboard too.

One real run (v1 driver, GRPO, 2 steps) serves both questions, to keep CI time flat:

* **an untested verl degrades, never vanishes**: the installed verl with the moves of verl's main
  applied (the harness's ``VERL_CPU_HARNESS_NEXT_VERL``: ``LLMServerClient._vllm_request_id``
  gone, ``PPOTrainer._compute_metrics``'s ``batch`` renamed) and a ``verl-0.10.0.dist-info`` first
  on ``PYTHONPATH`` (what ``opentelemetry-instrument``'s check and otel-verl read). Training
  completes; the generic telemetry is there (every value ``Tracking.log`` saw, one trace per step);
  each process that made telemetry says once, in one table with the versions, that the moved hooks
  were skipped (a missing name, another shape) and the rest applied.
* **coexistence with verl's tensorboard and wandb loggers** (``trainer.logger=[console,
  tensorboard,wandb]``, wandb offline: ``WANDB_MODE=offline``): verl's event files hold the values
  it printed, for the same steps; wandb's offline run holds every key verl logged; otel-verl's
  telemetry is intact, one SDK pipeline (one resource) per process.
"""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from pathlib import Path

import pytest
from support import compat

from otel_verl import semconv

pytestmark = pytest.mark.e2e

NEXT = "0.10.0"
STEPS = 2
TABLE = re.compile(r"otel-verl \S+ on verl (\S+) \(untested; tested: ([^)]*)\): hooks (.*)$")


@pytest.fixture(scope="module")
def tensorboard_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tensorboard")


@pytest.fixture(scope="module")
def wandb_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("wandb")


@pytest.fixture(scope="module")
def run(verl_runs, tmp_path_factory, tensorboard_dir, wandb_dir):
    site = tmp_path_factory.mktemp("next-verl")
    info = site / f"verl-{NEXT}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: verl\nVersion: {NEXT}\n")
    path = os.pathsep.join([str(site), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    env = {
        "PYTHONPATH": path,
        "VERL_CPU_HARNESS_NEXT_VERL": "1",
        "TENSORBOARD_DIR": str(tensorboard_dir),
        "WANDB_MODE": "offline",  # as on a cluster without internet; `wandb sync` later
        "WANDB_DIR": str(wandb_dir),
    }
    loggers = "trainer.logger=[console,tensorboard,wandb]"
    result = verl_runs.get("v1", "grpo", steps=STEPS, env=env, extra=[loggers])
    errors = [line[:300] for line in result.output.splitlines() if "Error" in line or "Traceback" in line]
    assert result.returncode == 0, "\n".join(errors[-30:])
    return result


def test_training_completes_with_every_logged_value_exported(run):
    assert set(range(1, STEPS + 1)) <= set(run.console)  # (and step 0: validation before training)
    assert f"verl {NEXT} is outside the range it was tested with" in run.output
    taskrunner = [p for p in run.points if p.resource.get(semconv.RES_ROLE) == semconv.ROLE_TASKRUNNER]
    for n in range(1, STEPS + 1):
        steps = {p.time_ns for p in taskrunner if p.name == semconv.M_TRAINING_STEP and p.value == n}
        assert steps, f"step {n} not exported"
        exported = {p.name: p.value for p in taskrunner if p.time_ns == min(steps) and not p.attributes}
        logged = {k: v for k, v in run.console[n].items() if math.isfinite(v) and k != semconv.STEP_KEY}
        names = {semconv.metric_name(k): v for k, v in logged.items()}
        same = [name for name, value in names.items() if exported.get(name) == pytest.approx(value, rel=1e-6)]
        assert len(same) >= 50, sorted(set(names) - set(same))[:20]


def test_one_trace_per_step(run):
    steps = {s.attributes[semconv.ATTR_STEP]: s for s in run.spans if s.name == semconv.SPAN_STEP}
    assert sorted(steps) == list(range(1, STEPS + 1))
    assert len({s.trace_id for s in steps.values()}) == STEPS
    for step in steps.values():
        inside = [s for s in run.spans if s.trace_id == step.trace_id and semconv.ATTR_STAGE in s.attributes]
        assert {"gen", "update_actor"} <= {s.attributes[semconv.ATTR_STAGE] for s in inside}


RAY_PREFIX = re.compile(r"^(?:\x1b\[[0-9;]*m)?\(([^)]*)\)(?:\x1b\[[0-9;]*m)? ?")


def _tables(run) -> list[tuple[str, str, str]]:
    """(process, the table's first line, the lines that follow it) for each table printed: Ray
    prefixes each line of an actor's output with "(Actor pid=N)"; the launcher's lines have none."""
    lines = []
    for line in run.output.splitlines():
        match = RAY_PREFIX.match(line)
        lines.append((match.group(1), line[match.end() :]) if match else ("launcher", line))
    found = []
    for i, (source, body) in enumerate(lines):
        if TABLE.search(body):
            rest = []
            for other, follow in lines[i + 1 :]:
                if other != source:
                    continue  # another process's line in between
                if not follow.startswith("  "):
                    break
                rest.append(follow)
            found.append((source, body, "\n".join(rest)))
    return found


def test_each_process_says_once_which_hooks_applied_and_which_were_skipped(run):
    tables = _tables(run)
    assert tables, run.output[-3000:]
    sources = [source for source, _, _ in tables]
    assert len(set(sources)) == len(sources)  # once per process
    assert {"launcher", "TaskRunnerV1"} <= {s.split(" pid=")[0] for s in sources}
    for _, head, _ in tables:
        version, tested, counts = TABLE.search(head).groups()
        assert version == NEXT and tested == "verl >= 0.9.1, < 0.10"
        assert "applied" in counts
    everything = "\n".join(body for _, _, body in tables)
    assert re.search(
        r"skipped +verl\.trainer\.ppo\.v1\.trainer_base\.PPOTrainer\._compute_metrics +\[patch, private name, "
        r"since verl 0\.9\.0\] +shape: PPOTrainer\._compute_metrics has no parameter 'batch'",
        everything,
    )
    assert re.search(
        r"skipped +verl\.workers\.rollout\.llm_server\.LLMServerClient\._vllm_request_id +\[patch, private name, "
        r"since verl 0\.9\.0\] +LLMServerClient\._vllm_request_id missing",
        everything,
    )
    # the rest applied: the driver's trainer, the timer and Tracking.log; the rollout's client
    assert re.search(r"applied +verl\.utils\.tracking: Tracking\.log", everything)
    assert re.search(r"applied +verl\.utils\.profiler\.performance: _timer", everything)
    assert re.search(r"applied +verl\.trainer\.ppo\.v1\.trainer_base: PPOTrainer\.__init__", everything)
    assert re.search(r"applied +verl\.workers\.rollout\.llm_server: LLMServerClient\._acquire_server", everything)
    skipped = re.findall(r"^ *skipped +(\S+)", everything, re.M)
    assert set(skipped) == {
        "verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_metrics",
        "verl.workers.rollout.llm_server.LLMServerClient._vllm_request_id",
    }


def test_tensorboard_gets_what_verl_logged_beside_otel_verl(run, tensorboard_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = list(tensorboard_dir.rglob("events.out.tfevents.*"))
    assert files, "verl wrote no tensorboard event file"
    scalars: dict[str, dict[int, float]] = defaultdict(dict)
    for folder in {f.parent for f in files}:
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            for event in acc.Scalars(tag):
                scalars[tag][event.step] = event.value
    for key in ("critic/score/mean", "actor/pg_loss", "perf/throughput"):
        assert sorted(scalars[key]) == list(range(1, STEPS + 1)), key
        for n in range(1, STEPS + 1):
            assert scalars[key][n] == pytest.approx(run.console[n][key], rel=1e-5), (key, n)


def test_wandb_offline_gets_every_key_verl_logged_beside_otel_verl(run, wandb_dir):
    """wandb 0.31 keeps an offline run in a ``run-<id>.wandb`` record log (protobuf records, read by
    ``wandb sync``; its Python reader is gone): each key verl logged is in it as written. (verl's
    ``Tracking`` finishes the wandb run in ``__del__``, which does not run when Ray ends the
    TaskRunner actor: no ``wandb-summary.json``; ``wandb sync`` reads the record log.)"""
    (record_log,) = wandb_dir.glob("wandb/offline-run-*/run-*.wandb")
    raw = record_log.read_bytes()
    keys = set(run.console[STEPS]) - {semconv.STEP_KEY}
    assert len(keys) >= 50
    missing = sorted(k for k in keys if k.encode() not in raw)
    assert not missing, missing[:20]


def test_one_pipeline_per_process(run):
    """Every span and point of a process carries one resource: one SDK TracerProvider and
    MeterProvider per process, none added beside otel-verl's by verl's loggers."""
    resources: dict[int, set] = defaultdict(set)
    for record in (*run.spans, *run.points):
        pid = record.resource.get("process.pid")
        assert pid is not None, record.resource
        resources[pid].add(tuple(sorted((k, str(v)) for k, v in record.resource.items())))
    assert len(resources) >= 3  # the TaskRunner, a worker, the agent loop at least
    assert all(len(r) == 1 for r in resources.values()), {p: len(r) for p, r in resources.items()}


def test_compatibility_cell(run):
    """This run is its cell of the compatibility matrix (docs/generated/compatibility.md)."""
    compat.check(run, "0.10.0-sim-v1-hf")
