"""The stack's ports: their names for ``--port NAME=PORT``, the defaults, and the one address
(``HOST``) every component but the Collector's OTLP receivers listens on."""

from __future__ import annotations

from otel_verl.exits import USAGE, CommandError

HOST = "127.0.0.1"


# Port names for --port NAME=PORT, with the defaults (the compose ports where compose has them).
DEFAULT_PORTS: dict[str, int] = {
    "otlp-grpc": 4317,  # Collector OTLP gRPC: what the training processes send to
    "otlp-http": 4318,  # Collector OTLP HTTP
    "otelcol-health": 13133,
    "otelcol-metrics": 8888,  # Collector self-metrics, scraped by Prometheus
    "prometheus": 9090,
    "alertmanager": 9093,
    "jaeger": 16686,  # Jaeger query API and UI
    "jaeger-grpc": 16685,  # Jaeger query gRPC
    "jaeger-otlp-grpc": 14317,  # Jaeger's own OTLP receiver (the Collector exports to it)
    "jaeger-otlp-http": 14318,
    "jaeger-health": 13134,
    "victorialogs": 9428,  # VictoriaLogs HTTP: OTLP ingest, LogsQL queries, /health
}


COLLECTOR_PORTS = ("otlp-grpc", "otlp-http", "otelcol-health", "otelcol-metrics")


def parse_ports(items: list[str] | None) -> dict[str, int]:
    """``["prometheus=19090", ...]`` over the defaults; raises CommandError(USAGE) on a bad item."""
    ports = dict(DEFAULT_PORTS)
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or name not in DEFAULT_PORTS or not value.isdigit() or not 0 < int(value) < 65536:
            raise CommandError(
                f"--port {item!r}: expected NAME=PORT with NAME one of {', '.join(DEFAULT_PORTS)}", USAGE
            )
        ports[name] = int(value)
    taken: dict[int, str] = {}
    for name, port in ports.items():
        if port in taken:
            raise CommandError(f"--port: {name} and {taken[port]} both use port {port}", USAGE)
        taken[port] = name
    return ports
