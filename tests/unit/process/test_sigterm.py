"""SIGTERM during a step: what finished is flushed, within ``OTEL_VERL_SHUTDOWN_TIMEOUT``.

Ray turns SIGTERM into ``sys.exit`` in its workers and in the driver (``ray.init`` installs that
handler), so Python's exit path runs and otel-verl's exit shutdown (atexit, bounded) flushes.
The child process here installs the same handler, runs steps with stage spans and metrics, and is
killed with SIGTERM in the middle of a step.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

CHILD = textwrap.dedent(
    """
    import signal, sys, time
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))  # what Ray installs
    from otel_verl.process.resource import Identity
    from otel_verl.process.telemetry import build_own
    tel = build_own(Identity(role="taskrunner"))
    gauge = tel.meter.create_gauge("verl.actor.kl_loss")
    step = 0
    while True:
        step += 1
        with tel.tracer.start_as_current_span("verl.step", attributes={"verl.step": step}):
            with tel.tracer.start_as_current_span("verl.gen"):
                time.sleep(0.05)
            gauge.set(step * 0.1)
            tel.mark_step()
            if step == 3:
                print("in step 3", flush=True)
            time.sleep(0.2 if step < 3 else 60)  # killed here, inside step 3
    """
)
BOUND_S = 1.5


def _spans(folder) -> list[dict]:
    out = []
    for path in folder.glob("traces-*.jsonl"):
        for line in path.read_text().splitlines():
            for rs in json.loads(line)["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    out.extend(ss["spans"])
    return out


def _gauge_values(folder) -> list[float]:
    out = []
    for path in folder.glob("metrics-*.jsonl"):
        for line in path.read_text().splitlines():
            for rm in json.loads(line)["resourceMetrics"]:
                for sm in rm["scopeMetrics"]:
                    for m in sm["metrics"]:
                        if m["name"] == "verl.actor.kl_loss":
                            out += [p["asDouble"] for p in m["gauge"]["dataPoints"]]
    return out


def _run_child(tmp_path, extra_env: dict[str, str]) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        {
            "OTEL_TRACES_EXPORTER": "otlp_json_file",
            "OTEL_METRICS_EXPORTER": "otlp_json_file",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_METRIC_EXPORT_INTERVAL": "600000",
            "OTEL_VERL_FILE_DIR": str(tmp_path),
            "OTEL_VERL_SHUTDOWN_TIMEOUT": str(BOUND_S),
            **extra_env,
        }
    )
    proc = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "in step 3"
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        return time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigterm_mid_step_flushes_finished_steps_within_the_bound(tmp_path):
    took = _run_child(tmp_path, {})
    assert took <= BOUND_S + 1.0, took
    spans = _spans(tmp_path)
    steps = sorted(s["attributes"][0]["value"]["intValue"] for s in spans if s["name"] == "verl.step")
    assert [int(s) for s in steps] == [1, 2, 3]
    # step 3 was cut short: SystemExit (Ray's SIGTERM handler) left its ``with`` block, ending the span
    assert len([s for s in spans if s["name"] == "verl.gen"]) == 3  # step 3's finished stage is there
    assert _gauge_values(tmp_path)[:3] == pytest.approx([0.1, 0.2, 0.3])


def test_sigterm_with_a_hung_collector_exits_within_the_bound(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        port = sock.getsockname()[1]
        took = _run_child(
            tmp_path,
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_METRICS_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            },
        )
    finally:
        sock.close()
    assert took <= BOUND_S + 1.0, took
