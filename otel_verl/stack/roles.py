"""The role of the stack's Collector and how other nodes reach it (``CollectorSetup``, the options
of ``up``), and the checks of those options before anything starts (``check_setup``): an address
other nodes reach only with TLS and a bearer token, an agent only with its gateways
(``gateway_resolver``: a static list or a DNS name), files that must exist."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from otel_verl.exits import USAGE, CommandError
from otel_verl.stack.ports import HOST

START_ORDER = ("prometheus", "alertmanager", "jaeger", "victoria-logs", "otelcol")


ROLES = ("all-in-one", "gateway", "agent")


DNS_INTERVAL = "5s"  # how often an agent resolves a dns: gateway name again (the exporter's default)


_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*\.?")


def role_components(role: str) -> tuple[str, ...]:
    """The components a stack of ``role`` runs, in start order."""
    return START_ORDER if role == "all-in-one" else ("otelcol",)


@dataclass(frozen=True)
class CollectorSetup:
    """The role of the stack's Collector and how other nodes reach it (the options of ``up``)."""

    role: str = "all-in-one"
    bind: str = HOST  # the OTLP receivers' address
    tls_cert: Path | None = None
    tls_key: Path | None = None
    token_file: Path | None = None
    gateways: str | None = None  # agent: "HOST:PORT[,HOST:PORT]" or "dns:NAME:PORT"
    gateway_ca: Path | None = None  # agent: CA of the gateways' certificates (None: the system's)
    extra_configs: tuple[Path, ...] = ()

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return len(host) <= 253 and bool(_HOSTNAME.fullmatch(host))
    return True


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _is_ipv6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).version == 6
    except ValueError:
        return False


def _host_port(item: str, what: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for an IPv6 address) of ``--gateway``; CommandError(USAGE) otherwise."""
    host, sep, port = item.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not _valid_host(host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise CommandError(f"{what} {item!r}: expected HOST:PORT", USAGE)
    return host, int(port)


def gateway_resolver(spec: str) -> dict:
    """The load_balancing exporter's ``resolver`` for ``--gateway``: a static list of
    ``HOST:PORT`` (comma-separated), or ``dns:NAME:PORT`` (every address NAME resolves to, looked
    up again every ``DNS_INTERVAL``: a gateway that leaves the name loses its share)."""
    if spec.startswith("dns:"):
        host, port = _host_port(spec[len("dns:") :], "--gateway dns:")
        return {"dns": {"hostname": host, "port": str(port), "interval": DNS_INTERVAL}}
    items = [item for item in spec.split(",") if item.strip()]
    if not items:
        raise CommandError("--gateway: no HOST:PORT given", USAGE)
    hosts = []
    for item in items:
        host, port = _host_port(item, "--gateway")
        hosts.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return {"static": {"hostnames": hosts}}


def _readable_file(path: Path | None, option: str) -> None:
    if path is not None and not path.is_file():
        raise CommandError(f"{option} {path}: no such file", USAGE)


def check_setup(setup: CollectorSetup) -> None:
    """CommandError(USAGE) naming the first option that does not fit the role."""
    if setup.role not in ROLES:
        raise CommandError(f"--role {setup.role!r}: one of {', '.join(ROLES)}", USAGE)
    if (setup.tls_cert is None) != (setup.tls_key is None):
        raise CommandError("--tls-cert and --tls-key go together", USAGE)
    if setup.tls and setup.token_file is None:
        raise CommandError("--tls-cert needs --token-file: with TLS, the receivers take only the bearer token", USAGE)
    if not _valid_host(setup.bind):
        raise CommandError(f"--bind {setup.bind!r}: not an address or host name", USAGE)
    if _is_ipv6(setup.bind) and _is_loopback(setup.bind) and not setup.tls:
        raise CommandError(
            f"--bind {setup.bind}: an IPv6 address is taken with --tls-cert, --tls-key and --token-file only "
            "(then the OTLP receivers alone listen there); without TLS use 127.0.0.1 or localhost",
            USAGE,
        )
    if not setup.tls and not _is_loopback(setup.bind):
        raise CommandError(
            f"--bind {setup.bind} needs --tls-cert, --tls-key and --token-file: a Collector that other nodes "
            "reach takes OTLP only over TLS with a bearer token",
            USAGE,
        )
    if setup.role == "gateway" and not setup.tls:
        raise CommandError("--role gateway needs --tls-cert, --tls-key and --token-file (the agents use them)", USAGE)
    if setup.role == "agent":
        if not setup.gateways:
            raise CommandError("--role agent needs --gateway HOST:PORT[,HOST:PORT] or --gateway dns:NAME:PORT", USAGE)
        gateway_resolver(setup.gateways)
        if setup.token_file is None:
            raise CommandError("--role agent needs --token-file: the gateways' bearer token", USAGE)
    elif setup.gateways or setup.gateway_ca:
        raise CommandError("--gateway and --gateway-ca are options of --role agent", USAGE)
    for path, option in (
        (setup.tls_cert, "--tls-cert"),
        (setup.tls_key, "--tls-key"),
        (setup.token_file, "--token-file"),
        (setup.gateway_ca, "--gateway-ca"),
        *((p, "--collector-config") for p in setup.extra_configs),
    ):
        _readable_file(path, option)
