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

Each attempt ends:

* ``SENT``: accepted; the batch is removed.
* ``AWAY``: no answer (connection refused or reset, no route; gRPC ``UNAVAILABLE``): the endpoint
  is away; the batch stays.
* ``RETRY``: the endpoint answered, throttling or with a server error (HTTP 408, 429, 5xx; gRPC
  ``RESOURCE_EXHAUSTED``, ``INTERNAL``, ``UNKNOWN``, ...): the batch stays.
* ``LATE``: sent, and no answer came within the exporter's timeout (HTTP read timeout, gRPC
  ``DEADLINE_EXCEEDED``): the endpoint may have it; the batch stays, and such sends are counted
  (``spool.MAX_LATE``: the bound on copies).
* ``HOLD``: a configuration fault, not a verdict on the data (HTTP 401, 403, 404 and every other 4xx
  but 400, 408, 413, 429; gRPC ``UNAUTHENTICATED``, ``PERMISSION_DENIED``, ``NOT_FOUND``,
  ``UNIMPLEMENTED``, ...): the batch stays until the endpoint takes it.
* ``REJECTED``: the endpoint condemned this request itself (HTTP 400 "bad request", 413 "too
  large": a spooled request cannot be made smaller; gRPC ``INVALID_ARGUMENT``), or it is not a
  request of its signal at all (then nothing is sent): the batch is dropped, counted.

``destination`` is where a sender's batches go (``spool.Destination``): the exporter's kind, its
endpoint as it resolved it, and the headers it sends (HTTP: those of its client, ``OTEL_EXPORTER_
OTLP_*HEADERS`` and ``OTEL_VERL_OTLP_HEADERS_FILE`` included; gRPC: its metadata).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from google.protobuf.message import DecodeError, Message

from otel_verl import private_api
from otel_verl.spool.store import Destination

_log = logging.getLogger(__name__)

SENT = "sent"
AWAY = "away"
RETRY = "retry"
LATE = "late"
HOLD = "hold"
REJECTED = "rejected"

_SDK = ("opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http", "opentelemetry-exporter-otlp-proto-grpc")
HTTP_MODULE = "opentelemetry.exporter.otlp.proto.http"
GRPC_MODULE = "opentelemetry.exporter.otlp.proto.grpc"
_HTTP_REJECTED = frozenset({400, 413})  # answers that condemn the request itself
_HTTP_RETRY = frozenset({408, 429})  # 4xx answers that say "later"
# OTLP/gRPC codes, by name so that importing grpc waits for a gRPC exporter. The OTLP specification
# lists more codes as not to be retried; of those only INVALID_ARGUMENT says the data is at fault:
# the others (credentials, routing, a server's bug) are kept until the endpoint takes the batch.
_GRPC_REJECTED = frozenset({"INVALID_ARGUMENT"})
_GRPC_HOLD = frozenset(
    {"UNAUTHENTICATED", "PERMISSION_DENIED", "NOT_FOUND", "UNIMPLEMENTED", "FAILED_PRECONDITION", "ALREADY_EXISTS"}
)


def _credentials(headers: Iterable[tuple[str, Any]]) -> bytes:
    """Headers in one canonical form (names lower-cased, sorted): what a destination is keyed by."""
    return json.dumps(sorted((str(k).strip().lower(), str(v)) for k, v in headers)).encode()


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

    def destination(self) -> Destination: ...


def _read_timeout(error: object) -> bool:
    """Whether a transport error is a read timeout: the request went out, its answer did not come."""
    name = type(error).__name__
    return "ReadTimeout" in name or isinstance(error, TimeoutError)


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
        if code is None:
            return LATE if _read_timeout(result.error) else AWAY
        if code in _HTTP_REJECTED:
            return REJECTED
        if 400 <= code < 500 and code not in _HTTP_RETRY:
            return HOLD
        return RETRY

    def destination(self) -> Destination:
        e = self._exporter
        return Destination("http", str(e._endpoint), _credentials(dict(e._client._headers).items()))


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
            return AWAY
        try:
            client.Export(request=request, metadata=e._headers, timeout=e._timeout)
        except grpc.RpcError as error:
            code = error.code() if callable(getattr(error, "code", None)) else None
            name = getattr(code, "name", "")
            if name == "UNAVAILABLE":
                self._reconnect()
                return AWAY
            if name in _GRPC_REJECTED:
                return REJECTED
            if name in _GRPC_HOLD:
                return HOLD
            return LATE if name == "DEADLINE_EXCEEDED" else RETRY
        return SENT

    def destination(self) -> Destination:
        e = self._exporter
        scheme = "http" if e._insecure else "https"
        headers = e._headers.items() if isinstance(e._headers, dict) else (e._headers or ())
        return Destination("grpc", f"{scheme}://{e._endpoint}", _credentials(headers))

    def _reconnect(self) -> None:
        e = self._exporter
        try:
            if e._channel is not None:
                e._channel.close()
            e._initialize_channel_and_stub()
        except Exception:  # noqa: BLE001 - the next attempt tries again
            _log.debug("gRPC reconnect failed", exc_info=True)


_PRIVATE = {
    HttpSender: ("_client.export", "_client._headers", "_endpoint"),
    GrpcSender: (
        "_client",
        "_headers",
        "_timeout",
        "_channel",
        "_initialize_channel_and_stub",
        "_endpoint",
        "_insecure",
    ),
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
