"""``examples/slurm/verl-otel.sbatch``, run as Slurm would run it on two nodes, with stand-ins for
``srun``, ``scontrol``, ``ray``, ``otel-verl``, ``opentelemetry-instrument`` and ``curl``
(``slurm_standins/``) that record every call with the node it ran on: the order of the steps,
the job's environment, and that the agents are drained and stopped whatever ends the job.

Not a real run: tests/e2e/test_slurm_example.py runs the script for real (stand-ins for Slurm alone,
on network-namespace hosts); these check cheaply what that run does not: the order of the steps, the
shared-node TLS settings, a failed job, a TERM while the job runs, an agent or doctor that fails."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.opskit import REPO

SCRIPT = REPO / "examples" / "slurm" / "verl-otel.sbatch"
STANDINS = Path(__file__).resolve().parent / "slurm_standins"
NODES = ("node1", "node2")
TOKEN = "tok-3f9a"


@dataclass
class Run:
    rc: int
    out: str
    events: list[tuple[str, str, str]]  # (tool, node, arguments), in the order they happened
    job_env: dict[str, str]
    local: Path
    submit: Path

    def index(self, tool: str, node: str, args_start: str) -> list[int]:
        return [i for i, (t, n, a) in enumerate(self.events) if t == tool and n == node and a.startswith(args_start)]

    def first(self, tool: str, node: str, args_start: str) -> int:
        found = self.index(tool, node, args_start)
        assert found, (tool, node, args_start, self.out, self.events)
        return found[0]


def run_script(tmp_path: Path, term_when_job_runs: bool = False, **env: str) -> Run:
    local, submit, home = tmp_path / "local", tmp_path / "submit", tmp_path / "home"
    for d in (local, submit, home):
        d.mkdir()
    (tmp_path / "token").write_text(TOKEN + "\n")
    log = tmp_path / "calls.log"
    log.touch()
    full_env = {
        "PATH": f"{STANDINS}:/usr/bin:/bin",
        "HOME": str(home),
        "STANDIN_LOG": str(log),
        "STANDIN_DIR": str(tmp_path),
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "verl-otel",
        "SLURM_JOB_NUM_NODES": str(len(NODES)),
        "SLURM_JOB_NODELIST": ",".join(NODES),
        "SLURM_SUBMIT_DIR": str(submit),
        "LOCAL_DIR": str(local),
        "TOKEN_FILE": str(tmp_path / "token"),
        "GATEWAYS": "gw1:4317,gw2:4317",
        "GATEWAY_CA": "",
        "POLL_S": "0.1",
        **env,
    }
    proc = subprocess.Popen(
        ["bash", str(SCRIPT), "trainer.total_epochs=1"],
        cwd=submit,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own group: whatever a failure leaves behind is ended below
    )
    try:
        if term_when_job_runs:  # what --signal=B:TERM@300 (the time limit near) does
            deadline = time.monotonic() + 60
            while "\twaiting for TERM" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    events = [tuple(line.split("\t", 2)) for line in log.read_text().splitlines()]
    job_env_file = tmp_path / "job.env"
    job_env = dict(
        line.split("=", 1) for line in (job_env_file.read_text().splitlines() if job_env_file.exists() else [])
    )
    return Run(proc.returncode, out, events, job_env, local, submit)  # type: ignore[arg-type]


def assert_steps_ended(run: Run) -> None:
    """Every srun step the script started has ended (the agents' and Ray's included)."""
    started = [a for t, n, a in run.events if t == "srun" and not a.startswith("ended ")]
    ended = [a.split(" ", 2)[2] for t, n, a in run.events if t == "srun" and a.startswith("ended ")]
    assert sorted(started) == sorted(ended), (started, ended)


def assert_drained_after(run: Run, after: int) -> None:
    """On every node, after event ``after``: the agent's queue looked at until empty (the stand-in
    says 7 items the first time), then the agent stopped."""
    for node in NODES:
        down = [i for i in run.index("otel-verl", node, "stack down") if i > after]
        assert down, (node, run.events)
        looks = [i for i in run.index("curl", node, "") if after < i < down[0]]
        assert len(looks) == 2, (node, run.events)  # 7 queued, then 0
        assert any(t == "otel-verl" and a.startswith("stack down") for t, n, a in run.events[down[0] :] if n == node)


def test_bash_syntax():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_agents_doctor_ray_job_then_drain(tmp_path):
    run = run_script(tmp_path)
    assert run.rc == 0, run.out
    job = run.first("job", "node1", "python3 -m verl.trainer.main_ppo")
    doctors = [run.first("otel-verl", node, "doctor") for node in NODES]
    for node in NODES:
        up = run.first("otel-verl", node, "stack up --role agent")
        assert up < min(doctors), run.events  # every agent is ready before doctor runs anywhere
        _, _, args = run.events[up]
        assert f"--data-dir {run.local}/otel-verl-agent-{os.getuid()}" in args  # queue on node-local disk
        assert "--gateway gw1:4317,gw2:4317" in args and f"--token-file {tmp_path / 'token'}" in args
        assert "--gateway-ca" not in args  # GATEWAY_CA="": the system's CAs
    assert max(doctors) < job
    # Ray: the head on the first node, the worker on the second, both before the job
    head = run.first("ray", "node1", "start --head --node-ip-address=10.9.0.1 --port=6379")
    worker = run.first("ray", "node2", "start --address=10.9.0.1:6379")
    assert head < worker < job
    assert "trainer.nnodes=2" in run.events[job][2] and run.events[job][2].endswith("trainer.total_epochs=1")
    assert run.job_env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://localhost:4317"
    assert run.job_env["OTEL_VERL_SPOOL_DIR"] == f"{run.local}/otel-verl-spool-{os.getuid()}"
    assert run.job_env["RAY_ADDRESS"] == "10.9.0.1:6379"
    assert run.job_env["OTEL_SERVICE_NAME"] == "verl-otel"
    assert not any("HEADERS" in name or "CERTIFICATE" in name for name in run.job_env)  # plain agent
    # after the job: Ray stopped on every node, then each agent drained and stopped
    stops = [run.first("ray", node, "stop") for node in NODES]
    assert job < min(stops)
    assert_drained_after(run, max(stops))
    assert_steps_ended(run)


def test_failed_job_still_drains_the_agents(tmp_path):
    """A job that fails (here on a shared node: the agents take TLS and the token) ends with its
    own exit code, after the agents were drained; the token reaches the job through the file."""
    run = run_script(
        tmp_path, STANDIN_JOB_RC="3", AGENT_TLS_CERT=str(tmp_path / "cert.pem"), AGENT_TLS_KEY=str(tmp_path / "k.pem")
    )
    assert run.rc == 3, run.out
    job = run.first("job", "node1", "python3")
    for node in NODES:
        args = run.events[run.first("otel-verl", node, "stack up --role agent")][2]
        assert f"--tls-cert {tmp_path / 'cert.pem'} --tls-key {tmp_path / 'k.pem'}" in args
    assert run.job_env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "https://localhost:4317"
    assert run.job_env["OTEL_VERL_OTLP_HEADERS_FILE"] == str(tmp_path / "token")
    assert run.job_env["OTEL_EXPORTER_OTLP_CERTIFICATE"] == str(tmp_path / "cert.pem")
    # the launcher's own SDK pipeline reads only this variable (otel-verl keeps it out of Ray)
    assert run.job_env["OTEL_EXPORTER_OTLP_HEADERS"] == f"authorization=Bearer%20{TOKEN}"
    assert_drained_after(run, job)
    assert_steps_ended(run)


def test_term_during_the_job_stops_it_and_drains(tmp_path):
    """The batch script's TERM (``--signal=B:TERM@300`` before the time limit) stops the job and
    still drains the agents."""
    run = run_script(tmp_path, term_when_job_runs=True, STANDIN_JOB_WAITS="1")
    assert run.rc == 143, run.out
    got_term = run.first("job", "node1", "got TERM")
    assert_drained_after(run, got_term)
    assert_steps_ended(run)


@pytest.mark.parametrize(
    "env", [{"STANDIN_AGENT_FAILS": "node2"}, {"STANDIN_DOCTOR_RC": "1"}], ids=["agent-fails", "doctor-fails"]
)
def test_no_job_without_agents_and_doctor(tmp_path, env):
    """An agent that does not start, or a problem doctor finds, ends the job before Ray and the
    training start; the agents that did start are stopped."""
    run = run_script(tmp_path, **env)
    assert run.rc != 0, run.out
    assert not [e for e in run.events if e[0] in ("job", "ray")], run.events
    assert run.index("otel-verl", "node1", "stack down"), run.events
    assert_steps_ended(run)
