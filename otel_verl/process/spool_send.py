"""Re-sending a spooled OTLP request through the exporter that could not send it.

A spooled batch is the ``Export*ServiceRequest`` as the exporter would have sent it; it goes out
again through that exporter's own client, so endpoint, TLS, headers, compression and timeout are
exactly the user's settings. The SDK's OTLP exporters have no public call that sends an encoded
request, so each sender reaches into one private client (``otel_verl.private_api``, said once with
the SDK's version when it is gone: that exporter then gets no spool and behaves as without it):

* OTLP/HTTP: ``exporter._client.export(body)``, the SDK's transport with its own retries within
  the exporter's timeout;
* OTLP/gRPC: ``exporter._client.Export(request, metadata=exporter._headers, timeout=exporter._timeout)``,
  one attempt; an ``UNAVAILABLE`` answer reconnects the channel (``_initialize_channel_and_stub``,
  as the SDK's own retry does), so a Collector that is back is used at once rather than after
  gRPC's reconnect backoff (up to 2 minutes).

Each attempt ends ``SENT``; ``RETRY`` (no answer, a throttling or server error: the batch stays);
or ``REJECTED`` (the endpoint refused this request for good: HTTP 4xx but 408/429, gRPC
``INVALID_ARGUMENT`` and the other codes the OTLP specification says not to retry). A request of
the wrong shape for its signal is ``REJECTED`` before anything is sent.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from google.protobuf.message import DecodeError, Message

from otel_verl import private_api

_log = logging.getLogger(__name__)

SENT = "sent"
RETRY = "retry"
REJECTED = "rejected"

_SDK = ("opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http", "opentelemetry-exporter-otlp-proto-grpc")
HTTP_MODULE = "opentelemetry.exporter.otlp.proto.http"
GRPC_MODULE = "opentelemetry.exporter.otlp.proto.grpc"
_HTTP_RETRY = frozenset({408, 429})  # 4xx answers that say "later", not "never"
# OTLP/gRPC: the codes after which a client must not retry (opentelemetry-proto's
# specification, "OTLP/gRPC Response"), by name so that importing grpc waits for a gRPC exporter.
_GRPC_PERMANENT = frozenset(
    {
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "FAILED_PRECONDITION",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAUTHENTICATED",
    }
)


def request_types() -> dict[str, type[Message]]:
    """signal -> the OTLP request message its spooled batches are."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    return {
        "traces": ExportTraceServiceRequest,
        "metrics": ExportMetricsServiceRequest,
        "logs": ExportLogsServiceRequest,
    }


def parse(signal: str, body: bytes) -> Message | None:
    """``body`` as its signal's request, or None when it is not one."""
    try:
        return request_types()[signal].FromString(body)
    except (DecodeError, RuntimeWarning, ValueError):
        return None


class Sender(Protocol):
    def send(self, body: bytes) -> str: ...


class HttpSender:
    """Through an OTLP/HTTP exporter's client (private: ``_client``)."""

    def __init__(self, exporter: Any, signal: str) -> None:
        self._exporter = exporter
        self._signal = signal

    def send(self, body: bytes) -> str:
        if parse(self._signal, body) is None:
            return REJECTED
        result = self._exporter._client.export(body)
        if result.success:
            return SENT
        code = result.status_code
        if code is not None and 400 <= code < 500 and code not in _HTTP_RETRY:
            return REJECTED
        return RETRY


class GrpcSender:
    """Through an OTLP/gRPC exporter's stub (private: ``_client``, ``_headers``, ``_timeout``,
    ``_initialize_channel_and_stub``, ``_channel``)."""

    def __init__(self, exporter: Any, signal: str) -> None:
        self._exporter = exporter
        self._signal = signal

    def send(self, body: bytes) -> str:
        import grpc

        request = parse(self._signal, body)
        if request is None:
            return REJECTED
        e = self._exporter
        client = e._client
        if client is None:
            return RETRY
        try:
            client.Export(request=request, metadata=e._headers, timeout=e._timeout)
        except grpc.RpcError as error:
            code = error.code() if callable(getattr(error, "code", None)) else None
            name = getattr(code, "name", "")
            if name == "UNAVAILABLE":
                self._reconnect()
            return REJECTED if name in _GRPC_PERMANENT else RETRY
        return SENT

    def _reconnect(self) -> None:
        e = self._exporter
        try:
            if e._channel is not None:
                e._channel.close()
            e._initialize_channel_and_stub()
        except Exception:  # noqa: BLE001 - the next attempt tries again
            _log.debug("gRPC reconnect failed", exc_info=True)


_PRIVATE = {
    HttpSender: ("_client.export",),
    GrpcSender: ("_client", "_headers", "_timeout", "_channel", "_initialize_channel_and_stub"),
}


def sender_for(exporter: Any, signal: str) -> Sender | None:
    """How ``exporter`` re-sends a spooled batch, or None: not an OTLP exporter of the SDK (whose
    failures the spool does not take), or one whose private client is gone (said once)."""
    module = type(exporter).__module__
    if module.startswith(HTTP_MODULE):
        cls: type = HttpSender
    elif module.startswith(GRPC_MODULE):
        cls = GrpcSender
    else:
        return None
    missing = object()
    for path in _PRIVATE[cls]:
        found = private_api.attribute(
            exporter,
            path,
            name=f"{type(exporter).__name__}.{path}",
            dists=_SDK,
            effect=f"no on-disk spool for {signal}: a batch the endpoint does not take is lost as without otel-verl",
            default=missing,
        )
        if found is missing:
            return None
    return cls(exporter, signal)
