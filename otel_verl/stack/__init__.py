"""``otel-verl stack up|down|status|configs|build``: the ops kit's stack without Docker, on one host or several.

Three roles (``--role``):

* ``all-in-one`` (the default): the OpenTelemetry Collector, Prometheus 3, Alertmanager, Jaeger v2
  (traces) and VictoriaLogs (logs) as local processes bound to 127.0.0.1, with the configs of the
  ops kit (the ones compose mounts), every data folder under one ``--data-dir``;
* ``agent``: the Collector of one node of a multi-node job alone (``otelcol-agent.yaml``): the
  node's training processes send to it on localhost, it forwards to the gateways of
  ``--gateway`` (a static list, or ``dns:NAME:PORT`` for every address of a name) with the
  load_balancing exporter, over TLS with a bearer token (``--token-file``, ``--gateway-ca``);
* ``gateway``: a Collector of the gateway tier alone (``otelcol-config.yaml``: the all-in-one
  routing), taking OTLP from the agents on ``--bind`` over TLS with the bearer token
  (``otelcol-remote.yaml``) and exporting to the backends of an all-in-one stack on this host (its
  ``--port`` numbers), or to the ``OTELCOL_{METRICS,TRACES,LOGS}_ENDPOINT`` of the environment.

``--bind`` other than loopback needs ``--tls-cert``, ``--tls-key`` and ``--token-file``: a
Collector that other nodes reach takes OTLP only over TLS with the token. Health check and
self-metrics stay on 127.0.0.1. An IPv6 address (``--bind fd00::5``, ``::1``) is taken with TLS
only: the OTLP receivers alone listen there (``[fd00::5]:4317`` in the Collector's config); without
TLS every Collector port shares ``--bind``, and the self-metrics reader and Prometheus's scrape of it
take an IPv4 address or a name, so ``--bind`` is then refused unless it is IPv4 or a host name.
``--collector-config FILE`` adds config files merged after the role's (``otelcol-debug.yaml``: a line per span).

The kit is ``collector/`` and ``scripts/backends.sh`` of a clone; the wheel carries the same files
as ``otel_verl/_ops_kit/`` (``pyproject.toml``'s force-include), so an installed otel-verl needs no
clone: ``configs DIR`` writes the configs out for a Collector/Prometheus/Grafana of the user's own,
``build`` runs the script that builds the five binaries from their Go modules. The Collector config
takes its addresses from the environment (``${env:OTELCOL_...:-compose default}``); Prometheus and
Alertmanager have no such substitution, so ``up`` writes a copy of theirs with the local addresses
into the data folder. Binaries come from ``--bin-dir``, ``PATH``, then the folder
``scripts/backends.sh`` builds into; the official release binaries of each project work as well.

``up`` returns once every component answers its readiness endpoint (asked directly, never through
a proxy of ``$http_proxy``: ``_answers``); ``down`` stops what ``up``
started (the pids it recorded, checked against their command line); ``status`` tells which parts
answer. State lives in ``DATA_DIR/stack.json``; one data folder per stack (an agent, a gateway and
an all-in-one stack on one host each need their own, and their own ``--port`` numbers).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from otel_verl.exits import OK, PROBLEM, USAGE, CommandError

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

START_ORDER = ("prometheus", "alertmanager", "jaeger", "victoria-logs", "otelcol")
ROLES = ("all-in-one", "gateway", "agent")
# The base config of each role's Collector; otelcol-remote.yaml goes on top with TLS.
ROLE_CONFIG = {"all-in-one": "otelcol-config.yaml", "gateway": "otelcol-config.yaml", "agent": "otelcol-agent.yaml"}
REMOTE_OVERLAY = "otelcol-remote.yaml"
COLLECTOR_PORTS = ("otlp-grpc", "otlp-http", "otelcol-health", "otelcol-metrics")
DNS_INTERVAL = "5s"  # how often an agent resolves a dns: gateway name again (the exporter's default)
_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*\.?")
# The names each project's own build or release uses; the first one found wins.
BINARY_NAMES: dict[str, tuple[str, ...]] = {
    "otelcol": ("otelcol-verl", "otelcol-contrib"),
    "prometheus": ("prometheus",),
    "alertmanager": ("alertmanager",),
    "jaeger": ("jaeger",),
    "victoria-logs": ("victoria-logs", "victoria-logs-prod"),
}
STATE_FILE = "stack.json"
STOP_GRACE_S = 15.0


def default_data_dir() -> Path:
    return Path(os.environ.get("OTEL_VERL_STACK_DIR") or Path.home() / ".local" / "share" / "otel-verl" / "stack")


def default_backends_dir() -> Path:
    """Where scripts/backends.sh builds (same default as the script)."""
    return Path(os.environ.get("OTEL_VERL_BACKENDS_DIR") or Path.home() / ".cache" / "otel-verl" / "backends")


@dataclass(frozen=True)
class Kit:
    """Where the ops kit's files are: the configs folder and the script that builds the backends."""

    configs: Path  # collector/
    backends_script: Path  # scripts/backends.sh (it reads ../collector/ next to it)


def ops_kit() -> Kit | None:
    """The ops kit installed with this otel-verl (``otel_verl/_ops_kit``, from a wheel), else the one
    of the clone it runs from (``collector/``, ``scripts/``: an editable install); None without either."""
    package = Path(__file__).resolve().parents[1]
    for root in (package / "_ops_kit", package.parent):
        kit = Kit(root / "collector", root / "scripts" / "backends.sh")
        if (kit.configs / "otelcol-config.yaml").is_file():
            return kit
    return None


def default_config_dir() -> Path | None:
    """``OTEL_VERL_COLLECTOR_DIR``, else the installed ops kit's configs (``ops_kit``)."""
    env = os.environ.get("OTEL_VERL_COLLECTOR_DIR")
    if env:
        return Path(env)
    kit = ops_kit()
    return kit.configs if kit else None


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


def _url_host(host: str) -> str:
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


@dataclass
class Component:
    name: str
    argv: list[str]
    env: dict[str, str]
    ready_url: str
    url: str  # what a user opens or points a client at
    ports: tuple[str, ...]


# ---------------------------------------------------------------------------------------------
# Finding binaries


def _prometheus_major(binary: str) -> int | None:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"version (\d+)\.", out.stdout + out.stderr)
    return int(m.group(1)) if m else None


def find_binaries(bin_dir: Path | None, components: tuple[str, ...] = START_ORDER) -> dict[str, str]:
    """Path of each of ``components``' binary; CommandError naming every missing one."""
    dirs = ([bin_dir] if bin_dir else []) + [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    dirs.append(default_backends_dir())
    dirs = list(dict.fromkeys(d.resolve() for d in dirs))  # /bin and /usr/bin are one folder on Debian
    found: dict[str, str] = {}
    notes: list[str] = []
    for comp, names in BINARY_NAMES.items():
        if comp not in components:
            continue
        for d in dirs:
            for name in names:
                cand = d / name
                if not (cand.is_file() and os.access(cand, os.X_OK)):
                    continue
                # Debian's `prometheus` package is 2.x: it has no OTLP receiver and rejects the
                # config's otlp: block, so look further instead of failing at start.
                if comp == "prometheus" and (major := _prometheus_major(str(cand))) != 3:
                    notes.append(f"{cand} is Prometheus {major if major is not None else '?'}.x, 3.x is needed")
                    continue
                found[comp] = str(cand)
                break
            if comp in found:
                break
    missing = [c for c in BINARY_NAMES if c in components and c not in found]
    if missing:
        wanted = "; ".join(f"{c} (as {' or '.join(BINARY_NAMES[c])})" for c in missing)
        where = f"{bin_dir}, PATH or {default_backends_dir()}" if bin_dir else f"PATH or {default_backends_dir()}"
        extra = f" ({'; '.join(notes)})" if notes else ""
        raise CommandError(
            f"missing binaries: {wanted}, looked in {where}{extra}; build them with `otel-verl stack build` "
            f"(Go >= 1.26.8; into {default_backends_dir()}), or put each project's release binary "
            "(Collector contrib, Prometheus 3, Alertmanager, Jaeger 2, VictoriaLogs) in --bin-dir or on PATH"
        )
    return found


# ---------------------------------------------------------------------------------------------
# Configs


def _prometheus_config(config_dir: Path, ports: dict[str, int]) -> str:
    """collector/prometheus/prometheus.yml with the stack's addresses in place of compose's."""
    cfg = yaml.safe_load((config_dir / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"))
    rules_dir = config_dir / "prometheus"
    cfg["rule_files"] = [str(rules_dir / pattern) for pattern in cfg.get("rule_files") or []]
    cfg["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [f"{HOST}:{ports['alertmanager']}"]}]}]}
    # compose service -> the local address; jobs of backends not in this stack (tempo, loki) go.
    local = {
        "prometheus": f"{HOST}:{ports['prometheus']}",
        "otelcol": f"{HOST}:{ports['otelcol-metrics']}",
        "alertmanager": f"{HOST}:{ports['alertmanager']}",
    }
    jobs = [
        {**job, "static_configs": [{"targets": [local[job["job_name"]]]}]}
        for job in cfg.get("scrape_configs") or []
        if job["job_name"] in local
    ]
    jobs.append({"job_name": "victorialogs", "static_configs": [{"targets": [f"{HOST}:{ports['victorialogs']}"]}]})
    cfg["scrape_configs"] = jobs
    head = "# Written by `otel-verl stack up` from collector/prometheus/prometheus.yml; edit that file.\n"
    return head + yaml.safe_dump(cfg, sort_keys=False)


def _alertmanager_config(config_dir: Path) -> str:
    # compose reaches the webhook on the Docker host as host.docker.internal; here that is localhost.
    text = (config_dir / "alertmanager" / "alertmanager.yml").read_text(encoding="utf-8")
    head = "# Written by `otel-verl stack up` from collector/alertmanager/alertmanager.yml; edit that file.\n"
    return head + text.replace("host.docker.internal", HOST)


def _collector(
    binary: str, config_dir: Path, data_dir: Path, ports: dict[str, int], setup: CollectorSetup
) -> Component:
    """The Collector of ``setup.role``: its config files, environment and readiness URL."""
    p = ports
    web = f"http://{HOST}"
    configs = [config_dir / ROLE_CONFIG[setup.role]]
    env = {
        # without TLS --bind is a loopback address (check_setup): receivers, health and self-metrics there
        "OTELCOL_LISTEN_HOST": HOST if setup.tls else setup.bind,
        "OTELCOL_OTLP_GRPC_PORT": str(p["otlp-grpc"]),
        "OTELCOL_OTLP_HTTP_PORT": str(p["otlp-http"]),
        "OTELCOL_HEALTH_PORT": str(p["otelcol-health"]),
        "OTELCOL_METRICS_PORT": str(p["otelcol-metrics"]),
        "OTELCOL_STORAGE_DIR": str(data_dir / "otelcol" / "file_storage"),
        # As compose: about 80 % of the 2 GiB compose gives it; memory_limiter acts first. An agent
        # is smaller: 80 % of its memory_limiter's 512 MiB.
        "GOMEMLIMIT": "410MiB" if setup.role == "agent" else "1640MiB",
    }
    if setup.role == "agent":
        env["OTELCOL_GATEWAY_RESOLVER"] = json.dumps(gateway_resolver(setup.gateways or ""))
        env["OTELCOL_GATEWAY_CA_FILE"] = str(setup.gateway_ca.resolve()) if setup.gateway_ca else ""
    else:
        backends = {
            "OTELCOL_METRICS_ENDPOINT": f"{web}:{p['prometheus']}/api/v1/otlp",
            "OTELCOL_TRACES_ENDPOINT": f"{HOST}:{p['jaeger-otlp-grpc']}",
            "OTELCOL_LOGS_ENDPOINT": f"{web}:{p['victorialogs']}/insert/opentelemetry",
        }
        for name, value in backends.items():
            # a gateway exports to this host's all-in-one stack, unless the environment names others
            env[name] = (os.environ.get(name) or value) if setup.role == "gateway" else value
    if setup.token_file is not None:
        env["OTELCOL_BEARER_TOKEN_FILE"] = str(setup.token_file.resolve())
    if setup.tls:
        assert setup.tls_cert is not None and setup.tls_key is not None
        configs.append(config_dir / REMOTE_OVERLAY)
        env["OTELCOL_REMOTE_LISTEN_HOST"] = _url_host(setup.bind)  # in "HOST:PORT" endpoints: [v6] bracketed
        env["OTELCOL_TLS_CERT_FILE"] = str(setup.tls_cert.resolve())
        env["OTELCOL_TLS_KEY_FILE"] = str(setup.tls_key.resolve())
    configs += [c.resolve() for c in setup.extra_configs]
    scheme, host = ("https", setup.bind) if setup.tls else ("http", env["OTELCOL_LISTEN_HOST"])
    return Component(
        "otelcol",
        [binary, *(f"--config={c}" for c in configs)],
        env,
        f"http://{_url_host(env['OTELCOL_LISTEN_HOST'])}:{p['otelcol-health']}/",
        f"{scheme}://{_url_host(host)}:{p['otlp-grpc']} (OTLP gRPC), {scheme}://{_url_host(host)}:{p['otlp-http']} "
        "(OTLP HTTP)",
        COLLECTOR_PORTS,
    )


def plan(
    binaries: dict[str, str],
    config_dir: Path,
    data_dir: Path,
    ports: dict[str, int],
    setup: CollectorSetup | None = None,
) -> list[Component]:
    """The commands, environments and readiness URLs of the role's components; writes the configs."""
    setup = setup or CollectorSetup()
    (data_dir / "otelcol" / "file_storage").mkdir(parents=True, exist_ok=True)
    collector = _collector(binaries["otelcol"], config_dir, data_dir, ports, setup)
    if setup.role != "all-in-one":
        return [collector]
    p = ports
    prom_dir, am_dir = data_dir / "prometheus", data_dir / "alertmanager"
    for d in (prom_dir / "data", am_dir / "data", data_dir / "victoria-logs"):
        d.mkdir(parents=True, exist_ok=True)
    (prom_dir / "prometheus.yml").write_text(_prometheus_config(config_dir, p), encoding="utf-8")
    (am_dir / "alertmanager.yml").write_text(_alertmanager_config(config_dir), encoding="utf-8")
    web = f"http://{HOST}"
    return [
        Component(
            "prometheus",
            # The flags of compose's prometheus service, with local paths and address.
            [
                binaries["prometheus"],
                f"--config.file={prom_dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={prom_dir / 'data'}",
                "--storage.tsdb.retention.time=30d",
                "--web.enable-otlp-receiver",
                "--web.enable-remote-write-receiver",
                "--enable-feature=exemplar-storage",
                f"--web.listen-address={HOST}:{p['prometheus']}",
            ],
            {},
            f"{web}:{p['prometheus']}/-/ready",
            f"{web}:{p['prometheus']}",
            ("prometheus",),
        ),
        Component(
            "alertmanager",
            [
                binaries["alertmanager"],
                f"--config.file={am_dir / 'alertmanager.yml'}",
                f"--storage.path={am_dir / 'data'}",
                f"--web.listen-address={HOST}:{p['alertmanager']}",
                # One node: no gossip listener (it would take 9094 on every interface).
                "--cluster.listen-address=",
            ],
            {},
            f"{web}:{p['alertmanager']}/-/ready",
            f"{web}:{p['alertmanager']}",
            ("alertmanager",),
        ),
        Component(
            "jaeger",
            [binaries["jaeger"], f"--config={config_dir / 'jaeger' / 'jaeger.yaml'}"],
            {
                "JAEGER_LISTEN_HOST": HOST,
                "JAEGER_QUERY_PORT": str(p["jaeger"]),
                "JAEGER_QUERY_GRPC_PORT": str(p["jaeger-grpc"]),
                "JAEGER_OTLP_GRPC_PORT": str(p["jaeger-otlp-grpc"]),
                "JAEGER_OTLP_HTTP_PORT": str(p["jaeger-otlp-http"]),
                "JAEGER_HEALTH_PORT": str(p["jaeger-health"]),
            },
            f"{web}:{p['jaeger-health']}/status",
            f"{web}:{p['jaeger']}",
            ("jaeger", "jaeger-grpc", "jaeger-otlp-grpc", "jaeger-otlp-http", "jaeger-health"),
        ),
        Component(
            "victoria-logs",
            [
                binaries["victoria-logs"],
                f"-httpListenAddr={HOST}:{p['victorialogs']}",
                f"-storageDataPath={data_dir / 'victoria-logs'}",
                "-retentionPeriod=30d",
            ],
            {},
            f"{web}:{p['victorialogs']}/health",
            f"{web}:{p['victorialogs']}",
            ("victorialogs",),
        ),
        collector,
    ]


# ---------------------------------------------------------------------------------------------
# Processes


# The stack's own readiness URLs are on this host: asked directly, never through $http_proxy.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _answers(url: str, timeout: float = 2.0) -> bool:
    try:
        with _DIRECT.open(url, timeout=timeout) as resp:  # our own 127.0.0.1 URLs
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _port_free(port: int, host: str = HOST) -> bool:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return False
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError:
            return False
    return True


def _ours(pid: int, binary: str) -> bool:
    """pid is alive and still runs ``binary`` (not a reused pid of something else)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        try:
            os.kill(pid, 0)  # no /proc (macOS): trust the pid
        except OSError:
            return False
        return True
    return bool(cmdline) and cmdline[0].decode(errors="replace") == binary


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])


def _load_state(data_dir: Path) -> dict:
    try:
        return json.loads((data_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _save_state(data_dir: Path, state: dict) -> None:
    tmp = data_dir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2), encoding="utf-8")
    tmp.replace(data_dir / STATE_FILE)


def _running(state: dict) -> dict[str, dict]:
    return {n: c for n, c in (state.get("components") or {}).items() if _ours(c["pid"], c["argv"][0])}


def _stop(pid: int, binary: str, grace_s: float = STOP_GRACE_S) -> None:
    if not _ours(pid, binary):
        return
    try:
        os.killpg(pid, signal.SIGTERM)  # each component leads its own process group
    except OSError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)  # our child when up and down run in one process
            if done:
                return
        except ChildProcessError:
            if not _ours(pid, binary):
                return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _busy_ports(ports: dict[str, int], setup: CollectorSetup) -> list[str]:
    """``name port`` of every port of the role's components that is taken where it would listen."""
    names = [name for name in ports if setup.role == "all-in-one" or name in COLLECTOR_PORTS]
    busy = []
    for name in names:
        if name in ("otlp-grpc", "otlp-http"):
            host = setup.bind
        elif name in COLLECTOR_PORTS:  # health check and self-metrics: loopback, --bind's without TLS
            host = HOST if setup.tls else setup.bind
        else:
            host = HOST
        if not _port_free(ports[name], host):
            busy.append(f"{name} {ports[name]} on {host}")
    return busy


def _next_steps(setup: CollectorSetup, ports: dict[str, int]) -> list[str]:
    """What ``up`` says to do next, for the training job or the agents."""
    grpc = ports["otlp-grpc"]
    if setup.role == "gateway":
        return [f"agents: otel-verl stack up --role agent --gateway {_url_host(setup.bind)}:{grpc} --token-file ..."]
    if setup.tls:
        return [
            "for the training job (on every node that reaches it):",
            f"  export OTEL_EXPORTER_OTLP_ENDPOINT=https://{_url_host(setup.bind)}:{grpc}",
            "  export OTEL_EXPORTER_OTLP_CERTIFICATE=<the CA of its certificate>",
            "  export OTEL_VERL_OTLP_HEADERS_FILE=<the --token-file: the token alone is sent as Bearer>",
        ]
    host = "localhost" if setup.role == "agent" else _url_host(setup.bind)
    steps = ["for the training job:", f"  export OTEL_EXPORTER_OTLP_ENDPOINT=http://{host}:{grpc}"]
    if setup.role == "all-in-one":  # docs/stack.md, "Where to look"
        steps += [
            "to look at a run (docs/stack.md, 'Where to look'):",
            f"  otel-verl report --jaeger http://{HOST}:{ports['jaeger']} --run RUN_ID   (its steps, as one HTML page)",
            f"  http://{HOST}:{ports['prometheus']}/query   (Prometheus's UI, if built with it)",
            f"  http://{HOST}:{ports['victorialogs']}/select/vmui/   (logs)",
        ]
    return steps


def up(
    bin_dir: Path | None,
    data_dir: Path,
    ports: dict[str, int],
    timeout_s: float = 90.0,
    config_dir: Path | None = None,
    out: Callable[[str], None] = print,
    setup: CollectorSetup | None = None,
) -> int:
    setup = setup or CollectorSetup()
    check_setup(setup)
    config_dir = config_dir or default_config_dir()
    if config_dir is None or not (config_dir / "otelcol-config.yaml").is_file():
        raise CommandError(
            f"no ops-kit configs in {config_dir}: pass --config-dir (a folder `otel-verl stack configs` "
            "wrote, or collector/ of an otel-verl clone) or set OTEL_VERL_COLLECTOR_DIR"
            if config_dir is not None
            else "no ops-kit configs installed with otel-verl: pass --config-dir or set OTEL_VERL_COLLECTOR_DIR",
            USAGE,
        )
    order = role_components(setup.role)
    data_dir.mkdir(parents=True, exist_ok=True)
    state = _load_state(data_dir)
    running = _running(state)
    if (
        state.get("role", "all-in-one") == setup.role
        and set(running) == set(order)
        and all(_answers(c["ready_url"]) for c in running.values())
    ):
        # Idempotent, like scripts/backends.sh: a second `up` finds the stack it wants.
        out(f"already running from {data_dir}:")
        return status(data_dir, out)
    if running:
        raise CommandError(
            f"a stack from {data_dir} is already running ({', '.join(running)}): "
            "`otel-verl stack status` shows it, `otel-verl stack down` stops it"
        )
    binaries = find_binaries(bin_dir, order)
    busy = _busy_ports(ports, setup)
    if busy:
        raise CommandError(f"ports in use: {', '.join(busy)}; choose others with --port NAME=PORT")
    components = {c.name: c for c in plan(binaries, config_dir.resolve(), data_dir.resolve(), ports, setup)}
    (data_dir / "logs").mkdir(exist_ok=True)
    state = {
        "data_dir": str(data_dir.resolve()),
        "role": setup.role,
        "order": list(order),
        "ports": ports,
        "components": {},
    }
    started = time.monotonic()
    procs: dict[str, subprocess.Popen] = {}
    for name in order:
        comp = components[name]
        log_path = data_dir / "logs" / f"{name}.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(  # noqa: S603 - binaries the user chose, fixed arguments
                comp.argv,
                env={**os.environ, **comp.env},
                cwd=data_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # outlives this command; down stops its whole group
            )
        procs[name] = proc
        state["components"][name] = {
            "pid": proc.pid,
            "argv": comp.argv,
            "ready_url": comp.ready_url,
            "url": comp.url,
            "log": str(log_path),
        }
        _save_state(data_dir, state)
    pending = list(order)
    deadline = started + timeout_s
    while pending:
        for name in list(pending):
            info = state["components"][name]
            if (rc := procs[name].poll()) is not None:
                _stop_all(state)
                raise CommandError(
                    f"{name} exited with code {rc} during start-up (log {info['log']}): {_tail(Path(info['log']))}"
                )
            if _answers(info["ready_url"]):
                pending.remove(name)
                out(f"{name:<14} ready after {time.monotonic() - started:4.1f} s  {info['url']}  (pid {info['pid']})")
        if pending and time.monotonic() > deadline:
            _stop_all(state)
            raise CommandError(
                f"not ready after {timeout_s:g} s: {', '.join(pending)} "
                f"(logs in {data_dir / 'logs'}); stopped the stack"
            )
        if pending:
            time.sleep(0.25)
    out(f"{setup.role} stack up in {time.monotonic() - started:.1f} s, data in {data_dir}")
    for line in _next_steps(setup, ports):
        out(line)
    return OK


def _order(state: dict) -> tuple[str, ...]:
    """The components of the stack ``state`` records, in start order."""
    order = state.get("order")
    return tuple(order) if isinstance(order, list) else START_ORDER


def _stop_all(state: dict) -> list[str]:
    stopped = []
    # Collector first: whatever it still holds goes to its on-disk queue or to the backends.
    for name in reversed(_order(state)):
        info = (state.get("components") or {}).get(name)
        if info and _ours(info["pid"], info["argv"][0]):
            _stop(info["pid"], info["argv"][0])
            stopped.append(name)
    return stopped


def down(data_dir: Path, out: Callable[[str], None] = print) -> int:
    state = _load_state(data_dir)
    stopped = _stop_all(state)
    (data_dir / STATE_FILE).unlink(missing_ok=True)
    out(f"stopped {', '.join(stopped)}" if stopped else f"no stack running from {data_dir}")
    return OK


def status(data_dir: Path, out: Callable[[str], None] = print) -> int:
    state = _load_state(data_dir)
    comps = state.get("components") or {}
    if not comps:
        out(f"no stack started from {data_dir}")
        return PROBLEM
    healthy = True
    for name in _order(state):
        info = comps.get(name)
        if info is None:
            healthy = False
            out(f"{name:<14} not started")
            continue
        alive = _ours(info["pid"], info["argv"][0])
        ready = alive and _answers(info["ready_url"])
        healthy &= ready
        word = "ready" if ready else ("running, not ready" if alive else "not running")
        out(f"{name:<14} {word:<18} {info['url']}  (pid {info['pid']}, log {info['log']})")
    return OK if healthy else PROBLEM


# ---------------------------------------------------------------------------------------------
# The kit's files for a stack of the user's own, and the backends' build


def _kit() -> Kit:
    kit = ops_kit()
    if kit is None:
        raise CommandError("the ops kit is not installed with this otel-verl (no otel_verl/_ops_kit, no clone)")
    return kit


def _kit_files(root: Path) -> list[Path]:
    """Every regular file of the kit's configs folder, relative to it, sorted."""
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def configs(dest: Path, force: bool = False, out: Callable[[str], None] = print) -> int:
    """Write the kit's configs into ``dest`` (made if missing), each file whole or not at all
    (``atomic.write_file``: a link planted at a destination is replaced, never written through).
    A file already there with other content is replaced only with ``force``; a folder on the way
    that is a link is refused (it would lead the files elsewhere)."""
    from otel_verl.atomic import write_file

    source = _kit().configs
    files = _kit_files(source)
    if dest.exists() and not dest.is_dir():
        raise CommandError(f"{dest} exists and is not a folder", USAGE)
    plan: list[tuple[Path, bytes]] = []
    differ: list[str] = []
    same = 0
    for rel in files:
        for parent in reversed(rel.parents[:-1]):  # the folders between dest and the file
            if (dest / parent).is_symlink() or ((dest / parent).exists() and not (dest / parent).is_dir()):
                raise CommandError(f"{dest / parent} is a link or not a folder; remove it or choose another DIR")
        data = (source / rel).read_bytes()
        target = dest / rel
        if target.is_dir() and not target.is_symlink():
            raise CommandError(f"{target} is a folder; remove it or choose another DIR")
        if target.is_file() and not target.is_symlink():
            if target.read_bytes() == data:
                same += 1
                continue
            differ.append(str(rel))
        plan.append((target, data))
    if differ and not force:
        shown = ", ".join(differ[:5]) + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
        raise CommandError(f"{len(differ)} files in {dest} differ from the kit's ({shown}); --force replaces them")
    try:
        for target, data in plan:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_file(target, data)
    except OSError as exc:
        raise CommandError(f"cannot write into {dest}: {exc.strerror or exc}") from None
    out(f"wrote {len(plan)} files to {dest}" + (f" ({same} already there, unchanged)" if same else ""))
    out(f"  Collector:    otelcol-contrib --config={dest / 'otelcol-config.yaml'}  (backends: OTELCOL_*_ENDPOINT)")
    out(f"  Prometheus 3: prometheus --config.file={dest / 'prometheus' / 'prometheus.yml'} --web.enable-otlp-receiver")
    out(f"  Alertmanager: alertmanager --config.file={dest / 'alertmanager' / 'alertmanager.yml'}")
    grafana = dest / "grafana"
    out(f"  Grafana:      provisioning {grafana / 'provisioning'}, dashboards {grafana / 'dashboards'}")
    return OK


BUILD_COMPONENTS = ("otelcol-verl", "prometheus", "alertmanager", "jaeger", "victoria-logs")


def build(components: list[str] | None = None, out: Callable[[str], None] = print) -> int:
    """Build the backends from their Go modules with the kit's ``backends.sh`` (its lines go to
    this command's output); 0 when all were built or present, 1 when one failed."""
    unknown = [c for c in components or [] if c not in BUILD_COMPONENTS]
    if unknown:
        raise CommandError(f"unknown component {unknown[0]!r} (known: {', '.join(BUILD_COMPONENTS)})", USAGE)
    script = _kit().backends_script
    if not script.is_file():
        raise CommandError(f"the ops kit has no {script.name} ({script})")
    bash = shutil.which("bash")
    if bash is None:
        raise CommandError("bash is not on PATH (backends.sh is a bash script)")
    if shutil.which("go") is None:
        raise CommandError(
            f"go is not on PATH: building needs Go >= 1.26.8 (https://go.dev/dl/); or put each project's "
            f"release binary ({', '.join(sorted({n for names in BINARY_NAMES.values() for n in names}))}) "
            f"in {default_backends_dir()} or on PATH"
        )
    out(f"building {', '.join(components or BUILD_COMPONENTS)} into {default_backends_dir()} ({script})")
    done = subprocess.run([bash, str(script), *(components or [])], check=False)  # noqa: S603 - our script
    return OK if done.returncode == 0 else PROBLEM


def stack(
    action: str,
    bin_dir: Path | None = None,
    data_dir: Path | None = None,
    port_items: list[str] | None = None,
    timeout_s: float = 90.0,
    config_dir: Path | None = None,
    targets: list[str] | None = None,
    force: bool = False,
    setup: CollectorSetup | None = None,
) -> int:
    """Entry point of ``otel-verl stack``; ``action`` is up, down, status, configs (``targets``: the
    folder) or build (``targets``: the components, default all)."""
    if action == "configs":
        if not targets or len(targets) != 1:
            raise CommandError("stack configs takes one folder: otel-verl stack configs DIR", USAGE)
        return configs(Path(targets[0]), force)
    if action == "build":
        return build(targets)
    if targets:
        raise CommandError(f"stack {action} takes no further arguments ({' '.join(targets)})", USAGE)
    data_dir = data_dir or default_data_dir()
    if bin_dir is not None and not bin_dir.is_dir():
        raise CommandError(f"--bin-dir {bin_dir} is not a folder", USAGE)
    if action == "up":
        return up(bin_dir, data_dir, parse_ports(port_items), timeout_s, config_dir, setup=setup)
    if action == "down":
        return down(data_dir)
    if action == "status":
        return status(data_dir)
    raise CommandError(f"unknown action {action!r}", USAGE)  # argparse's choices keep this unreachable
