"""Nothing listens unless configured, and then on loopback.

A default instrumented process (exporters ``otlp``) opens no listening socket: the listening
sockets of the process are the same before instrumenting and after a traced step with metrics.
``OTEL_METRICS_EXPORTER=prometheus`` opens exactly one, on 127.0.0.1 unless
``OTEL_EXPORTER_PROMETHEUS_HOST`` says otherwise.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import json, psutil

    def bound():
        out = []
        for c in psutil.Process().net_connections(kind="inet"):
            if c.status == psutil.CONN_LISTEN or (c.type == 2 and c.laddr):  # TCP listening, UDP bound
                out.append([c.laddr.ip, c.laddr.port])
        return sorted(out)

    before = bound()
    from otel_verl import VerlInstrumentor
    from otel_verl.process.state import PROCESS
    VerlInstrumentor().instrument()
    from verl.utils.profiler import marked_timer
    from verl.utils.tracking import Tracking

    class Trainer:  # what the trainer hook remembers: the step counter
        global_steps = 1
        train_dataloader = [0]

    trainer = PROCESS.trainer = Trainer()
    tracking = Tracking(project_name="p", experiment_name="e", default_backend=[])
    timing = {}
    with marked_timer("step", timing):
        with marked_timer("gen", timing):
            pass
    tracking.log(data={"actor/kl_loss": 0.1, **{f"timing_s/{k}": v for k, v in timing.items()}}, step=1)
    PROCESS.telemetry.request_flush()
    PROCESS.telemetry.flush(1.0)
    print(json.dumps({"before": before, "after": bound()}))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(tmp_path, env: dict[str, str]) -> tuple[list, list]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    base.update({"OTEL_VERL_RUN_ID": "security", "OTEL_VERL_SHUTDOWN_TIMEOUT": "1", **env})
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], env=base, cwd=tmp_path, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return [tuple(x) for x in result["before"]], [tuple(x) for x in result["after"]]


def test_a_default_run_opens_no_listening_socket(tmp_path):
    # all defaults: OTLP exporters (to localhost:4317, nothing there), logs included
    before, after = _child(tmp_path, {"OTEL_EXPORTER_OTLP_TIMEOUT": "1"})
    assert after == before == []


def test_file_exporters_open_no_listening_socket(tmp_path):
    env = {"OTEL_TRACES_EXPORTER": "otlp_json_file", "OTEL_METRICS_EXPORTER": "otlp_json_file"}
    env |= {"OTEL_LOGS_EXPORTER": "otlp_json_file", "OTEL_VERL_FILE_DIR": str(tmp_path / "t")}
    before, after = _child(tmp_path, env)
    assert after == before == []
    assert list((tmp_path / "t").glob("traces-*.jsonl"))  # the step did produce telemetry


@pytest.mark.parametrize(("host", "bound_ip"), [(None, "127.0.0.1"), ("0.0.0.0", "0.0.0.0")])
def test_prometheus_pull_endpoint_binds_loopback_unless_configured(tmp_path, host, bound_ip):
    port = _free_port()
    env = {"OTEL_TRACES_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "prometheus"}
    env["OTEL_EXPORTER_PROMETHEUS_PORT"] = str(port)
    if host is not None:
        env["OTEL_EXPORTER_PROMETHEUS_HOST"] = host
    before, after = _child(tmp_path, env)
    assert before == []
    assert after == [(bound_ip, port)]


# ---------------------------------------------------------------- redaction rule
