"""An in-process OTLP/gRPC receiver (the opentelemetry-proto services on a real grpc server): records
``(signal, request)`` of every export, answers each with success (``abort``: with that status instead)."""

from __future__ import annotations

import base64
from concurrent import futures
from pathlib import Path
from typing import Any

from otel_verl import semconv


class GrpcReceiver:
    """OTLP/gRPC receiver on ``port`` (0: a free one, then ``port`` says which): records (signal,
    request) of every export, and the ``authorization`` it came with; ``stop()`` or ``with`` ends it.
    ``tls`` (certificate file, key file): TLS on ``bind``, as a vendor's or gateway's endpoint."""

    def __init__(self, port: int = 0, *, bind: str = "127.0.0.1", tls: tuple[Path, Path] | None = None) -> None:
        import grpc
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        self.requests: list[tuple[str, object]] = []
        self.abort: object = None  # a grpc.StatusCode to answer every request with, instead of OK
        self.attempts = 0  # requests, answered or aborted
        self.authorizations: set[str] = set()  # the authorization metadata seen
        self.bind = bind
        self.tls = tls is not None
        receiver = self

        def servicer(base: type, signal: str, response: type) -> object:
            class Servicer(base):  # type: ignore[misc, valid-type]
                def Export(self, request, context):  # noqa: N802 - gRPC's name
                    receiver.attempts += 1
                    receiver.authorizations.update(v for k, v in context.invocation_metadata() if k == "authorization")
                    if receiver.abort is not None:
                        context.abort(receiver.abort, "told to")
                    receiver.requests.append((signal, request))
                    return response()

            return Servicer()

        self._server = grpc.server(futures.ThreadPoolExecutor(4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(
            servicer(
                trace_service_pb2_grpc.TraceServiceServicer, "traces", trace_service_pb2.ExportTraceServiceResponse
            ),
            self._server,
        )
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(
            servicer(
                metrics_service_pb2_grpc.MetricsServiceServicer,
                "metrics",
                metrics_service_pb2.ExportMetricsServiceResponse,
            ),
            self._server,
        )
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(
            servicer(logs_service_pb2_grpc.LogsServiceServicer, "logs", logs_service_pb2.ExportLogsServiceResponse),
            self._server,
        )
        if tls is None:
            self.port = self._server.add_insecure_port(f"{bind}:{port}")
        else:
            creds = grpc.ssl_server_credentials([(Path(tls[1]).read_bytes(), Path(tls[0]).read_bytes())])
            self.port = self._server.add_secure_port(f"{bind}:{port}", creds)
        self._server.start()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.bind}:{self.port}"

    def __enter__(self) -> GrpcReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def span_ids(self) -> list[str]:
        return [
            s.span_id.hex()
            for sig, r in self.requests
            if sig == "traces"
            for rs in r.resource_spans
            for ss in rs.scope_spans
            for s in ss.spans
        ]

    def step_values(self) -> list[float]:
        return [
            p.as_double or p.as_int
            for sig, r in self.requests
            if sig == "metrics"
            for rm in r.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == semconv.M_TRAINING_STEP
            for p in m.gauge.data_points
        ]

    def decoded(self, signal: str) -> list[Any]:
        """What every request of ``signal`` held, as ``otel_verl.offline.otlp_files`` reads its files
        (SpanRecord, MetricPoint, LogEntry)."""
        from google.protobuf.json_format import MessageToDict

        from otel_verl.offline.otlp_files import decode

        out: list[Any] = []
        for sig, request in self.requests:
            if sig == signal:
                out += decode(signal, _hex_ids(MessageToDict(request)))  # type: ignore[arg-type]
        return out

    def stop(self) -> None:
        self._server.stop(0)


def _hex_ids(value: Any) -> Any:
    """Protobuf's JSON (ids in base64) as OTLP JSON has it (ids in hex)."""
    if isinstance(value, dict):
        return {
            k: base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") else _hex_ids(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value
