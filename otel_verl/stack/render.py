"""What each component runs: its command line, environment and readiness URL (``plan``), and the
configs ``up`` writes into the data folder (Prometheus and Alertmanager take no environment
substitution, so their files get the local addresses; the Collector's take them from its
environment)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from otel_verl.stack.ports import COLLECTOR_PORTS, HOST
from otel_verl.stack.roles import CollectorSetup, gateway_resolver, url_host

# The base config of each role's Collector; otelcol-remote.yaml goes on top with TLS.
ROLE_CONFIG = {"all-in-one": "otelcol-config.yaml", "gateway": "otelcol-config.yaml", "agent": "otelcol-agent.yaml"}


REMOTE_OVERLAY = "otelcol-remote.yaml"


@dataclass
class Component:
    name: str
    argv: list[str]
    env: dict[str, str]
    ready_url: str
    url: str  # what a user opens or points a client at
    ports: tuple[str, ...]


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
        env["OTELCOL_REMOTE_LISTEN_HOST"] = url_host(setup.bind)  # in "HOST:PORT" endpoints: [v6] bracketed
        env["OTELCOL_TLS_CERT_FILE"] = str(setup.tls_cert.resolve())
        env["OTELCOL_TLS_KEY_FILE"] = str(setup.tls_key.resolve())
    configs += [c.resolve() for c in setup.extra_configs]
    scheme, host = ("https", setup.bind) if setup.tls else ("http", env["OTELCOL_LISTEN_HOST"])
    return Component(
        "otelcol",
        [binary, *(f"--config={c}" for c in configs)],
        env,
        f"http://{url_host(env['OTELCOL_LISTEN_HOST'])}:{p['otelcol-health']}/",
        f"{scheme}://{url_host(host)}:{p['otlp-grpc']} (OTLP gRPC), {scheme}://{url_host(host)}:{p['otlp-http']} "
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
