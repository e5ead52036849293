"""End-to-end on a Ray cluster that was already running (``ray start``), as on KubeRay/Slurm.

The cluster is started with a clean environment: no ``OTEL_*`` variables and no
auto-instrumentation ``sitecustomize`` on ``PYTHONPATH``. Its workers therefore only learn the
telemetry settings from the job's ``runtime_env`` (added by our ``ray.init`` hook) and turn the
instrumentation on through verl's ``verl.plugins`` entry point.

The cluster gets its own port and its own session; teardown ends exactly the processes of that
session by pid (``ray stop --force`` would also kill other Ray clusters on the machine).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otel_verl import semconv

pytestmark = pytest.mark.e2e

RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _session_pids(sid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    pids.append(int(entry))
            except (ProcessLookupError, PermissionError):
                pass
    return pids


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    port = _free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("OTEL_") and k not in ("PYTHONPATH", "RAY_ADDRESS", "VIRTUAL_ENV")
    }
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["RAY_AUTH_MODE"] = "disabled"  # `ray start` turns token auth on; the driver would need the token
    log = tmp_path_factory.mktemp("ray") / "ray-start.log"
    # Its own temp dir: ``ray start`` writes ``<temp-dir>/ray_current_cluster``, and a plain
    # ``ray.init()`` anywhere on the machine connects to the cluster named in /tmp/ray's one.
    temp_dir = f"/tmp/otvr{port}"  # short: Ray's socket paths live below it
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                RAY,
                "start",
                "--head",
                "--block",
                "--node-ip-address=127.0.0.1",
                f"--port={port}",
                f"--temp-dir={temp_dir}",
                "--num-cpus=8",
                "--num-gpus=1",
                "--include-dashboard=false",
                "--disable-usage-stats",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session: teardown ends exactly these processes
        )
    try:
        deadline = time.time() + 180
        address = None
        while time.time() < deadline and address is None:
            if proc.poll() is not None:
                pytest.fail(f"ray start exited: {log.read_text()[-2000:]}")
            found = re.search(r"ray start --address='([^']+)'", log.read_text())
            address = found.group(1) if found else None
            time.sleep(2)
        if address is None:
            pytest.fail(f"Ray cluster did not come up: {log.read_text()[-2000:]}")
        yield address
    finally:
        sid = proc.pid  # session leader
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in _session_pids(sid):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(3)
        proc.wait(timeout=30)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_instrumented_job_on_a_running_cluster(ray_cluster, verl_runs):
    run = verl_runs.get(
        "v0",
        "grpo",
        steps=2,
        env={"RAY_ADDRESS": ray_cluster, "RAY_AUTH_MODE": "disabled"},
        # connecting to a running cluster: Ray refuses num_cpus/num_gpus in ray.init
        extra=["ray_kwargs.ray_init.num_cpus=null", "++ray_kwargs.ray_init.num_gpus=null"],
    )
    assert run.returncode == 0, run.output[-4000:]
    assert f"Connecting to existing Ray cluster at address: {ray_cluster}" in run.output
    roles = {s.resource.get(semconv.RES_ROLE) for s in run.spans}
    # the TaskRunner, the worker ranks and the agent-loop worker all exported spans
    assert semconv.ROLE_TASKRUNNER in roles
    assert semconv.ROLE_WORKER in roles
    assert semconv.ROLE_AGENT_LOOP in roles
    run_ids = {s.resource.get(semconv.RES_RUN_ID) for s in run.spans}
    assert len(run_ids) == 1 and None not in run_ids
    steps = {s.attributes[semconv.ATTR_STEP]: s for s in run.spans if s.name == semconv.SPAN_STEP}
    assert sorted(steps) == [1, 2]
    step_traces = {s.trace_id for s in steps.values()}
    workers = [s for s in run.spans if s.name.startswith(semconv.SPAN_WORKER_PREFIX) and s.trace_id in step_traces]
    assert workers
    trajs = [
        s
        for s in run.spans
        if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY and not s.attributes[semconv.ATTR_ROLLOUT_VALIDATE]
    ]
    assert len(trajs) == 16 and {s.trace_id for s in trajs} == step_traces
