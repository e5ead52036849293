"""A minimal OTLP/HTTP receiver for tests and benchmarks: records every POST (path, lower-cased headers,
body as OTLP JSON).

Bodies in OTLP/HTTP's protobuf encoding (what the SDK's exporters send) are decoded with the
opentelemetry-proto messages into the OTLP JSON shape (hex ids), so both encodings read alike."""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(node: Any) -> Any:
    # protobuf's JSON mapping writes bytes as base64; OTLP JSON writes trace and span ids as hex
    if isinstance(node, dict):
        return {
            k: base64.b64decode(v).hex() if k in _ID_KEYS and isinstance(v, str) else _hex_ids(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    return node


def _decode(path: str, headers: Any, body: bytes) -> Any:
    if "protobuf" not in (headers.get("Content-Type") or ""):
        return json.loads(body)
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    cls = {"/v1/traces": ExportTraceServiceRequest, "/v1/metrics": ExportMetricsServiceRequest}.get(
        path, ExportLogsServiceRequest
    )
    message = cls()
    message.ParseFromString(body)
    return _hex_ids(MessageToDict(message))


class OtlpReceiver:
    """``with OtlpReceiver() as rx: ... rx.url`` - answers 200 ``{}`` unless told otherwise.

    ``status``: HTTP status to answer; ``answer``: JSON body to answer (e.g. a partialSuccess);
    ``delay``: seconds to wait before answering; ``fail_first``: answer 503 to the first N requests;
    ``max_body``: answer 413 to a body above this many bytes, as a Collector does above its
    ``max_request_body_size`` (``sizes`` records every body's length); ``port``: listen there
    (default: a free one), e.g. where a refused endpoint was.
    """

    def __init__(
        self,
        status: int = 200,
        answer: dict | None = None,
        delay: float = 0.0,
        fail_first: int = 0,
        max_body: int | None = None,
        port: int = 0,
    ):
        self.status = status
        self.max_body = max_body
        self.sizes: list[int] = []
        self.answer = answer or {}
        self.delay = delay
        self.fail_first = fail_first
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                too_big = receiver.max_body is not None and len(body) > receiver.max_body
                with receiver._lock:
                    receiver.sizes.append(len(body))
                    if not too_big:
                        receiver.requests.append(
                            (
                                self.path,
                                {k.lower(): v for k, v in self.headers.items()},
                                _decode(self.path, self.headers, body),
                            )
                        )
                    n = len(receiver.requests)
                if receiver.delay:
                    time.sleep(receiver.delay)
                status = 413 if too_big else 503 if n <= receiver.fail_first else receiver.status
                payload = json.dumps(receiver.answer if status == 200 else {"message": "nope"}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client gave up (timeout test)
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def bodies(self, path: str | None = None) -> list[Any]:
        return [body for p, _, body in self.requests if path is None or p == path]

    def span_ids(self) -> list[str]:
        return [
            s["spanId"]
            for body in self.bodies()
            for rs in body.get("resourceSpans", [])
            for ss in rs.get("scopeSpans", [])
            for s in ss.get("spans", [])
        ]

    def metric_points(self) -> int:
        return sum(
            len(m[k]["dataPoints"])
            for body in self.bodies()
            for rm in body.get("resourceMetrics", [])
            for sm in rm.get("scopeMetrics", [])
            for m in sm.get("metrics", [])
            for k in ("gauge", "sum", "histogram")
            if k in m
        )

    def log_records(self) -> int:
        return sum(
            len(sl.get("logRecords", []))
            for body in self.bodies()
            for rl in body.get("resourceLogs", [])
            for sl in rl.get("scopeLogs", [])
        )
