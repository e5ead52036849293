"""Per-process pipelines built from the standard OTEL_* environment."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from otel_verl import config, semconv
from otel_verl.process.resource import Identity
from otel_verl.process.telemetry import build_own


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "run-42")
    monkeypatch.setenv("OTEL_VERL_FILE_DIR", str(tmp_path))
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "none")  # no root-logger handler left behind
    config.settings.cache_clear()
    yield monkeypatch, tmp_path
    config.settings.cache_clear()


def _lines(folder, prefix):
    out = []
    for path in sorted(folder.glob(prefix + "-*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def _resource(batch, key):
    res = batch["resourceSpans" if "resourceSpans" in batch else "resourceMetrics"][0]["resource"]
    for attr in res["attributes"]:
        if attr["key"] == key:
            return next(iter(attr["value"].values()))
    return None


def test_json_files_carry_the_process_identity_and_every_step(env):
    monkeypatch, folder = env
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp_json_file")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp_json_file")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")  # steps must not wait for it
    tel = build_own(Identity(role=semconv.ROLE_TASKRUNNER, project="proj", experiment="exp"))
    gauge = tel.meter.create_gauge("verl.actor.kl_loss")
    for value in (0.1, 0.2, 0.3):  # three short steps inside one export interval
        gauge.set(value)
        tel.mark_step()
    with tel.tracer.start_as_current_span("verl.step"):
        pass
    tel.flush(10)

    spans = _lines(folder, "traces-taskrunner")
    assert _resource(spans[0], "service.name") == "verl"
    assert _resource(spans[0], semconv.RES_RUN_ID) == "run-42"
    assert _resource(spans[0], semconv.RES_PROJECT) == "proj"
    assert _resource(spans[0], semconv.RES_ROLE) == "taskrunner"
    seen = []
    for batch in _lines(folder, "metrics-taskrunner"):
        for sm in batch["resourceMetrics"][0]["scopeMetrics"]:
            for metric in sm["metrics"]:
                if metric["name"] == "verl.actor.kl_loss":
                    seen += [p["asDouble"] for p in metric["gauge"]["dataPoints"]]
    assert seen[:3] == [0.1, 0.2, 0.3]
    tel.shutdown(5)


def test_otel_service_name_and_sdk_disabled_are_honoured(env):
    monkeypatch, folder = env
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp_json_file")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "grpo-qwen")
    tel = build_own(Identity(role="actor_rollout", rank=1))
    with tel.tracer.start_as_current_span("x"):
        pass
    tel.flush(10)
    spans = _lines(folder, "traces-actor_rollout1")
    assert _resource(spans[0], "service.name") == "grpo-qwen"
    assert _resource(spans[0], semconv.RES_RANK) == "1"  # OTLP JSON writes int64 as a string

    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    off = build_own(Identity())
    assert not off.tracer.start_span("y").is_recording()


@pytest.fixture
def hung_endpoint():
    """A TCP server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    conns = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conns.append(server.accept()[0])
            except OSError:
                pass

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    server.close()


@pytest.mark.parametrize("endpoint", ["refused", "hung"])
def test_flush_and_shutdown_are_bounded_whatever_the_endpoint(env, hung_endpoint, endpoint):
    monkeypatch, _ = env
    url = "http://127.0.0.1:1" if endpoint == "refused" else hung_endpoint
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    tel = build_own(Identity(role="taskrunner"))
    gauge = tel.meter.create_gauge("g")
    for i in range(50):
        with tel.tracer.start_as_current_span("s"):
            gauge.set(i)
        started = time.monotonic()
        tel.mark_step()  # never waits for the exporter
        assert time.monotonic() - started < 0.5
    started = time.monotonic()
    tel.flush(1.0)
    tel.shutdown(1.0)
    assert time.monotonic() - started < 3.0


def test_step_metrics_are_recorded_off_the_training_thread_in_order_and_bounded(env):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    from otel_verl.process.telemetry import MAX_PENDING_STEPS, Telemetry

    tel = Telemetry(TracerProvider(), MeterProvider())
    gate, started, seen, threads = threading.Event(), threading.Event(), [], set()

    def work(i: int):
        def run() -> None:
            started.set()
            gate.wait(10)
            seen.append(i)
            threads.add(threading.current_thread().name)

        return run

    tel.submit(work(0))
    assert started.wait(10)  # the recorder took step 0 and blocks on the gate
    for i in range(1, MAX_PENDING_STEPS + 6):
        tel.submit(work(i))
    assert seen == []  # record_step returned while the recorder was blocked
    assert not tel.drain(timeout_s=0.2)
    gate.set()
    assert tel.drain(timeout_s=10)
    assert tel.dropped_steps == 5  # bounded: the oldest waiting steps went
    assert seen == sorted(seen) and seen[0] == 0 and seen[-1] == MAX_PENDING_STEPS + 5
    assert len(seen) == MAX_PENDING_STEPS + 1
    assert threads == {"otel-verl-record"}


def test_coalesced_span_flush_requests_share_one_export_and_none_is_left_out(monkeypatch):
    """A process that asks for a flush after every call (reward workers, rollout servers:
    ``coalesce=True``) makes at most one span export per ``SPAN_FLUSH_GAP_S``; every span ended
    before a request is exported within about that gap of it, including those of the last one.
    A request without ``coalesce`` (a worker rank's: Ray may end it right after its last call)
    never waits."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from otel_verl.process import telemetry as telemetry_module
    from otel_verl.process.telemetry import SPAN_FLUSH_GAP_S, Telemetry

    exports: list[tuple[float, list[str]]] = []

    class Counting(SpanExporter):
        def export(self, spans):
            exports.append((time.monotonic(), [s.name for s in spans]))
            return SpanExportResult.SUCCESS

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 10
        while sum(len(n) for _, n in exports) < count and time.monotonic() < deadline:
            time.sleep(0.005)

    tp = TracerProvider()
    tp.add_span_processor(BatchSpanProcessor(Counting(), schedule_delay_millis=60_000))
    tel = Telemetry(tp, MeterProvider(), owned=True)
    tracer = tp.get_tracer("t")
    try:
        tracer.start_span("first").end()
        tel.request_flush(coalesce=True)  # idle before: exported at once
        wait_for(1)
        assert [names for _, names in exports] == [["first"]]
        burst_start = time.monotonic()
        for i in range(20):  # 20 calls ending 2 ms apart, each asking for a flush
            tracer.start_span(f"call-{i}").end()
            tel.request_flush(coalesce=True)
            time.sleep(0.002)
        last_asked = time.monotonic()
        wait_for(21)
        burst = exports[1:]
        assert sorted(n for _, names in burst for n in names) == sorted(f"call-{i}" for i in range(20))
        # 20 requests over ~40+ ms: one or two exports, not twenty
        assert 1 <= len(burst) <= 1 + int((last_asked - burst_start) / SPAN_FLUSH_GAP_S) + 1, burst
        assert exports[1][0] - exports[0][0] >= SPAN_FLUSH_GAP_S * 0.95  # the gap holds
        assert burst[-1][0] - last_asked <= SPAN_FLUSH_GAP_S + 1.0  # the last call's span follows soon

        # a long gap makes the difference plain: coalesced requests wait for it, a plain one does not
        monkeypatch.setattr(telemetry_module, "SPAN_FLUSH_GAP_S", 30.0)
        tracer.start_span("coalesced").end()
        tel.request_flush(coalesce=True)  # waits: the last export was just now
        time.sleep(0.2)
        assert sum(len(n) for _, n in exports) == 21
        asked = time.monotonic()
        tracer.start_span("worker-rank").end()
        tel.request_flush()  # ends the wait
        wait_for(23)
        assert sorted(exports[-1][1]) == ["coalesced", "worker-rank"]
        assert exports[-1][0] - asked < 5.0
    finally:
        tel.shutdown(timeout_s=5)
