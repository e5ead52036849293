"""``otel-verl stack up|down|status|configs|build``: the command group of ``otel_verl.stack``, one
sub-command per action, each with only its own options (``--data-dir`` and ``--bin-dir``: where a
stack is, for ``up``, ``down`` and ``status``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from otel_verl.cli.options import EPILOG, seconds
from otel_verl.exits import USAGE, CommandError


def register(commands: argparse._SubParsersAction) -> None:
    group = commands.add_parser(
        "stack",
        help="run Collector, Prometheus, Alertmanager, Jaeger and VictoriaLogs locally, without Docker",
        epilog=EPILOG,
    )
    actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument(
        "--bin-dir", type=Path, help="folder with the binaries (searched before PATH and the folder `build` fills)"
    )
    where.add_argument(
        "--data-dir",
        type=Path,
        help="data, logs and state (default: OTEL_VERL_STACK_DIR or ~/.local/share/otel-verl/stack)",
    )
    up = actions.add_parser(
        "up", parents=[where], help="start every component and wait until each is ready", epilog=EPILOG
    )
    _add_up_options(up)
    up.set_defaults(handler=run_up)
    down = actions.add_parser("down", parents=[where], help="stop the components `up` started", epilog=EPILOG)
    down.set_defaults(handler=run_down)
    status = actions.add_parser(
        "status", parents=[where], help="which components answer (exit 1 when one does not)", epilog=EPILOG
    )
    status.set_defaults(handler=run_status)
    configs = actions.add_parser("configs", help="write the ops kit's configs into DIR", epilog=EPILOG)
    configs.add_argument("folder", type=Path, metavar="DIR", help="the folder (made if missing)")
    configs.add_argument("--force", action="store_true", help="replace files of DIR that differ")
    configs.set_defaults(handler=run_configs)
    build = actions.add_parser("build", help="build the binaries from their Go modules", epilog=EPILOG)
    build.add_argument("components", nargs="*", metavar="COMPONENT", help="the components (default: all)")
    build.set_defaults(handler=run_build)


def _add_up_options(up: argparse.ArgumentParser) -> None:
    up.add_argument(
        "--port",
        action="append",
        metavar="NAME=PORT",
        help="override a port (repeatable); NAME: otlp-grpc (4317), otlp-http (4318), prometheus (9090), "
        "alertmanager (9093), jaeger (16686), victorialogs (9428), otelcol-health, otelcol-metrics, "
        "jaeger-grpc, jaeger-otlp-grpc, jaeger-otlp-http, jaeger-health",
    )
    up.add_argument(
        "--timeout", type=seconds, default=90.0, help="seconds `up` waits for every component to be ready (default 90)"
    )
    up.add_argument(
        "--config-dir",
        type=Path,
        help="a folder of ops-kit configs (default: OTEL_VERL_COLLECTOR_DIR, else the kit installed with otel-verl)",
    )
    up.add_argument(
        "--role",
        choices=("all-in-one", "gateway", "agent"),
        default="all-in-one",
        help="all-in-one (default): the Collector and the backends; agent: a node's Collector, forwarding to "
        "--gateway; gateway: a Collector of the gateway tier, exporting to this host's all-in-one backends",
    )
    up.add_argument(
        "--bind",
        default="127.0.0.1",
        metavar="ADDR",
        help="address of the OTLP receivers (default 127.0.0.1); another than loopback, or an IPv6 one, needs "
        "--tls-cert, --tls-key and --token-file",
    )
    up.add_argument("--tls-cert", type=Path, metavar="FILE", help="PEM certificate of the OTLP receivers")
    up.add_argument("--tls-key", type=Path, metavar="FILE", help="its PEM key")
    up.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="bearer token (one line): with TLS the receivers take only requests with it; an agent sends it "
        "to the gateways",
    )
    up.add_argument(
        "--gateway",
        metavar="HOST:PORT[,HOST:PORT]|dns:NAME:PORT",
        help="agent: the gateways, a fixed list or every address of a DNS name (looked up again every 5 s)",
    )
    up.add_argument(
        "--gateway-ca",
        type=Path,
        metavar="FILE",
        help="agent: CA of the gateways' certificates (default: the system's)",
    )
    up.add_argument(
        "--collector-config",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="another Collector config merged after the role's (repeatable), e.g. collector/otelcol-debug.yaml",
    )


def _data_dir(ns: argparse.Namespace) -> Path:
    """The stack's data folder (``--data-dir`` or the default); ``--bin-dir`` checked on the way."""
    from otel_verl.stack.supervisor import default_data_dir

    if ns.bin_dir is not None and not ns.bin_dir.is_dir():
        raise CommandError(f"--bin-dir {ns.bin_dir} is not a folder", USAGE)
    return ns.data_dir or default_data_dir()


def run_up(ns: argparse.Namespace) -> int:
    from otel_verl.stack.ports import parse_ports
    from otel_verl.stack.roles import CollectorSetup
    from otel_verl.stack.supervisor import up

    setup = CollectorSetup(
        role=ns.role,
        bind=ns.bind,
        tls_cert=ns.tls_cert,
        tls_key=ns.tls_key,
        token_file=ns.token_file,
        gateways=ns.gateway,
        gateway_ca=ns.gateway_ca,
        extra_configs=tuple(ns.collector_config),
    )
    data_dir = _data_dir(ns)
    return up(ns.bin_dir, data_dir, parse_ports(ns.port), ns.timeout, ns.config_dir, setup=setup)


def run_down(ns: argparse.Namespace) -> int:
    from otel_verl.stack.supervisor import down

    return down(_data_dir(ns))


def run_status(ns: argparse.Namespace) -> int:
    from otel_verl.stack.supervisor import status

    return status(_data_dir(ns))


def run_configs(ns: argparse.Namespace) -> int:
    from otel_verl.stack.kit import configs

    return configs(ns.folder, ns.force)


def run_build(ns: argparse.Namespace) -> int:
    from otel_verl.stack.kit import build

    return build(ns.components)
