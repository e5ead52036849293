"""What a span export costs per export and per span, and what coalescing flush requests saves.

A process without step boundaries of its own (a reward-loop worker, a rollout server) asks for a
span flush whenever its last running call ends (``Telemetry.request_flush``): with trajectories
finishing one after another that is once per call. Each export has a fixed cost besides its spans
(OTLP/HTTP: a POST; gRPC: an RPC; file: a write), so one span per export is the worst case.

Two tables, measured side by side in one run:

1. per exporter (OTLP JSON file, OTLP/HTTP and OTLP/gRPC to receivers in child processes that
   accept everything): CPU per ``force_flush`` of 1, 8 and 32 spans, in the flushing thread and in
   the whole process (gRPC's native threads included);
2. a reward worker's step, replayed: ``CALLS`` scores ``SPACING_S`` apart, each ending with a
   flush request, through a real ``Telemetry`` with the ``SPAN_FLUSH_GAP_S`` rule against the
   same with the gap 0 (every request its own export, as before): exports per step and CPU of the
   whole process per step, alternating rounds, medians.

Each measurement runs in a fresh child process (an exporter's threads, gRPC's above all, outlive
its shutdown and would be counted in the next one).

Usage: ``python bench/span_flush.py [--steps 20] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from _util import machine, table

HTTP_PORT, GRPC_PORT = 14318, 14317
CALLS, SPACING_S = 8, 0.03  # 8 scores a step, 30 ms apart (the CPU harness: 8 within ~0.3 s)

_HTTP_SERVER = """
import http.server, socketserver
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a): pass
socketserver.ThreadingTCPServer.allow_reuse_address = True
s = socketserver.ThreadingTCPServer(("127.0.0.1", %d), H); s.daemon_threads = True; s.serve_forever()
"""
_GRPC_SERVER = """
from concurrent import futures
import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb, trace_service_pb2_grpc as g
class T(g.TraceServiceServicer):
    def Export(self, request, context): return pb.ExportTraceServiceResponse()
s = grpc.server(futures.ThreadPoolExecutor(4)); g.add_TraceServiceServicer_to_server(T(), s)
s.add_insecure_port("127.0.0.1:%d"); s.start(); s.wait_for_termination()
"""


def _exporters(folder: str) -> dict[str, Callable[[], Any]]:
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return {
        "OTLP JSON file": lambda: FileSpanExporter(path=os.path.join(folder, f"spans-{time.monotonic_ns()}.jsonl")),
        "OTLP/HTTP": lambda: HttpExporter(endpoint=f"http://127.0.0.1:{HTTP_PORT}/v1/traces"),
        "OTLP/gRPC": lambda: GrpcExporter(endpoint=f"127.0.0.1:{GRPC_PORT}", insecure=True),
    }


def _provider(exporter: Any) -> Any:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": "bench", "verl.process.role": "reward_worker"})
    tp = TracerProvider(resource=resource)
    tp.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60_000))
    return tp


def _span(tracer: Any, i: int) -> None:
    attrs = {"verl.step": i, "verl.rollout.submit_step": i, "verl.rollout.validate": False, "gen_ai.agent.name": "a"}
    tracer.start_span("verl.reward_worker.compute_score", attributes=attrs).end()


def per_export(make: Callable[[], Any], spans: int, flushes: int) -> tuple[float, float]:
    """(us CPU in the flushing thread, us CPU of the whole process) per force_flush of ``spans``."""
    tp = _provider(make())
    tracer = tp.get_tracer("bench")
    for i in range(5):  # connect, warm up
        _span(tracer, i)
        tp.force_flush()
    thread = proc = 0.0
    for i in range(flushes):
        for _ in range(spans):
            _span(tracer, i)
        t, p = time.thread_time(), time.process_time()
        tp.force_flush()
        thread += time.thread_time() - t
        proc += time.process_time() - p
    tp.shutdown()
    return thread / flushes * 1e6, proc / flushes * 1e6


def reward_steps(make: Callable[[], Any], gap_s: float, steps: int) -> tuple[float, float]:
    """(exports per step, ms CPU of the whole process per step) for replayed reward-worker steps."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from otel_verl.process import telemetry as tel_mod

    inner = make()
    exports = [0]

    class Counting(SpanExporter):
        def export(self, spans: Any) -> Any:
            exports[0] += 1
            return inner.export(spans)

        def shutdown(self) -> None:
            inner.shutdown()

    tp = _provider(Counting())
    saved, tel_mod.SPAN_FLUSH_GAP_S = tel_mod.SPAN_FLUSH_GAP_S, gap_s
    tel = tel_mod.Telemetry(tp, MeterProvider(), owned=True)
    tracer = tp.get_tracer("bench")
    try:
        _span(tracer, 0)
        tel.request_flush()
        time.sleep(0.3)
        exports[0] = 0
        start = time.process_time()
        for step in range(steps):
            for _ in range(CALLS):
                _span(tracer, step)
                tel.request_flush(coalesce=True)  # the call ended and the worker is idle (IdleExport)
                time.sleep(SPACING_S)
            time.sleep(0.5)  # the rest of the training step
        cpu = time.process_time() - start
    finally:
        tel_mod.SPAN_FLUSH_GAP_S = saved
        tel.shutdown(timeout_s=5)
    return exports[0] / steps, cpu / steps * 1e3


def _child(case: list[str]) -> Any:
    """Run one measurement in a fresh interpreter; returns what it printed (JSON)."""
    out = subprocess.run([sys.executable, __file__, "--case", *case], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _run_case(case: list[str]) -> None:
    kind, name = case[0], case[1]
    make = _exporters(tempfile.mkdtemp(prefix="bench_span_flush_"))[name]
    if kind == "export":
        print(json.dumps(per_export(make, int(case[2]), int(case[3]))))
    else:
        print(json.dumps(reward_steps(make, float(case[2]), int(case[3]))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--flushes", type=int, default=200)
    parser.add_argument("--case", nargs="+", help=argparse.SUPPRESS)  # one measurement (a child)
    ns = parser.parse_args(argv)
    if ns.case:
        _run_case(ns.case)
        return 0
    from otel_verl.process.telemetry import SPAN_FLUSH_GAP_S

    servers = [
        subprocess.Popen([sys.executable, "-c", _HTTP_SERVER % HTTP_PORT]),
        subprocess.Popen([sys.executable, "-c", _GRPC_SERVER % GRPC_PORT]),
    ]
    try:
        time.sleep(2.0)
        names = list(_exporters(tempfile.gettempdir()))
        rows = []
        for name in names:
            cells: list[object] = [name]
            for spans in (1, 8, 32):
                thread, proc = _child(["export", name, str(spans), str(ns.flushes)])
                cells.append(f"{thread:.0f} / {proc:.0f}")
            rows.append(cells)
        print(f"# bench/span_flush.py  ({machine()}; {ns.flushes} flushes per cell)")
        print("us CPU per span export (flushing thread / whole process):")
        print(table(["exporter", "1 span", "8 spans", "32 spans"], rows))
        print()
        rows = []
        for name in names:
            runs: dict[float, list[tuple[float, float]]] = {0.0: [], SPAN_FLUSH_GAP_S: []}
            for _ in range(ns.rounds):
                for gap in runs:
                    runs[gap].append(tuple(_child(["steps", name, str(gap), str(ns.steps)])))
            before = statistics.median(c for _, c in runs[0.0])
            after = statistics.median(c for _, c in runs[SPAN_FLUSH_GAP_S])
            rows.append(
                [
                    name,
                    f"{statistics.median(e for e, _ in runs[0.0]):.1f}",
                    f"{statistics.median(e for e, _ in runs[SPAN_FLUSH_GAP_S]):.1f}",
                    f"{before:.2f}",
                    f"{after:.2f}",
                    f"{after / before:.2f}x",
                ]
            )
        print(
            f"a reward worker's step replayed ({CALLS} calls {SPACING_S * 1000:.0f} ms apart, a flush request after"
            f" each; {ns.steps} steps x {ns.rounds} rounds, alternating, medians):"
        )
        header = [
            "exporter",
            "exports/step, gap 0",
            f"exports/step, gap {SPAN_FLUSH_GAP_S} s",
            "CPU ms/step, gap 0",
            f"CPU ms/step, gap {SPAN_FLUSH_GAP_S} s",
            "ratio",
        ]
        print(table(header, rows))
    finally:
        for server in servers:
            server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
