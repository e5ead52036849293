"""What the on-disk spool costs (prints tables): nothing while the endpoint is healthy, CPU per MB in an outage.

1. **A healthy run writes nothing.** otel-verl's own pipeline (``build_own``: OTLP/HTTP to a live
   local receiver) sends ``--steps`` steps (a span batch, a 100-value metric collection and log
   records each), with the spool on and with it off; the table gives the bytes the process wrote
   to disk (``/proc/self/io`` ``write_bytes``) and what the spool folder holds afterwards.
2. **An outage: CPU per spooled MB.** Real batches (``--spans`` spans of 10 attributes; 100-gauge
   metric collections) go through the spool's write path as an export the endpoint refused does:
   encode to the OTLP request, write to a temporary file, fsync, rename, fsync the folder. Then the
   endpoint is back and each file is read and re-sent through the SDK exporter's own client
   (OTLP/HTTP and OTLP/gRPC to local receivers). CPU of the calling thread (``time.thread_time``)
   per MB of OTLP request, and wall per batch (fsync is waiting, not CPU); for scale, what a
   healthy export of the same batches costs the SDK exporter itself.

Usage: ``.venv/bin/python bench/spool_cost.py [--steps 200] [--spans 512] [--batches 40]``.
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

from _util import machine, table
from verl_cpu_harness.otlp_receiver import OtlpReceiver

MIB = 1024 * 1024


def _write_bytes() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("write_bytes:"))


def _folder_bytes(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()] if root.exists() else []
    return len(files), sum(p.stat().st_size for p in files)


def _env(endpoint: str, spool_dir: str, spool: bool) -> None:
    for k in list(os.environ):
        if k.startswith("OTEL_"):
            del os.environ[k]
    os.environ.update(
        {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_LOGS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_METRIC_EXPORT_INTERVAL": "600000",
            "OTEL_VERL_SPOOL_DIR": spool_dir,
            "OTEL_VERL_SPOOL": "true" if spool else "off",
            "OTEL_VERL_RUN_ID": "bench-spool",
        }
    )


def healthy(steps: int) -> list[list[object]]:
    from otel_verl import config, semconv
    from otel_verl.process.resource import Identity
    from otel_verl.process.telemetry import build_own
    from otel_verl.spool import store as spool

    rows = []
    with OtlpReceiver() as rx:
        for on in (True, False):
            folder = Path(tempfile.mkdtemp(prefix="bench-spool-"))
            _env(rx.url, str(folder / "spool"), on)
            config.settings.cache_clear()
            spool.reset()
            t = build_own(Identity(role=semconv.ROLE_TASKRUNNER))
            gauges = [t.meter.create_gauge(f"verl.bench.g{i}") for i in range(100)]
            logger = t.logger_provider.get_logger("bench")
            before = _write_bytes()
            for step in range(steps):
                with t.tracer.start_as_current_span(semconv.SPAN_STEP, attributes={semconv.ATTR_STEP: step}):
                    for _ in range(20):
                        with t.tracer.start_as_current_span("verl.gen"):
                            pass
                    logger.emit(body=f"step {step}")
                for g in gauges:
                    g.set(step)
                t.mark_step()
                t.request_flush()
            t.shutdown(10.0)
            written = _write_bytes() - before
            files, size = _folder_bytes(folder / "spool")
            rows.append(["on" if on else "off", steps, len(rx.requests), written, files, size])
            rx.requests.clear()
    return rows


def _span_batches(n_batches: int, spans: int) -> list[list]:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    tp = TracerProvider(resource=Resource.create({"service.name": "bench", "verl.run.id": "bench-spool"}))
    tp.add_span_processor(SimpleSpanProcessor(memory))
    tracer = tp.get_tracer("bench")
    for i in range(n_batches * spans):
        with tracer.start_as_current_span("verl.rollout.trajectory") as s:
            for k in range(10):
                s.set_attribute(f"verl.bench.attr{k}", f"value-{i}-{k}")
    done = list(memory.get_finished_spans())
    return [done[i * spans : (i + 1) * spans] for i in range(n_batches)]


def _metric_batches(n_batches: int) -> list:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("bench")
    gauges = [meter.create_gauge(f"verl.bench.g{i}") for i in range(100)]
    out = []
    for step in range(n_batches):
        for g in gauges:
            g.set(step, {"verl.step": step})
        out.append(reader.get_metrics_data())
    return out


def _cpu(fn: Callable[[], object]) -> tuple[float, float]:
    cpu, wall = time.thread_time(), time.perf_counter()
    fn()
    return time.thread_time() - cpu, time.perf_counter() - wall


def _grpc_receiver(port: int):
    import grpc
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    class T(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):  # noqa: N802
            return trace_service_pb2.ExportTraceServiceResponse()

    class M(metrics_service_pb2_grpc.MetricsServiceServicer):
        def Export(self, request, context):  # noqa: N802
            return metrics_service_pb2.ExportMetricsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(T(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(M(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server


def outage(n_batches: int, spans: int) -> list[list[object]]:
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

    from otel_verl.spool import exporters as spool_export
    from otel_verl.spool import resend as spool_send
    from otel_verl.spool import store as spool

    data = {"traces": _span_batches(n_batches, spans), "metrics": _metric_batches(n_batches)}
    rows = []
    for signal, batches in data.items():
        encode = spool_export._encoder(signal)
        root = Path(tempfile.mkdtemp(prefix="bench-spool-")) / "spool"
        store = spool.Spool(str(root), 4096 * MIB)
        bodies = [encode(b) for b in batches]  # warm-up, and the sizes
        mib = sum(map(len, bodies)) / MIB
        enc_cpu, enc_wall = _cpu(lambda batches=batches, encode=encode: [encode(b) for b in batches])
        put_cpu, put_wall = _cpu(
            lambda batches=batches, encode=encode, store=store, signal=signal: [
                store.put(signal, signal, encode(b)) for b in batches
            ]
        )
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        for protocol in ("http", "grpc"):
            if protocol == "http":
                rx = OtlpReceiver(port=port).__enter__()
                cls = HttpSpans if signal == "traces" else HttpMetrics
                exporter = cls(endpoint=f"http://127.0.0.1:{port}/v1/{signal}")
            else:
                rx = _grpc_receiver(port)
                cls = GrpcSpans if signal == "traces" else GrpcMetrics
                exporter = cls(endpoint=f"127.0.0.1:{port}", insecure=True)
            sender = spool_send.sender_for(exporter, signal)
            entries = []

            def resend(store=store, signal=signal, sender=sender, entries=entries) -> None:
                while (entry := store.head(signal, signal)) is not None:
                    body = store.read(entry)
                    assert sender.send(body) == spool_send.SENT
                    entries.append(entry)
                    store.done(entry, "resent", len(body))

            if protocol == "grpc":  # the same files again
                for body in bodies:
                    store.put(signal, signal, body)
            re_cpu, re_wall = _cpu(resend)
            sdk_cpu, sdk_wall = _cpu(lambda exporter=exporter, batches=batches: [exporter.export(b) for b in batches])
            exporter.shutdown()
            if protocol == "http":
                rx.__exit__()
            else:
                rx.stop(0)
            rows.append(
                [
                    signal,
                    protocol,
                    len(batches),
                    f"{mib:.2f}",
                    f"{1000 * enc_cpu / mib:.0f}",
                    f"{1000 * (put_cpu - enc_cpu) / mib:.0f}",
                    f"{1000 * put_wall / len(batches):.1f}",
                    f"{1000 * re_cpu / mib:.0f}",
                    f"{1000 * sdk_cpu / mib:.0f}",
                ]
            )
        store.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--spans", type=int, default=512)
    parser.add_argument("--batches", type=int, default=40)
    ns = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"# bench/spool_cost.py  ({machine()}; load average {load:.1f})")
    print("\n1. healthy endpoint (OTLP/HTTP, local receiver): what the process wrote to disk")
    print(table(["spool", "steps", "requests", "write_bytes", "spool files", "spool bytes"], healthy(ns.steps)))
    print(f"\n2. outage: the spool's write path and the re-send, per MB of OTLP request ({ns.spans} spans per batch)")
    header = [
        "signal",
        "re-sent over",
        "batches",
        "MB",
        "encode CPU ms/MB",
        "write+fsync CPU ms/MB",
        "spool wall ms/batch",
        "re-send CPU ms/MB",
        "SDK export CPU ms/MB",
    ]
    print(table(header, outage(ns.batches, ns.spans)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
