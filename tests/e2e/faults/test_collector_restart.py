"""The Collector goes away in the middle of a real verl run (CPU harness) and comes back.

A real OTLP/HTTP receiver (stdlib ``http.server`` on 127.0.0.1, protobuf bodies decoded with
``opentelemetry-proto``) takes the job's telemetry. After verl logs step 1 the receiver is closed
(its socket too: connections are refused), and once verl has logged two more steps and at least
``MIN_OUTAGE_S`` have passed (one batch-span delay: scheduled exports did fail; steps take 0.6-30 s
here depending on the machine's load) or only 3 steps are left, it is started again on the same
port. 20 steps, the SDK's defaults otherwise (OTLP timeout 10 s, batch span delay 5 s).

* Training does not notice: rc=0, verl's console metric keys of every step are those of the
  file-exporter run of the same config (tests/e2e; its steps 1 and 2, the later steps log the
  same keys). The exit tail is printed beside that run's, not bounded by it: the two runs are
  taken at different moments and Ray's teardown stretches with the machine's load; the Collector
  is back long before the end here, so the exit's bound belongs to test_collector_down (an
  endpoint still down at the exit).
* Export resumes by itself: requests arrive again within one OTLP retry window plus one batch
  delay of the restart (both on the receiver's clock, the retry schedule's wall time), and the
  ``verl.training.step`` points and ``verl.step`` spans of every step arrive: those of the outage
  (and of step 1, if still queued when the receiver went away) late, from the on-disk spool
  (``otel_verl.spool.store``) that took every batch an export gave up on.

Memory while the Collector is away is bounded, per process: the BatchSpanProcessor queue holds at
most ``OTEL_BSP_MAX_QUEUE_SIZE`` (2048) spans, the log processor 2048 records, and otel-verl's
``StepMetricReader`` at most ``step_reader.MAX_PENDING`` (32) step batches; beyond that the oldest
batches / newest spans are dropped (counted, never blocking training); a batch an export gives up
on waits in the on-disk spool instead of being lost, and once the spool holds one, the later
batches go straight there, so these queues do not fill.
"""

from __future__ import annotations

import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from support.components import require_harness
from support.opskit import VerlThread

from otel_verl import semconv
from otel_verl.process.step_reader import MAX_PENDING

pytestmark = pytest.mark.e2e

STEPS = 20  # CPU steps take ~0.7 s and Ray forwards console lines in bursts: room after the restart
DOWN_AFTER_STEP = 1  # stop the receiver when verl has logged this step
UP_AFTER_STEP = 3  # ... and start it again when it has logged this one
MIN_OUTAGE_S = 5.0  # ... and this long after the stop (OTEL_BSP_SCHEDULE_DELAY)
SHUTDOWN_TIMEOUT_S = 2.0
OTLP_TIMEOUT_S = 10.0  # SDK default (OTEL_EXPORTER_OTLP_TIMEOUT): one export's retries give up after it
BSP_DELAY_S = 5.0  # SDK default (OTEL_BSP_SCHEDULE_DELAY)
RESUME_SLACK_S = 5.0  # a loaded 2-core machine


class OTLPReceiver:
    """OTLP/HTTP receiver: records (arrival time, path, body) of every POST; HTTP/1.0, so no
    connection outlives a request and a stopped receiver refuses every new one."""

    def __init__(self) -> None:
        self.requests: list[tuple[float, str, bytes]] = []
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self.start()

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.requests.append((time.monotonic(), self.path, body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)  # SO_REUSEADDR: same port again
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
        self._server = None


def _spans(body: bytes) -> list[tuple[str, dict]]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    out = []
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                attrs = {a.key: a.value.int_value or a.value.string_value for a in span.attributes}
                out.append((span.name, attrs))
    return out


def _step_gauge_values(body: bytes) -> list[float]:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    req = ExportMetricsServiceRequest()
    req.ParseFromString(body)
    out = []
    for rm in req.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == semconv.M_TRAINING_STEP:
                    out += [p.as_double if p.HasField("as_double") else p.as_int for p in metric.gauge.data_points]
    return out


@pytest.fixture(scope="module")
def reference(verl_runs):
    run = verl_runs.get("v0", "grpo", steps=2)  # cached: shared with tests/e2e and test_collector_down
    assert run.returncode == 0, run.output[-4000:]
    return run


def test_collector_restart_mid_run(tmp_path, reference):
    verl_cpu_harness = require_harness()
    receiver = OTLPReceiver()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_LOGS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
            "OTEL_METRIC_EXPORT_INTERVAL": "5000",
            "OTEL_VERL_SHUTDOWN_TIMEOUT": str(SHUTDOWN_TIMEOUT_S),
            "OTEL_SERVICE_NAME": "verl-restart",
        }
    )
    watcher = verl_cpu_harness.StepWatcher()
    verl = VerlThread(tmp_path, watcher, driver="v0", algo="grpo", steps=STEPS, env=env, timeout=900)
    done = verl.done
    down_at = up_at = None
    try:
        if watcher.wait_for(DOWN_AFTER_STEP, done) is not None:
            before_outage = len(receiver.requests)
            receiver.stop()
            down_at = time.monotonic()
            if watcher.wait_for(UP_AFTER_STEP, done) is not None:
                # MIN_OUTAGE_S, but early enough that steps remain on a fast machine
                with watcher.changed:
                    watcher.changed.wait_for(
                        lambda: done.is_set() or STEPS - 8 in watcher.seen,
                        max(0.0, down_at + MIN_OUTAGE_S - time.monotonic()),
                    )
                receiver.start()
                up_at = time.monotonic()
        verl.thread.join(timeout=960)
    finally:
        if receiver._server is not None:
            receiver.stop()
    res = verl.result
    assert down_at is not None and up_at is not None, res.output[-4000:]

    # training did not notice
    assert res.returncode == 0, res.output[-4000:]
    console = res.metrics
    assert set(range(1, STEPS + 1)) <= set(console), sorted(console)
    for n in range(1, STEPS + 1):
        expected = set(reference.console[min(n, 2)])
        assert set(console[n]) == expected, (n, set(console[n]) ^ expected)
    last_step = max(t for s, t in watcher.seen.items() if s >= 1)
    exit_tail = verl.ended - last_step  # printed below, beside the file-exporter run's

    # the outage was real, and export came back by itself
    assert before_outage > 0
    assert not [r for r in receiver.requests if down_at < r[0] < up_at]  # nothing could arrive meanwhile
    after = [r for r in receiver.requests if r[0] >= up_at]
    assert after, "nothing arrived after the restart"
    first = {path: min(t for t, p, _ in after if p == path) - up_at for path in {p for _, p, _ in after}}
    resume_s = min(first.values())
    assert resume_s <= OTLP_TIMEOUT_S + BSP_DELAY_S + RESUME_SLACK_S, first

    # steps that started after the restart: the previous step's line came after it
    later_steps = {n for n in range(2, STEPS + 1) if watcher.seen.get(n - 1, 0.0) > up_at}
    assert later_steps, f"the run ended before the restart: {watcher.seen}, up at {up_at}"
    outage_steps = {n for n in range(1, STEPS + 1) if n not in later_steps and watcher.seen.get(n, 0.0) > down_at}
    step_values, step_spans = set(), set()
    for _, path, body in receiver.requests:
        if path == "/v1/metrics":
            step_values |= {int(v) for v in _step_gauge_values(body)}
        elif path == "/v1/traces":
            step_spans |= {a.get(semconv.ATTR_STEP) for name, a in _spans(body) if name == semconv.SPAN_STEP}
    assert later_steps <= step_values, (sorted(later_steps), sorted(step_values))
    assert later_steps <= step_spans, (sorted(later_steps), sorted(step_spans))
    # and every step of the outage too, step 1's included (its telemetry may still have been queued
    # when the receiver went away): what an export gave up on waited in the on-disk spool
    lost = sorted(set(range(1, STEPS + 1)) - (step_values & step_spans))
    print(
        f"\ncollector restart: down {up_at - down_at:.1f} s (steps {sorted(outage_steps)} ended meanwhile; "
        f"later steps {sorted(later_steps)}); first request after restart per path (s): "
        + ", ".join(f"{p} {s:.1f}" for p, s in sorted(first.items()))
        + f"; steps with verl.training.step points {sorted(step_values)}, verl.step spans {sorted(step_spans)} "
        f"(lost: {lost}); "
        f"exit tail {exit_tail:.1f} s vs file-exporter run {reference.exit_tail_s:.1f} s; "
        f"job {res.wall_s:.0f} s; {len(receiver.requests)} requests; metric queue bound {MAX_PENDING} batches"
    )
    assert not lost, lost
