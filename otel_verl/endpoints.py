"""Where an OTLP exporter sends a signal, from the SDK's ``OTEL_EXPORTER_OTLP_*`` variables.

The one rule ``otel-verl replay`` (which sends) and ``otel-verl doctor`` (which probes) share, as
the OpenTelemetry SDK's OTLP exporters apply it:

* ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT`` is used as is;
* else ``OTEL_EXPORTER_OTLP_ENDPOINT`` (default ``http://localhost:4318`` for OTLP/HTTP,
  ``http://localhost:4317`` for OTLP/gRPC), to which OTLP/HTTP appends ``/v1/<signal>``;
* the protocol is ``OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL``,
  else ``grpc`` (what ``opentelemetry-exporter-otlp`` picks for the plain ``otlp`` exporter).

``url_problem`` says why a URL cannot be an endpoint (``not a url`` is not a host name to look up).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from otel_verl import redact

HTTP_DEFAULT = "http://localhost:4318"
GRPC_DEFAULT = "http://localhost:4317"
GRPC_PORT = 4317
DEFAULT_PROTOCOL = "grpc"
HTTP = "http/protobuf"
PROTOCOLS = ("grpc", "http/protobuf", "http/json")

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


@dataclass(frozen=True)
class Endpoint:
    """Where one signal goes: the URL, and what set it (a variable, ``--endpoint`` or ``default``)."""

    url: str
    source: str
    raw: str  # the value as given (the base URL before ``/v1/<signal>``)

    def problem(self, protocol: str) -> str | None:
        """``None``, or one line saying that this endpoint is not a URL and where it came from."""
        why = url_problem(self.url, protocol)
        if why is None:
            return None
        return f"{self.source}={shown(self.raw)!r} is not a valid URL ({why})"


def resolve(
    signal: str, env: Mapping[str, str] | None = None, protocol: str = HTTP, base: str | None = None
) -> Endpoint:
    """The endpoint the exporter of ``signal`` (``traces``, ``metrics``, ``logs``) sends to.

    ``base`` (a ``--endpoint`` flag) replaces both variables: it is a base URL, as
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` is.
    """
    env = os.environ if env is None else env
    if base:
        source = "--endpoint"
    else:
        variable = signal_variable("ENDPOINT", signal)
        per_signal = env.get(variable, "").strip()
        if per_signal:
            return Endpoint(per_signal, variable, per_signal)
        base, source = env.get(ENDPOINT, "").strip(), ENDPOINT
        if not base:
            source = "default"
    raw = base or (HTTP_DEFAULT if is_http(protocol) else GRPC_DEFAULT)
    url = raw.rstrip("/") + f"/v1/{signal}" if is_http(protocol) else raw
    return Endpoint(url, source, raw)


def signal_endpoint(
    signal: str, env: Mapping[str, str] | None = None, protocol: str = HTTP, base: str | None = None
) -> str:
    """The URL of ``resolve``."""
    return resolve(signal, env, protocol, base).url


def protocol_problem(signal: str, env: Mapping[str, str] | None = None) -> str | None:
    """``None``, or why the protocol variable for ``signal`` names no OTLP protocol."""
    env = os.environ if env is None else env
    for variable in (signal_variable("PROTOCOL", signal), PROTOCOL):
        value = env.get(variable)
        if value:
            return None if value in PROTOCOLS else f"{variable}={value!r} is not one of {', '.join(PROTOCOLS)}"
    return None


def shown(url: str) -> str:
    """``url`` as printed: credentials in it (``user:pass@``, a query) are replaced."""
    try:
        parts = urlsplit(url if "://" in url else f"//{url}")
    except ValueError:  # e.g. an unclosed IPv6 bracket: hide what could be credentials
        return f"{redact.REDACTED}@{url.rsplit('@', 1)[1]}" if "@" in url else url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{redact.REDACTED}@{netloc.rsplit('@', 1)[1]}"
    query = redact.REDACTED if parts.query else ""
    printed = parts._replace(netloc=netloc, query=query).geturl()
    return printed if "://" in url else printed.removeprefix("//")


def url_problem(url: str, protocol: str = HTTP) -> str | None:
    """Why ``url`` cannot be an OTLP endpoint, or None. OTLP/HTTP needs ``http(s)://host[:port]``;
    gRPC also takes a bare ``host:port``, as its exporter does."""
    if not url or any(c.isspace() for c in url):
        return "it contains a space" if url else "it is empty"
    has_scheme = "://" in url
    if is_http(protocol) and not has_scheme:
        return "OTLP/HTTP needs http:// or https://"
    try:
        parts = urlsplit(url if has_scheme else f"//{url}")
    except ValueError as exc:
        return str(exc)
    if has_scheme and parts.scheme not in ("http", "https"):
        return f"the scheme is {parts.scheme!r}, not http or https"
    if not parts.hostname:
        return "it has no host"
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0..65535
    except ValueError:
        return "its port is not a number from 0 to 65535"
    return None
