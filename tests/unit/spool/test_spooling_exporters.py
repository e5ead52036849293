"""Spooling OTLP exporters (``otel_verl.spool.exporters``) with the SDK's real OTLP exporters.

The endpoint is an in-process OTLP receiver, HTTP (``verl_cpu_harness.otlp_receiver``) or gRPC (the
opentelemetry-proto services on a grpc server), started on a port that refused connections before:
a Collector that was away and is back. Each pipeline is otel-verl's own (``build_own``: the SDK's
batch processors, otel-verl's step metric reader, the OTLP exporters of ``OTEL_*``).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.otlp_grpc_receiver import GrpcReceiver
from verl_cpu_harness.otlp_receiver import OtlpReceiver

from otel_verl import config, semconv
from otel_verl.process import exporters
from otel_verl.process.resource import Identity
from otel_verl.process.telemetry import build_own
from otel_verl.spool import exporters as spool_export
from otel_verl.spool import resend as spool_send
from otel_verl.spool import stats as spool_stats
from otel_verl.spool import store as spool

PROTOCOLS = ["http/protobuf", "grpc"]
WAIT_S = 60.0  # bounded polling: the re-sender backs off up to spool_export.MAX_BACKOFF_S


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: connections are refused until a receiver takes it


def _until(what: str, probe: Callable[[], object], timeout_s: float = WAIT_S) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout_s:g} s")


class HttpReceiver:
    """``OtlpReceiver`` with the same questions as ``GrpcReceiver``."""

    def __init__(self, port: int) -> None:
        self._rx = OtlpReceiver(port=port).__enter__()

    def span_ids(self) -> list[str]:
        return self._rx.span_ids()

    def step_values(self) -> list[float]:
        return [
            float(p.get("asDouble", p.get("asInt", 0)))
            for body in self._rx.bodies("/v1/metrics")
            for rm in body.get("resourceMetrics", [])
            for sm in rm.get("scopeMetrics", [])
            for m in sm.get("metrics", [])
            if m["name"] == semconv.M_TRAINING_STEP
            for p in m["gauge"]["dataPoints"]
        ]

    def stop(self) -> None:
        self._rx.__exit__()


def _receiver(protocol: str, port: int) -> GrpcReceiver | HttpReceiver:
    return GrpcReceiver(port) if protocol == "grpc" else HttpReceiver(port)


@pytest.fixture
def otlp_env(monkeypatch: pytest.MonkeyPatch) -> Callable[..., int]:
    """Point every signal at 127.0.0.1:<port> with ``protocol``; short SDK retries; the port."""

    # only this test's spoolers decide when the process's spool is handed back (a pipeline another
    # test left running would keep it open)
    monkeypatch.setattr(spool_export, "_spoolers", weakref.WeakSet())

    def setup(protocol: str, port: int | None = None, **extra: str) -> int:
        port = port or _free_port()
        for k in list(os.environ):
            if k.startswith("OTEL_") and k != config.SPOOL_DIR:
                monkeypatch.delenv(k)
        env = {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_LOGS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "1",  # the SDK gives a batch up after ~1 s of retries
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_METRIC_EXPORT_INTERVAL": "600000",
            **extra,
        }
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        config.settings.cache_clear()
        return port

    yield setup
    config.settings.cache_clear()


@contextmanager
def _pipeline() -> Iterator[object]:
    telemetry = build_own(Identity(role=semconv.ROLE_TASKRUNNER))
    try:
        yield telemetry
    finally:
        telemetry.shutdown(10.0)


def _steps(telemetry: object, first: int, last: int) -> list[str]:
    """Steps ``first``..``last``: a span, a log record and the step gauge each; the span ids."""
    gauge = telemetry.meter.create_gauge(semconv.M_TRAINING_STEP, unit="{step}")
    logger = telemetry.logger_provider.get_logger("spool-test")
    ids = []
    for step in range(first, last + 1):
        with telemetry.tracer.start_as_current_span(semconv.SPAN_STEP, attributes={semconv.ATTR_STEP: step}) as s:
            ids.append(f"{s.get_span_context().span_id:016x}")
            logger.emit(body=f"step {step}")
        gauge.set(step)
        telemetry.mark_step()
        telemetry.request_flush()
    return ids


def _spooled(signal: str) -> int:
    return spool_stats.counts().get((signal, semconv.SPOOL_SPOOLED), (0, 0))[0]


def _all_sent(telemetry: object) -> bool:
    return all(s.pending == 0 for s in telemetry._spoolers)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_healthy_endpoint_gets_every_batch_and_the_disk_nothing(otlp_env, protocol):
    port = otlp_env(protocol)
    rx = _receiver(protocol, port)
    try:
        with _pipeline() as telemetry:
            assert len(telemetry._spoolers) == 3  # every OTLP exporter is behind a spool
            ids = _steps(telemetry, 1, 3)
            _until("every span", lambda: set(ids) <= set(rx.span_ids()))
    finally:
        rx.stop()
    assert {1, 2, 3} <= set(rx.step_values())
    root = Path(spool.current().root)
    assert list(root.iterdir()) == []  # not one file, not one folder
    assert spool_stats.counts() == {}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_endpoint_away_then_back_gets_every_batch_from_the_spool_in_order(otlp_env, protocol):
    port = otlp_env(protocol)
    with _pipeline() as telemetry:
        ids = _steps(telemetry, 1, 2)
        _until("batches of every signal spooled", lambda: all(_spooled(s) for s in semconv.SIGNALS))
        ids += _steps(telemetry, 3, 6)  # while the spool holds batches: behind them, at once
        _until("steps 3-6 spooled", lambda: _spooled("metrics") >= 5)
        rx = _receiver(protocol, port)  # the Collector is back, on the same port
        try:
            _until("the spool emptied", lambda: _all_sent(telemetry))
            ids += _steps(telemetry, 7, 8)  # and new batches go straight out again
            _until("every span", lambda: set(ids) <= set(rx.span_ids()))
            _until("every step", lambda: {1, 2, 3, 4, 5, 6, 7, 8} <= set(rx.step_values()))
        finally:
            telemetry.shutdown(5.0)
            rx.stop()
    steps = [v for v in rx.step_values() if v in range(1, 9)]
    assert steps == sorted(steps), steps  # oldest first: each series' points arrive in time order
    counts = spool_stats.counts()
    for signal in semconv.SIGNALS:
        assert counts[(signal, semconv.SPOOL_RESENT)] == counts[(signal, semconv.SPOOL_SPOOLED)], counts
    assert not any(outcome in (semconv.SPOOL_DROPPED, semconv.SPOOL_REJECTED) for _, outcome in counts)
    assert list(Path(spool.current().root).iterdir()) == []  # sent: removed, folders too


class _Inner:
    """An exporter whose sends fail until told otherwise, counting them."""

    def __init__(self) -> None:
        self.ok = False
        self.calls = 0

    def send(self, batch: object) -> bool:
        self.calls += 1
        return self.ok

    def shutdown(self) -> None:
        pass


class _Sender:
    def __init__(self, answer: str = spool_send.RETRY) -> None:
        self.answer = answer
        self.sent: list[bytes] = []

    def send(self, body: bytes) -> str:
        if self.answer == spool_send.SENT:
            self.sent.append(body)
        return self.answer


def test_while_its_spool_holds_batches_an_exporter_tries_the_endpoint_no_more():
    inner, sender = _Inner(), _Sender()
    spooler = spool_export.Spooler("traces", inner, sender, encode=lambda b: b)
    try:
        for i in range(5):
            assert spooler.export(b"batch %d" % i, inner.send)  # True: safe on disk
        assert inner.calls == 1  # only the first: the others went behind it, no SDK retry each
        assert spooler.pending == 5
        sender.answer = spool_send.SENT  # the endpoint is back
        _until("the spool emptied", lambda: spooler.pending == 0)
        assert sender.sent == [b"batch %d" % i for i in range(5)]
        inner.ok = True
        assert spooler.export(b"later", inner.send) and inner.calls == 2  # straight out again
    finally:
        spool_export.finish([spooler])


def test_a_batch_the_endpoint_refuses_for_good_is_dropped_counted_and_said_once(caplog):
    inner, sender = _Inner(), _Sender(spool_send.REJECTED)
    spooler = spool_export.Spooler("logs", inner, sender, encode=lambda b: b)
    try:
        with caplog.at_level(logging.WARNING, logger="otel_verl"):
            spooler.export(b"one", inner.send)
            spooler.export(b"two", inner.send)
            _until("both rejected", lambda: spooler.pending == 0)
    finally:
        spool_export.finish([spooler])
    assert spool_stats.counts()[("logs", semconv.SPOOL_REJECTED)] == (2, 6)
    assert len([r for r in caplog.records if "refused a spooled logs batch" in r.getMessage()]) == 1


def test_an_http_400_answer_is_a_rejection_a_503_a_retry(otlp_env):
    port = otlp_env("http/protobuf")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    body = ExportTraceServiceRequest().SerializeToString()
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=1)
    sender = spool_send.sender_for(exporter, "traces")
    with OtlpReceiver(status=400, port=port) as rx:
        assert sender.send(body) == spool_send.REJECTED
        rx.status = 503
        assert sender.send(body) == spool_send.RETRY
        rx.status = 200
        assert sender.send(body) == spool_send.SENT
        assert sender.send(b"\xff not a request") == spool_send.REJECTED  # never sent
        assert len(rx.requests) >= 3


def test_at_exit_a_hung_endpoint_costs_the_bound_and_every_batch_reaches_the_disk(otlp_env, monkeypatch):
    """The first send hangs (the endpoint accepts and never answers); the batches queued behind it
    must not wait for it past the bound: they go to disk, and so does the hung one."""
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)  # accepts, never answers
    try:
        otlp_env(
            "http/protobuf",
            hung.getsockname()[1],
            OTEL_EXPORTER_OTLP_TIMEOUT="30",
            OTEL_VERL_SHUTDOWN_TIMEOUT="1",
            OTEL_BSP_SCHEDULE_DELAY="60000",  # the spans wait in the processor: the exit's flush sends them
            OTEL_BSP_MAX_EXPORT_BATCH_SIZE="1",  # ... one batch each, queued behind the first, stuck one
        )
        telemetry = build_own(Identity(role=semconv.ROLE_TASKRUNNER))
        ids = _steps(telemetry, 1, 5)
        start = time.monotonic()
        telemetry.shutdown()
        took = time.monotonic() - start
    finally:
        hung.close()
    # Nothing lost: what the exit could not send is in the spool, handed back for the next process.
    root = spool.current().root
    nxt = spool.Spool(root, spool.MIB)
    traces = next(s for s in telemetry._spoolers if s.signal == "traces")
    nxt.folder_name("traces", traces._sender.destination())  # the next process of that job
    assert nxt.adopt("traces") >= 1
    found = []
    while (entry := nxt.head("traces", "traces")) is not None:
        request = spool_send.parse("traces", nxt.read(entry))
        found += [f"{s.span_id.hex()}" for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
        nxt.done(entry, semconv.SPOOL_RESENT, 0)
    assert set(ids) <= set(found), (sorted(ids), sorted(found), took)


# A verl process that spools into ROOT (its endpoint refuses) and is killed: prints its span ids.
DIES = textwrap.dedent(
    """
    import os, time
    from otel_verl import semconv
    from otel_verl.spool import stats as spool_stats
    from otel_verl.process.resource import Identity
    from otel_verl.process.telemetry import build_own
    t = build_own(Identity(role=semconv.ROLE_WORKER, rank=0))
    with t.tracer.start_as_current_span("verl.worker.dies") as s:
        sid = f"{s.get_span_context().span_id:016x}"
    t.request_flush()
    deadline = time.monotonic() + 60
    while not spool_stats.counts().get(("traces", "spooled")) and time.monotonic() < deadline:
        time.sleep(0.05)
    print(sid, flush=True)
    os._exit(0)  # as SIGKILL: no atexit, no flush
    """
)
# The next verl process of the host: its pipeline starts, then it waits for a line.
NEXT = textwrap.dedent(
    """
    import sys
    from otel_verl import semconv
    from otel_verl.process.resource import Identity
    from otel_verl.process.telemetry import build_own
    t = build_own(Identity(role=semconv.ROLE_TASKRUNNER))
    print("up", flush=True)
    sys.stdin.readline()
    t.shutdown(5.0)
    """
)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_next_process_of_the_host_sends_what_a_killed_one_left(otlp_env, tmp_path, protocol):
    port = otlp_env(protocol, OTEL_VERL_SPOOL_DIR=str(tmp_path / "spool"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    dead = subprocess.run(  # noqa: S603 - this interpreter, our script
        [sys.executable, "-c", DIES], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    span_id = dead.stdout.split()[-1]
    assert list((tmp_path / "spool").glob("*/traces/*.pb")), "the killed process left nothing in its spool"
    rx = _receiver(protocol, port)
    nxt = subprocess.Popen(  # noqa: S603
        [sys.executable, "-c", NEXT], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert nxt.stdout.readline().strip() == "up"
        _until("the killed process's span", lambda: span_id in rx.span_ids())
    finally:
        nxt.communicate("\n", timeout=60)
        rx.stop()
    assert not list((tmp_path / "spool").glob("*/traces/*.pb"))


def test_spool_off_leaves_the_sdk_exporter_as_it_is(otlp_env):
    otlp_env("http/protobuf", OTEL_VERL_SPOOL="off")
    spool.reset()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    made = exporters.make_exporter("otlp", OTLPSpanExporter, "traces", Identity())
    assert type(made) is OTLPSpanExporter


def test_other_exporters_are_not_wrapped(otlp_env, tmp_path):
    otlp_env("http/protobuf")
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    assert type(exporters.make_exporter("console", ConsoleSpanExporter, "traces", Identity())) is ConsoleSpanExporter


def test_an_sdk_without_the_private_client_gets_no_spool_said_once_with_versions(otlp_env, caplog, monkeypatch):
    otlp_env("http/protobuf")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    class Renamed(OTLPSpanExporter):  # a future SDK whose client is called something else
        def __init__(self) -> None:
            super().__init__()
            self._transport_client = self.__dict__.pop("_client")

    Renamed.__module__ = OTLPSpanExporter.__module__
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        first = exporters.make_exporter("otlp", Renamed, "traces", Identity())
        exporters.make_exporter("otlp", Renamed, "traces", Identity())
    assert type(first) is Renamed  # as without otel-verl's spool
    said = [r.getMessage() for r in caplog.records if "_client.export" in r.getMessage()]
    assert len(said) == 1 and "opentelemetry-sdk" in said[0] and "no on-disk spool for traces" in said[0], said


def test_the_export_thread_counts_in_otel_verls_own_cpu():
    from otel_verl.process.overhead import component_of

    inner, sender = _Inner(), _Sender()
    spooler = spool_export.Spooler("metrics", inner, sender, encode=lambda b: b)
    try:
        spooler.export(b"x", inner.send)
        names = {t.name for t in threading.enumerate()}
        assert "otel-verl-export-metrics" in names
        assert component_of("otel-verl-export-metrics") == semconv.COMPONENT_EXPORTER
    finally:
        spool_export.finish([spooler])


def test_http_answers_about_credentials_or_routing_keep_the_batch_only_bad_data_drops_it(otlp_env):
    port = otlp_env("http/protobuf")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    body = ExportTraceServiceRequest().SerializeToString()
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=1)
    sender = spool_send.sender_for(exporter, "traces")
    with OtlpReceiver(status=401, port=port) as rx:
        for status in (401, 403, 404, 405, 415):
            rx.status = status
            assert sender.send(body) == spool_send.HOLD, status
        for status in (400, 413):
            rx.status = status
            assert sender.send(body) == spool_send.REJECTED, status


def test_grpc_answers_about_credentials_or_routing_keep_the_batch_only_bad_data_drops_it(otlp_env):
    import grpc
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    port = otlp_env("grpc")
    body = ExportTraceServiceRequest().SerializeToString()
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}", insecure=True, timeout=5)
    sender = spool_send.sender_for(exporter, "traces")
    rx = GrpcReceiver(port)
    try:
        if exporter._client is None:
            exporter._initialize_channel_and_stub()
        expected = {
            "UNAUTHENTICATED": spool_send.HOLD,
            "PERMISSION_DENIED": spool_send.HOLD,
            "NOT_FOUND": spool_send.HOLD,
            "UNIMPLEMENTED": spool_send.HOLD,
            "UNKNOWN": spool_send.RETRY,
            "INTERNAL": spool_send.RETRY,
            "INVALID_ARGUMENT": spool_send.REJECTED,
        }
        for code, outcome in expected.items():
            rx.abort = getattr(grpc.StatusCode, code)
            assert sender.send(body) == outcome, code
        rx.abort = None
        assert sender.send(body) == spool_send.SENT
    finally:
        rx.stop()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_endpoint_answering_unauthorized_then_ok_loses_nothing(otlp_env, protocol, monkeypatch):
    """A token the Collector does not take (yet): the spooled batches wait, counted as refused, and
    all arrive once it does; nothing is dropped or rejected."""
    import grpc

    monkeypatch.setattr(spool_export, "MAX_BACKOFF_S", 0.5)
    port = otlp_env(protocol)
    rx = _receiver(protocol, port)
    if protocol == "grpc":
        rx.abort = grpc.StatusCode.UNAUTHENTICATED
    else:
        rx._rx.status = 401
    try:
        with _pipeline() as telemetry:
            ids = _steps(telemetry, 1, 3)
            refused = lambda: spool_stats.counts().get(("traces", semconv.SPOOL_REFUSED), (0, 0))[0]  # noqa: E731
            _until("spooled batches refused twice", lambda: refused() >= 2)
            assert _spooled("traces") and not _all_sent(telemetry)  # kept
            if protocol == "grpc":
                rx.abort = None
            else:
                rx._rx.status = 200
            _until("every span", lambda: set(ids) <= set(rx.span_ids()))
            _until("the spool emptied", lambda: _all_sent(telemetry))
    finally:
        rx.stop()
    counts = spool_stats.counts()
    assert not any(outcome in (semconv.SPOOL_DROPPED, semconv.SPOOL_REJECTED) for _, outcome in counts), counts


def test_a_batch_answered_too_late_is_sent_at_most_max_late_times(otlp_env, monkeypatch, caplog):
    """The endpoint takes each request and answers after the exporter's timeout: the batch may have
    arrived each time. It is sent ``spool.MAX_LATE`` times in all (counted in its file name), then dropped."""
    monkeypatch.setattr(spool_export, "MIN_BACKOFF_S", 0.05)
    monkeypatch.setattr(spool_export, "MAX_BACKOFF_S", 0.2)
    otlp_env("http/protobuf")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    body = ExportTraceServiceRequest().SerializeToString()
    with OtlpReceiver(delay=1.5) as rx:
        exporter = OTLPSpanExporter(endpoint=f"{rx.url}/v1/traces", timeout=0.3)
        sender = spool_send.sender_for(exporter, "traces")
        assert sender.send(body) == spool_send.LATE  # a read timeout: it may have arrived
        spooler = spool_export.Spooler("traces", exporter, sender, encode=lambda b: b)
        try:
            with caplog.at_level(logging.WARNING, logger="otel_verl"):
                spooler._spool(body)
                _until("given up on", lambda: spooler.pending == 0, 30.0)
                time.sleep(1.0)  # nothing is sent after that
        finally:
            spool_export.finish([spooler])
        assert len(rx.sizes) == 1 + spool.MAX_LATE, rx.sizes  # the probe above, then the spool's sends
    assert spool_stats.counts()[("traces", semconv.SPOOL_DROPPED)] == (1, len(body))
    assert [r for r in caplog.records if "without an answer in time" in r.getMessage()]


def test_late_sends_are_counted_durably_across_processes(tmp_path):
    """A batch sent twice too late by a process that then died is sent once more by the next, then dropped."""
    root = tmp_path / "spool"
    dest = spool.Destination("http", "http://c:4318/v1/traces", b"[]")
    first = spool.Spool(str(root), spool.MIB)
    first.folder_name("traces", dest)
    assert first.put("traces", "traces", b"slow")
    for n in (1, 2):
        assert first.late(first.head("traces", "traces")) == n
    first.close()  # ended: the next process takes it
    assert [p.name for p in root.glob("*/traces/*.pb")] == ["0000000000000001.2.pb"]
    nxt = spool.Spool(str(root), spool.MIB)
    nxt.folder_name("traces", dest)
    assert nxt.adopt("traces") == 1
    assert nxt.late(nxt.head("traces", "traces")) == spool.MAX_LATE


class _Picky:
    """An endpoint that answers ``answer`` to the batches named in ``refuse`` and takes the others;
    ``after``: it is back (takes everything) after that many more attempts."""

    def __init__(self, refuse: set[bytes], answer: str = spool_send.RETRY) -> None:
        self.refuse = refuse
        self.answer = answer
        self.after: int | None = None
        self.sent: list[bytes] = []
        self.attempts: list[bytes] = []

    def send(self, body: bytes) -> str:
        self.attempts.append(body)
        if self.after is not None:
            self.after -= 1
            if self.after < 0:
                self.refuse = set()
        if body in self.refuse:
            return self.answer
        self.sent.append(body)
        return spool_send.SENT


def test_one_batch_the_endpoint_keeps_refusing_does_not_hold_up_the_others(monkeypatch):
    monkeypatch.setattr(spool_export, "MIN_BACKOFF_S", 0.01)
    monkeypatch.setattr(spool_export, "MAX_BACKOFF_S", 0.05)
    inner = _Inner()
    sender = _Picky({b"stuck"})
    spooler = spool_export.Spooler("metrics", inner, sender, encode=lambda b: b)
    try:
        for body in (b"stuck", b"a", b"b", b"c"):
            assert spooler.export(body, inner.send)  # the endpoint is away: all spooled
        _until("the others sent", lambda: sender.sent == [b"a", b"b", b"c"])
        assert spooler.pending == 1  # kept, behind them
        sender.refuse.clear()
        _until("the stuck one too", lambda: spooler.pending == 0)
        assert sender.sent == [b"a", b"b", b"c", b"stuck"]
    finally:
        spool_export.finish([spooler])


@pytest.mark.parametrize("answer", [spool_send.RETRY, spool_send.AWAY])
def test_while_the_endpoint_refuses_everything_the_order_is_kept(monkeypatch, answer):
    """Refused (an answer) or away (none) for many tries, then back: the batches go in their order,
    also when the endpoint comes back just as the oldest had its tries."""
    monkeypatch.setattr(spool_export, "MIN_BACKOFF_S", 0.01)
    monkeypatch.setattr(spool_export, "MAX_BACKOFF_S", 0.02)
    inner = _Inner()
    bodies = [b"point %d" % i for i in range(5)]
    sender = _Picky(set(bodies), answer)
    spooler = spool_export.Spooler("metrics", inner, sender, encode=lambda b: b)
    try:
        for body in bodies:
            assert spooler.export(body, inner.send)
        _until("many tries", lambda: len(sender.attempts) >= 6 * spool_export.ROTATE_AFTER)
        sender.refuse.clear()
        _until("all sent", lambda: spooler.pending == 0)
        assert sender.sent == bodies  # a metric series' points in time order
        if answer == spool_send.AWAY:  # back just after the oldest's third try: still in order
            sender.refuse, sender.after = {b"late 0", b"late 1"}, spool_export.ROTATE_AFTER
            for body in (b"late 0", b"late 1"):
                spooler.export(body, inner.send)
            _until("all sent", lambda: spooler.pending == 0)
            assert sender.sent[-2:] == [b"late 0", b"late 1"]
    finally:
        spool_export.finish([spooler])


# A verl process of some job: its pipeline starts (and looks at the spool root); "look": it reports
# how many dead folders it left for another destination once it has looked, "send": it just waits.
JOB = textwrap.dedent(
    """
    import json, sys, time
    from otel_verl import semconv
    from otel_verl.spool import store as spool
    from otel_verl.process.resource import Identity
    from otel_verl.process.telemetry import build_own
    t = build_own(Identity(role=semconv.ROLE_TASKRUNNER))
    store = spool.current()
    deadline = time.monotonic() + 60
    while sys.argv[1] == "look" and not store._told and time.monotonic() < deadline:
        time.sleep(0.05)
    print(json.dumps({"left": len(store._told), "adopted": sum(map(len, store._adopted.values()))}), flush=True)
    sys.stdin.readline()
    t.shutdown(5.0)
    """
)


def test_two_jobs_on_one_host_each_spool_goes_only_to_its_own_endpoint_with_its_own_token(otlp_env, tmp_path):
    """Job A dies with a spool (endpoint A, token a). Job B (endpoint B, token b) and a job with
    endpoint A but token c look at the same root and leave it alone; the next process of job A
    sends it, to A, with token a."""
    port_a = otlp_env("http/protobuf", OTEL_VERL_SPOOL_DIR=str(tmp_path / "spool"))
    port_b = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def job(port: int, token: str) -> dict[str, str]:
        return {
            **env,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{token}",
        }

    dead = subprocess.run(  # noqa: S603 - this interpreter, our script
        [sys.executable, "-c", DIES], env=job(port_a, "a"), capture_output=True, text=True, timeout=120, check=True
    )
    span_id = dead.stdout.split()[-1]
    assert list((tmp_path / "spool").glob("*/traces/*.pb"))
    assert b"Bearer" not in b"".join(p.read_bytes() for p in (tmp_path / "spool").glob("*/*/destination"))
    with OtlpReceiver(port=port_a) as rx_a, OtlpReceiver(port=port_b) as rx_b:
        for port, token in ((port_b, "b"), (port_a, "c")):
            other = subprocess.Popen(  # noqa: S603
                [sys.executable, "-c", JOB, "look"], env=job(port, token), stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            said = json.loads(other.stdout.readline())
            other.communicate(b"\n", timeout=60)
            assert said["left"] >= 1 and said["adopted"] == 0, said
        assert span_id not in rx_b.span_ids() and span_id not in rx_a.span_ids()
        assert list((tmp_path / "spool").glob("*/traces/*.pb"))  # untouched
        own = subprocess.Popen(  # noqa: S603
            [sys.executable, "-c", JOB, "send"], env=job(port_a, "a"), stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        try:
            own.stdout.readline()
            _until("the dead process's span at its own endpoint", lambda: span_id in rx_a.span_ids())
        finally:
            own.communicate(b"\n", timeout=60)
        carried = [h for path, h, body in rx_a.requests if path == "/v1/traces" and span_id in str(body)]
        assert carried and all(h["authorization"] == "Bearer a" for h in carried)
        assert span_id not in rx_b.span_ids()
    assert not list((tmp_path / "spool").glob("*/traces/*.pb"))


# A verl process under the requests, urllib3 and grpc instrumentations of ``opentelemetry-bootstrap``
# (their spans recorded in memory): its endpoint (PROTOCOL) is away, then back (direct sends, spooled
# batches re-sent), it ends, and a spool an ended process left is replayed (OTLP/HTTP); then the
# user's own calls: an SDK exporter of that protocol and a ``requests`` POST. Prints the
# instrumentations' spans before and after the user's calls.
TRACED = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.append(sys.argv[1])  # the bootstrap's instrumentations, behind the venv's packages
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.instrumentation.grpc import GrpcInstrumentorClient
    from opentelemetry.instrumentation.requests import RequestsInstrumentor
    from opentelemetry.instrumentation.urllib3 import URLLib3Instrumentor
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    from opentelemetry import trace
    trace.set_tracer_provider(provider)  # the grpc instrumentation takes the global one
    RequestsInstrumentor().instrument(tracer_provider=provider)
    URLLib3Instrumentor().instrument(tracer_provider=provider)
    GrpcInstrumentorClient().instrument(tracer_provider=provider)
    import requests
    from support.otlp_grpc_receiver import GrpcReceiver
    from verl_cpu_harness.otlp_receiver import OtlpReceiver
    from otel_verl import semconv
    from otel_verl.offline.replay_spool import replay_spool
    from otel_verl.process import exporters
    from otel_verl.spool import store as spool
    from otel_verl.spool import stats as spool_stats
    from otel_verl.process.resource import Identity
    from otel_verl.process.telemetry import build_own
    grpc_protocol = os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"

    def until(probe):
        deadline = time.monotonic() + 60
        while not probe():
            assert time.monotonic() < deadline
            time.sleep(0.05)

    def steps(t, n):
        for step in range(n):
            with t.tracer.start_as_current_span(semconv.SPAN_STEP):
                pass
            t.request_flush()

    t = build_own(Identity(role=semconv.ROLE_TASKRUNNER))
    steps(t, 2)
    until(lambda: spool_stats.counts().get(("traces", "spooled")))
    port = int(sys.argv[2])
    rx = GrpcReceiver(port) if grpc_protocol else OtlpReceiver(port=port).__enter__()
    until(lambda: all(s.pending == 0 for s in t._spoolers) and rx.span_ids())
    steps(t, 2)  # straight out again
    t.shutdown(5.0)
    http = OtlpReceiver().__enter__()
    dead = spool.Spool(sys.argv[3], spool.MIB)
    dead.folder_name("traces", spool.Destination("http", http.url + "/v1/traces", b"[]"))
    body = open(sys.argv[4], "rb").read()
    dead.put("traces", "traces", body)
    dead.close()
    replay_spool(sys.argv[3], endpoint=http.url, env={}, out=open(os.devnull, "w"))
    ours = [s.name for s in memory.get_finished_spans()]
    received = len(rx.requests) + len(http.requests)
    users_spans = InMemorySpanExporter()
    users_provider = TracerProvider()
    users_provider.add_span_processor(SimpleSpanProcessor(users_spans))
    with users_provider.get_tracer("user").start_as_current_span("user's"):
        pass
    exporter = next(iter(exporters.exporter_classes("traces").values()))()  # the user's own, not otel-verl's
    exporter.export(users_spans.get_finished_spans())
    requests.post(http.url + "/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}, timeout=5)
    users = [s.name for s in memory.get_finished_spans()][len(ours):]
    print(json.dumps({"ours": ours, "users": users, "received": received}))
    """
)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_no_export_resend_flush_or_replay_is_ever_traced_by_the_bootstrap_instrumentations(
    otlp_env, tmp_path, protocol
):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from verl_cpu_harness import bootstrap_site

    site, _ = bootstrap_site.build()  # what `opentelemetry-bootstrap -a install` adds (cached)
    port = otlp_env(protocol, OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none")
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.add(name="s", trace_id=b"\1" * 16, span_id=b"\1" * 8)
    (tmp_path / "body.pb").write_bytes(request.SerializeToString())
    tests = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*sys.path, tests]),
        "OTEL_VERL_SPOOL_DIR": str(tmp_path / "spool"),
    }
    got = subprocess.run(  # noqa: S603 - this interpreter, our script
        [sys.executable, "-c", TRACED, str(site), str(port), str(tmp_path / "dead"), str(tmp_path / "body.pb")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert got.returncode == 0, got.stderr[-3000:]
    result = json.loads(got.stdout.splitlines()[-1])
    assert result["received"] >= 3, result  # spooled and re-sent, sent, replayed: it all went out
    assert result["ours"] == [], result  # not one span of an export
    # the instrumentations were live: the user's own exporter call and POST are traced
    assert len(result["users"]) >= 2 and "POST" in result["users"], result
