"""A worker-group actor dies in the middle of a step of the real verl trainer (CPU harness).

The harness kills the actor rank inside its 2nd ``compute_log_prob`` call (step 2's
``old_log_prob`` stage) with ``os._exit(1)``: no exception, no ``atexit``, what an OOM kill or a
segfault looks like to Ray (``VERL_CPU_HARNESS_KILL_AT``, test-only, see the harness plugin).

* the job fails as it does without otel-verl: rc != 0 and the same Ray exception in the console;
* the driver's ``verl.wg.actor_rollout_compute_log_prob`` span and its parents ``verl.old_log_prob``
  and ``verl.step`` (step 2) end with status ERROR and an ``exception`` event naming Ray's error,
  and they were exported to the files although the job died: the ``fit`` hook flushes on its
  error path too (``otel_verl/hooks/trainer.py``, bounded by ``OTEL_VERL_SHUTDOWN_TIMEOUT``);
* what the killed worker had spooled arrives later. The run also exports over OTLP/HTTP to a
  Collector that is down for the whole run (a port that refuses connections), so every process
  spools every batch (``otel_verl.spool.store``), the killed worker too, until it dies. Then the
  real Collector of ``otel-verl stack`` starts on that port (a spool goes only to the endpoint its
  process sent to); ``otel-verl replay --spool`` sends the killed worker's spool folder, and the
  next verl process of the host with the job's destination (a pipeline of otel-verl's own, started
  on that spool folder) takes and sends what the other processes left at their exit.
  Every span the killed worker spooled is in Jaeger, and every span and log record the
  TaskRunner made (its OTLP JSON files) is in Jaeger and VictoriaLogs, its step metrics in
  Prometheus; the spools are empty afterwards.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections import Counter

import pytest
from support.opskit import (
    StackAPI,
    file_collections,
    jaeger_spans,
    poll_until,
    prom_collections,
    running_stack,
    spool_files,
    spooled_items,
)
from support.shared_runs import KILL_AT, KILLED_STEPS, switched_off_run
from verl_cpu_harness.ports import free_ports

from otel_verl import semconv

pytestmark = pytest.mark.e2e

WG_SPAN = "verl.wg.actor_rollout_compute_log_prob"
RAY_ERROR = re.compile(r"\b(ActorDiedError|RayActorError|ActorUnavailableError)\b")


ERROR = ("STATUS_CODE_ERROR", 2)  # how the OTLP JSON file exporter writes StatusCode.ERROR


def _ray_errors(text: str) -> set[str]:
    return set(RAY_ERROR.findall(text))


SERVICE = "verl-worker-death"


@pytest.fixture(scope="module")
def collector_port() -> int:
    """Where the run's Collector is (down during the run; the stack listens there afterwards): below
    the ephemeral range, so that no outgoing connection takes it meanwhile."""
    return free_ports(["otlp-http"])["otlp-http"]


@pytest.fixture(scope="module")
def killed(verl_runs, collector_port):
    env = {
        "VERL_CPU_HARNESS_KILL_AT": KILL_AT,
        # the files first (what the tests read), then OTLP/HTTP into a Collector that is down
        "OTEL_TRACES_EXPORTER": "otlp_json_file,otlp",
        "OTEL_METRICS_EXPORTER": "otlp_json_file,otlp",
        "OTEL_LOGS_EXPORTER": "otlp_json_file,otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}",
        # no retry fits in 0.5 s: a refused export is spooled at once, before the worker dies at step 2
        "OTEL_EXPORTER_OTLP_TIMEOUT": "0.5",
        "OTEL_SERVICE_NAME": SERVICE,
    }
    return verl_runs.get("v0", "grpo", steps=KILLED_STEPS, env=env)


def test_job_fails_like_it_does_without_otel_verl(killed, verl_runs):
    """The same job with otel-verl switched off (``switched_off_run``, the launcher's and the
    workers' instrumentation off through ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=verl``)."""
    off = switched_off_run(verl_runs)
    assert "killing this worker in compute_log_prob call 2" in killed.output  # the fault did happen
    assert "killing this worker in compute_log_prob call 2" in off.output
    assert off.returncode != 0 and off.returncode != 124, off.output[-3000:]
    assert killed.returncode != 0 and killed.returncode != 124, killed.output[-3000:]
    assert _ray_errors(off.output), off.output[-3000:]
    assert _ray_errors(killed.output) == _ray_errors(off.output)
    # step 1 finished in both; step 2 never reached verl's logger
    assert 1 in killed.console and 1 in off.console
    assert 2 not in killed.console and 2 not in off.console
    assert set(killed.console[1]) == set(off.console[1])


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


# The next verl process of the host: its pipeline (on the run's spool folder) starts, then waits.
NEXT_PROCESS = textwrap.dedent(
    """
    import sys
    from otel_verl import semconv
    from otel_verl.process.resource import Identity
    from otel_verl.process.telemetry import build_own
    t = build_own(Identity(role=semconv.ROLE_TASKRUNNER))
    print("up", flush=True)
    sys.stdin.readline()
    t.shutdown(10.0)
    """
)


def _killed_pid(output: str) -> int:
    m = re.search(r"\((?:\w+) pid=(\d+)\)[^\n]*killing this worker in compute_log_prob", output)
    assert m, output[-3000:]
    return int(m.group(1))


def test_what_the_killed_worker_spooled_arrives_later(killed, collector_port, tmp_path_factory):
    from otel_verl.offline.otlp_files import read_log_records

    root = killed.telemetry_dir / "spool"
    pid = _killed_pid(killed.output)
    dead = [p for p in root.iterdir() if p.name.split(".")[-2] == str(pid)]
    assert len(dead) == 1, sorted(p.name for p in root.iterdir())
    theirs = spooled_items(sorted(dead[0].glob("*/*.pb")))  # what the worker had on disk when it died
    assert theirs["traces"], "the killed worker had spooled no span"
    runner = {s.resource.get("service.instance.id") for s in killed.spans if _role(s) == semconv.ROLE_TASKRUNNER}
    runner_spans = {s.span_id for s in killed.spans if s.resource.get("service.instance.id") in runner}
    runner_logs = Counter(
        r.time_ns for r in read_log_records(killed.telemetry_dir) if r.resource.get("service.instance.id") in runner
    )
    run_id = next(iter(killed.spans)).resource[semconv.RES_RUN_ID]
    made = {k: v for k, v in file_collections(killed.points, run_id).items() if k in runner}
    assert made, "the TaskRunner exported no metrics"
    left_at_exit = len(spool_files(root))
    # the Collector comes up where the job sent: a spool goes only to its own endpoint
    with running_stack(tmp_path_factory, "worker-death-stack", {"otlp-http": collector_port}) as (_, data_dir, ports):
        stack = StackAPI(ports, data_dir)
        # 1. by hand: otel-verl replay --spool <the killed worker's folder>
        replay = subprocess.run(  # noqa: S603 - this interpreter, our CLI
            [
                sys.executable,
                "-m",
                "otel_verl.cli",
                "replay",
                "--spool",
                str(dead[0]),
                "--endpoint",
                stack.url("otlp-http"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        )
        assert replay.returncode == 0, replay.stdout + replay.stderr
        assert not dead[0].exists()
        # 2. the next verl process of the host takes what the others left
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(
            {
                "OTEL_VERL_SPOOL_DIR": str(root),
                # the job's own destination (same endpoint, protocol and headers): only such a process takes it
                "OTEL_EXPORTER_OTLP_ENDPOINT": stack.url("otlp-http"),
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_VERL_RUN_ID": f"next-{run_id}",
                "OTEL_SERVICE_NAME": "verl-next-process",
            }
        )
        nxt = subprocess.Popen(  # noqa: S603
            [sys.executable, "-c", NEXT_PROCESS], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert nxt.stdout.readline().strip() == "up"
            poll_until("every spool sent", lambda: not spool_files(root), 120, 0.5)
        finally:
            nxt.communicate("\n", timeout=60)
        found = poll_until(
            "the spans in Jaeger",
            lambda: (j := jaeger_spans(stack, SERVICE)[0]) and theirs["traces"] | runner_spans <= set(j) and j,
            120,
        )

        def vl_times() -> Counter[int]:
            return Counter(_vl_time_ns(r["_time"]) for r in stack.logsql(f'"{semconv.RES_RUN_ID}":="{run_id}"'))

        records = poll_until("the TaskRunner's log records in VictoriaLogs", lambda: not runner_logs - vl_times(), 120)
        collections = poll_until(
            "the TaskRunner's metric collections in Prometheus",
            lambda: all(_covers(prom_collections(stack, run_id).get(k, []), v) for k, v in made.items()),
            120,
        )
    print(
        f"\nworker death with the Collector down: {left_at_exit} batches left in the spools at the job's end; "
        f"the killed worker's {len(theirs['traces'])} spooled spans sent by replay --spool, the rest by the next "
        f"process; Jaeger {len(found)} spans; the TaskRunner's {sum(runner_logs.values())} log records and "
        f"{sum(len(v) for v in made.values())} metric collections all in VictoriaLogs and Prometheus"
    )
    assert records and collections and not spool_files(root)


def _covers(prom: list[int], made: list[int]) -> bool:
    """Prometheus has every collection the files have, each with at least their series (the OTLP
    reader collects just after the file reader: an instrument made in between is in its only)."""
    return len(prom) == len(made) and all(p >= f for f, p in zip(made, prom, strict=True))


def _role(span) -> str | None:
    return span.resource.get(semconv.RES_ROLE)


def _vl_time_ns(value: str) -> int:
    """VictoriaLogs' ``_time`` (RFC 3339, nanoseconds) as unix ns."""
    from datetime import datetime

    head, _, frac = value.rstrip("Z").partition(".")
    secs = int(datetime.fromisoformat(head + "+00:00").timestamp())
    return secs * 1_000_000_000 + int((frac or "0").ljust(9, "0")[:9])
