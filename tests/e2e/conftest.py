"""Real verl runs on CPU: the ``verl_runs`` fixture lives in tests/conftest.py (shared with
tests/e2e/faults, so each configuration runs once per session).

Here: ``cluster_run``, the one job submitted to a Ray cluster that was already running (``ray
start``), as on KubeRay/Slurm: v0 GRPO, 2 steps, two data-parallel ranks (two rollout replicas),
with secrets in its config and in Ray's runtime_env. Read by test_existing_cluster, faults/test_security
and test_rollout_e2e (two ranks).

The cluster is started with a clean environment: no ``OTEL_*`` variables and no
auto-instrumentation ``sitecustomize`` on ``PYTHONPATH``. Its workers therefore only learn the
telemetry settings from the job's ``runtime_env`` (added by our ``ray.init`` hook) and turn the
instrumentation on through verl's ``verl.plugins`` entry point. It gets its own port and its own
session; teardown ends exactly the processes of that session by pid (``ray stop --force`` would
also kill other Ray clusters on the machine).
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
from support.components import require_harness
from support.shared_runs import CLUSTER_RANKS, HF_SECRET, WANDB_SECRET

verl_cpu_harness = require_harness()
from verl_cpu_harness.command import ray_num_cpus  # noqa: E402

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


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    """A running Ray cluster (``ray start --head``) with room for ``cluster_run``: its address."""
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
                f"--num-cpus={ray_num_cpus('v0', CLUSTER_RANKS)}",
                f"--num-gpus={CLUSTER_RANKS}",
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


@pytest.fixture(scope="session")
def cluster_run(ray_cluster, verl_runs):
    return verl_runs.get(
        "v0",
        "grpo",
        steps=2,
        n_gpus=CLUSTER_RANKS,
        env={"RAY_ADDRESS": ray_cluster, "RAY_AUTH_MODE": "disabled"},
        extra=[
            # connecting to a running cluster: Ray refuses num_cpus/num_gpus in ray.init
            "ray_kwargs.ray_init.num_cpus=null",
            "++ray_kwargs.ray_init.num_gpus=null",
            f"+trainer.wandb_api_key={WANDB_SECRET}",
            f"+ray_kwargs.ray_init.runtime_env.env_vars.HF_TOKEN={HF_SECRET}",
        ],
    )
