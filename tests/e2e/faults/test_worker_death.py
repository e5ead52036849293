"""A worker-group actor dies in the middle of a step of the real verl trainer (CPU harness).

The harness kills the actor rank inside its 2nd ``compute_log_prob`` call (step 2's
``old_log_prob`` stage) with ``os._exit(1)``: no exception, no ``atexit``, what an OOM kill or a
segfault looks like to Ray (``VERL_CPU_HARNESS_KILL_AT``, test-only, see the harness plugin).

* the job fails as it does without otel-verl: rc != 0 and the same Ray exception in the console;
* the driver's ``verl.wg.actor_rollout_compute_log_prob`` span and its parents ``verl.old_log_prob``
  and ``verl.step`` (step 2) end with status ERROR and an ``exception`` event naming Ray's error,
  and they were exported to the files although the job died: the ``fit`` hook flushes on its
  error path too (``otel_verl/hooks/trainer.py``, bounded by ``OTEL_VERL_SHUTDOWN_TIMEOUT``).
"""

from __future__ import annotations

import os
import re

import pytest
from components import require_harness

pytestmark = pytest.mark.e2e

KILL_AT = "compute_log_prob:2"  # the actor rank's 2nd log-prob call: step 2 (val_before_train makes none)
STEPS = 3
WG_SPAN = "verl.wg.actor_rollout_compute_log_prob"
RAY_ERROR = re.compile(r"\b(ActorDiedError|RayActorError|ActorUnavailableError)\b")


ERROR = ("STATUS_CODE_ERROR", 2)  # how the OTLP JSON file exporter writes StatusCode.ERROR


def _ray_errors(text: str) -> set[str]:
    return set(RAY_ERROR.findall(text))


@pytest.fixture(scope="module")
def killed(verl_runs):
    return verl_runs.get("v0", "grpo", steps=STEPS, env={"VERL_CPU_HARNESS_KILL_AT": KILL_AT})


@pytest.fixture(scope="module")
def killed_uninstrumented(tmp_path_factory):
    verl_cpu_harness = require_harness()
    workdir = tmp_path_factory.mktemp("killed-plain")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["VERL_CPU_HARNESS_KILL_AT"] = KILL_AT
    return verl_cpu_harness.run_verl(workdir, driver="v0", algo="grpo", steps=STEPS, env=env, timeout=900, stream=None)


def test_job_fails_like_it_does_without_otel_verl(killed, killed_uninstrumented):
    assert "killing this worker in compute_log_prob call 2" in killed.output  # the fault did happen
    assert "killing this worker in compute_log_prob call 2" in killed_uninstrumented.output
    assert killed_uninstrumented.returncode != 0
    assert killed.returncode != 0 and killed.returncode != 124, killed.output[-3000:]
    assert _ray_errors(killed_uninstrumented.output), killed_uninstrumented.output[-3000:]
    assert _ray_errors(killed.output) == _ray_errors(killed_uninstrumented.output)
    # step 1 finished in both; step 2 never reached verl's logger
    assert 1 in killed.console and 1 in killed_uninstrumented.metrics
    assert 2 not in killed.console and 2 not in killed_uninstrumented.metrics
    assert set(killed.console[1]) == set(killed_uninstrumented.metrics[1])


def _exception_types(span) -> list[str]:
    out = []
    for event in span.events:
        if event.get("name") != "exception":
            continue
        for attr in event.get("attributes", []):
            if attr["key"] == "exception.type":
                out.append(attr["value"]["stringValue"])
    return out


def test_failed_call_and_its_parents_are_exported_with_the_error(killed):
    spans = killed.spans
    by_id = {s.span_id: s for s in spans}
    failed = [s for s in spans if s.name == WG_SPAN and s.status in ERROR]
    assert len(failed) == 1, [(s.name, s.status) for s in spans if s.name == WG_SPAN]
    wg = failed[0]
    stage = by_id[wg.parent_id]
    step = by_id[stage.parent_id]
    assert (stage.name, step.name) == ("verl.old_log_prob", "verl.step")
    assert step.attributes["verl.step"] == 2 and step.parent_id == ""
    for span in (wg, stage, step):
        assert span.status in ERROR, span.name
        types = _exception_types(span)
        assert len(types) == 1 and RAY_ERROR.search(types[0]), (span.name, types)
    # the step before it is complete and fine
    ok_steps = [s for s in spans if s.name == "verl.step" and s.attributes.get("verl.step") == 1]
    assert len(ok_steps) == 1 and ok_steps[0].status not in ERROR
    print(f"\nworker death: {wg.name} -> {_exception_types(wg)[0]}; job rc {killed.returncode}, {killed.wall_s:.0f} s")
