"""An in-process OTLP/gRPC receiver (the opentelemetry-proto services on a real grpc server): records
``(signal, request)`` of every export, answers each with success (``abort``: with that status instead)."""

from __future__ import annotations

from concurrent import futures

from otel_verl import semconv


class GrpcReceiver:
    """OTLP/gRPC receiver on ``port`` (0: a free one, then ``port`` says which): records (signal,
    request) of every export; ``stop()`` or ``with`` ends it."""

    def __init__(self, port: int = 0) -> None:
        import grpc
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        self.requests: list[tuple[str, object]] = []
        self.abort: object = None  # a grpc.StatusCode to answer every request with, instead of OK
        self.attempts = 0  # requests, answered or aborted
        receiver = self

        def servicer(base: type, signal: str, response: type) -> object:
            class Servicer(base):  # type: ignore[misc, valid-type]
                def Export(self, request, context):  # noqa: N802 - gRPC's name
                    receiver.attempts += 1
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
        self.port = self._server.add_insecure_port(f"127.0.0.1:{port}")
        self._server.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

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

    def stop(self) -> None:
        self._server.stop(0)
