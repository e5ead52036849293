"""The real stack, live: `otel-verl stack up` on free ports, OTLP from the Python SDK into the real
Collector, and each signal read back from its backend's query API (Prometheus, Jaeger, VictoriaLogs).

Needs the binaries of `bash scripts/backends.sh` (or release binaries on PATH); skips, naming what is
missing, without them. About 15 s when they are there.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from support.opskit import COLLECTOR, REPO, get_json, stack_bin_dir
from verl_cpu_harness.ports import free_ports

from otel_verl import semconv, stack
from otel_verl.process.state import PROCESS
from otel_verl.stall import stacks

pytestmark = pytest.mark.live_stack  # runs last; waits for a background backends build

POLL_S = 30.0  # the Collector batches for up to 2 s (sending_queue.batch.flush_timeout), then exports


@pytest.fixture(scope="module")
def live_stack(tmp_path_factory) -> Iterator[dict[str, Any]]:
    bin_dir = stack_bin_dir()
    data_dir = tmp_path_factory.mktemp("stack")
    ports = free_ports(list(stack.ports.DEFAULT_PORTS))
    # Through the command line, as a user runs it: the components must outlive `otel-verl stack up`.
    base = [sys.executable, "-m", "otel_verl.cli", "stack"]
    where = ["--data-dir", str(data_dir)]
    if bin_dir is not None:
        where += ["--bin-dir", str(bin_dir)]
    try:
        res = subprocess.run(
            [*base, "up", *where, "--config-dir", str(COLLECTOR), "--timeout", "60"]
            + [f"--port={name}={port}" for name, port in ports.items()],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if res.returncode != 0:
            for log in sorted((data_dir / "logs").glob("*.log")):  # the whole story, for the failure report
                print(f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}")
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stdout.count(" ready after ") == len(stack.roles.START_ORDER), res.stdout
        # where to look (docs/stack.md): the URLs of this stack's ports
        assert f"otel-verl report --jaeger http://127.0.0.1:{ports['jaeger']} --run RUN_ID" in res.stdout, res.stdout
        assert f"http://127.0.0.1:{ports['prometheus']}/query " in res.stdout, res.stdout
        yield {"ports": ports, "data_dir": data_dir}
    finally:
        started = (stack.supervisor._load_state(data_dir).get("components") or {}).values()
        res = subprocess.run([*base, "down", *where], capture_output=True, text=True, timeout=120, check=False)
        assert res.returncode == 0, res.stdout + res.stderr
        assert not (data_dir / stack.supervisor.STATE_FILE).exists(), "down leaves no state behind"
        left = [c["argv"][0] for c in started if stack.supervisor._ours(c["pid"], c["argv"][0])]
        assert not left, f"still running after down: {left}"


def _until(what: str, probe: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + POLL_S
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (OSError, ValueError) as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(0.5)
    raise AssertionError(f"{what}: nothing after {POLL_S:g} s (last answer {last!r})")


@pytest.fixture(scope="module")
def sent(live_stack) -> dict[str, Any]:
    """One step's worth of telemetry, the way otel-verl's processes send it: OTLP gRPC to the Collector."""
    endpoint = f"http://127.0.0.1:{live_stack['ports']['otlp-grpc']}"
    run_id = f"stack-live-{uuid.uuid4().hex[:12]}"
    resource = Resource.create(
        {
            "service.name": "otel-verl-stack-test",
            "verl.run.id": run_id,
            "verl.project": "stack-live",
            "verl.experiment": "exp-1",
            "verl.process.role": "taskrunner",
        }
    )
    tp = TracerProvider(resource=resource)
    tp.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True)))
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=endpoint, insecure=True), export_interval_millis=3_600_000
    )
    mp = MeterProvider(resource=resource, metric_readers=[reader])
    lp = LoggerProvider(resource=resource)
    lp.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=endpoint, insecure=True)))

    tracer = tp.get_tracer("otel-verl-stack-test")
    with tracer.start_as_current_span("verl.step", attributes={"verl.step": 1}) as step:
        with tracer.start_as_current_span("verl.gen", attributes={"verl.stage": "gen"}):
            lp.get_logger("otel-verl-stack-test").emit(
                body=f"stage gen of {run_id}",
                severity_number=SeverityNumber.INFO,
                severity_text="INFO",
                attributes={"verl.step": 1},
            )
        trace_id = format(step.get_span_context().trace_id, "032x")
    kl = mp.get_meter("otel-verl-stack-test").create_gauge("verl.training.kl")
    kl.set(0.125, {"verl.kl.source": "kl_loss"})
    mp.get_meter("otel-verl-stack-test").create_counter("verl.training.steps", unit="{step}").add(1)
    # the stall doctor's stacks record, from its own emitter, into the same stack
    with mock.patch.object(PROCESS, "logger_provider", lambda: lp):
        assert stacks.report({"state": "stalled", "episode": 1, "seq": 1, "step": 2, "stalled_s": 31.0}, "HFCPUServer")
    assert mp.force_flush(10_000) and tp.force_flush(10_000) and lp.force_flush(10_000)
    for provider in (tp, mp, lp):
        provider.shutdown()
    return {"run_id": run_id, "trace_id": trace_id, "ports": live_stack["ports"]}


def test_metrics_arrive_in_prometheus_under_the_dashboard_names(sent):
    port, run_id = sent["ports"]["prometheus"], sent["run_id"]

    def query(expr: str) -> list:
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        return get_json(url, timeout=5)["data"]["result"]

    (kl,) = _until("verl_training_kl", lambda: query(f'verl_training_kl{{verl_run_id="{run_id}"}}'))
    assert float(kl["value"][1]) == 0.125
    # Promoted resource attributes (prometheus.yml otlp.promote_resource_attributes) are labels.
    labels = kl["metric"]
    assert labels["verl_kl_source"] == "kl_loss" and labels["verl_project"] == "stack-live"
    assert labels["verl_process_role"] == "taskrunner" and labels["job"] == "otel-verl-stack-test"
    (steps,) = _until("counter", lambda: query(f'verl_training_steps_total{{verl_run_id="{run_id}"}}'))
    assert float(steps["value"][1]) == 1.0


def test_traces_arrive_in_jaeger(sent):
    port = sent["ports"]["jaeger"]
    data = _until(
        "trace", lambda: get_json(f"http://127.0.0.1:{port}/api/traces/{sent['trace_id']}", timeout=5).get("data")
    )
    spans = {s["operationName"]: s for s in data[0]["spans"]}
    assert set(spans) == {"verl.step", "verl.gen"}
    gen_tags = {t["key"]: t["value"] for t in spans["verl.gen"]["tags"]}
    assert gen_tags["verl.stage"] == "gen"
    (process,) = {s["processID"] for s in spans.values()}
    proc_tags = {t["key"]: t["value"] for t in data[0]["processes"][process]["tags"]}
    assert proc_tags["verl.run.id"] == sent["run_id"]
    services = get_json(f"http://127.0.0.1:{port}/api/services", timeout=5)["data"]
    assert "otel-verl-stack-test" in services


def test_logs_arrive_in_victorialogs_with_trace_ids_and_resource(sent):
    port, run_id = sent["ports"]["victorialogs"], sent["run_id"]
    query = urllib.parse.urlencode({"query": f'"{run_id}"'})
    (record,) = _until(
        "log record",
        lambda: get_json(f"http://127.0.0.1:{port}/select/logsql/query?{query}", json_lines=True, timeout=5),
    )
    assert record["_msg"] == f"stage gen of {run_id}"
    assert record["trace_id"] == sent["trace_id"]
    assert record["verl.run.id"] == run_id and record["service.name"] == "otel-verl-stack-test"


def test_the_stall_doctors_documented_logsql_query_finds_exactly_its_stacks(sent):
    """docs/stall-doctor.md's VictoriaLogs query, as a user copies it, on this stack: the stacks record
    and not the run's other record."""
    port, run_id = sent["ports"]["victorialogs"], sent["run_id"]
    doc = (REPO / "docs" / "stall-doctor.md").read_text()
    (query,) = re.findall(r'`("verl\.run\.id":="<run id>"[^`]*)`', doc)
    params = urllib.parse.urlencode({"query": query.replace("<run id>", run_id)})
    records = _until(
        "stall stacks record",
        lambda: get_json(f"http://127.0.0.1:{port}/select/logsql/query?{params}", json_lines=True, timeout=5),
    )
    (record,) = records
    assert record[semconv.ATTR_EVENT_NAME] == semconv.EVENT_STALL_STACKS and record["verl.run.id"] == run_id
    assert 'Thread "MainThread"' in record["_msg"] and record[semconv.ATTR_RAY_ACTOR_CLASS] == "HFCPUServer"


def test_status_reports_every_component_ready(live_stack, tmp_path):
    lines: list[str] = []
    assert stack.supervisor.status(live_stack["data_dir"], out=lines.append) == 0, lines
    assert len(lines) == len(stack.roles.START_ORDER) and all(" ready " in line for line in lines), lines
    # A data folder where nothing was started.
    lines.clear()
    assert stack.supervisor.status(Path(tmp_path), out=lines.append) == 1 and "no stack" in lines[0]
