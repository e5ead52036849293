"""Where an OTLP exporter sends a signal, from the SDK's ``OTEL_EXPORTER_OTLP_*`` variables.

The one rule ``otel-verl replay`` (which sends) and ``otel-verl doctor`` (which probes) share, as
the OpenTelemetry SDK's OTLP exporters apply it:

* ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT`` is used as is;
* else ``OTEL_EXPORTER_OTLP_ENDPOINT`` (default ``http://localhost:4318`` for OTLP/HTTP,
  ``http://localhost:4317`` for OTLP/gRPC), to which OTLP/HTTP appends ``/v1/<signal>``;
* the protocol is ``OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL``,
  else ``grpc`` (what ``opentelemetry-exporter-otlp`` picks for the plain ``otlp`` exporter).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

HTTP_DEFAULT = "http://localhost:4318"
GRPC_DEFAULT = "http://localhost:4317"
GRPC_PORT = 4317
DEFAULT_PROTOCOL = "grpc"
HTTP = "http/protobuf"

ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"


def signal_variable(setting: str, signal: str) -> str:
    """The per-signal variable: ``("ENDPOINT", "traces")`` -> ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``."""
    return f"OTEL_EXPORTER_OTLP_{signal.upper()}_{setting}"


def is_http(protocol: str) -> bool:
    """``http/protobuf`` and ``http/json`` are OTLP/HTTP; anything else is gRPC."""
    return protocol.startswith("http")


def signal_protocol(signal: str, env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return env.get(signal_variable("PROTOCOL", signal)) or env.get(PROTOCOL) or DEFAULT_PROTOCOL


def signal_endpoint(
    signal: str, env: Mapping[str, str] | None = None, protocol: str = HTTP, base: str | None = None
) -> str:
    """The URL the exporter of ``signal`` (``traces``, ``metrics``, ``logs``) sends to.

    ``base`` (a ``--endpoint`` flag) replaces both variables: it is a base URL, as
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` is.
    """
    env = os.environ if env is None else env
    if not base:
        per_signal = env.get(signal_variable("ENDPOINT", signal), "").strip()
        if per_signal:
            return per_signal
        base = env.get(ENDPOINT, "").strip()
    if is_http(protocol):
        return (base or HTTP_DEFAULT).rstrip("/") + f"/v1/{signal}"
    return base or GRPC_DEFAULT
