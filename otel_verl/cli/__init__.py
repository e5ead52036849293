"""``otel-verl``: command-line tools around a run's telemetry.

Argument parsing and dispatch only; each command is a module of ``otel_verl.offline`` (stored
telemetry) or ``otel_verl.live`` (live things):

``otel-verl summary DIR`` prints what a run wrote with the ``otlp_json_file`` exporters;
``otel-verl report DIR [-o OUT.html]`` renders the same files as one self-contained HTML page
(``--jaeger URL --run RUN_ID``: a live run's traces from the stack's Jaeger instead);
``otel-verl replay DIR --endpoint URL`` sends them to an OTLP/HTTP endpoint (``--spool DIR``: what
verl processes left in their on-disk spools);
``otel-verl doctor`` checks what the instrumentation would do here;
``otel-verl stack up|down|status`` runs the ops kit's backends as local processes (no Docker), or a
node's Collector agent or a gateway of several nodes (``--role``); ``stack configs DIR`` writes the
kit's configs out, ``stack build`` builds the backends.

Whatever goes wrong ends as one ``otel-verl <command>: ...`` line on stderr and an exit code
(``otel_verl.exits``: 0 ok, 1 problem found, 2 usage error), never as a traceback; text
from a run folder in it is escaped (``otel_verl.printable``).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import sys
from pathlib import Path
from typing import NoReturn

from otel_verl.exits import OK, PROBLEM, USAGE, CommandError, say

EPILOG = "exit codes: 0 ok, 1 problem found (named on stderr), 2 usage error"


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line (argparse prints the usage block first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


MAX_TIMEOUT_S = 86400.0  # a day per request: beyond it the socket layer cannot represent the deadline


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_TIMEOUT_S:  # also rejects NaN
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0 and up to {MAX_TIMEOUT_S:g}")
    return value


def _bytes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1024:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of bytes of at least 1024")
    return value


def _hours(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 24 * 366:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of hours above 0 and up to a year")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to 1000000")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="otel-verl",
        description="Tools around the telemetry of verl runs instrumented by otel-verl.",
        epilog=EPILOG,
    )
    # metavar: argparse names the dest in "required" errors; COMMAND is what a user would type.
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    validation = {
        "action": "store_true",
        "help": "let validation trajectories be the slowest too (default: training trajectories only)",
    }
    p_sum = sub.add_parser("summary", help="summarise a run's OTLP JSON files", epilog=EPILOG)
    p_sum.add_argument("folder", type=Path, help="the run's OTEL_VERL_FILE_DIR")
    p_sum.add_argument("--include-validation", **validation)
    p_rep = sub.add_parser(
        "report", help="render a run's OTLP JSON files as one self-contained HTML page", epilog=EPILOG
    )
    p_rep.add_argument("folder", type=Path, nargs="?", help="the run's OTEL_VERL_FILE_DIR")
    p_rep.add_argument(
        "-o", "--output", type=Path, help="HTML file to write (default: FOLDER/report.html; --jaeger: report-RUN.html)"
    )
    p_rep.add_argument("--include-validation", **validation)
    p_rep.add_argument(
        "--jaeger",
        metavar="URL",
        help="instead of a folder: read the run's traces from this Jaeger v2 (API v3), e.g. the stack's "
        "http://localhost:16686",
    )
    p_rep.add_argument(
        "--run",
        metavar="RUN_ID",
        help="with --jaeger: the run's verl.run.id (OTEL_VERL_RUN_ID; without it, the runs Jaeger has are named)",
    )
    p_rep.add_argument("--service", help="with --jaeger: search this service only (default: every service)")
    p_rep.add_argument(
        "--lookback-hours", type=_hours, default=24.0, help="with --jaeger: search traces started this recently (24)"
    )
    p_rep.add_argument(
        "--max-traces", type=_count, default=5000, help="with --jaeger: traces asked per service (default 5000)"
    )
    p_rep.add_argument(
        "--max-bytes",
        type=_bytes,
        default=256 * 2**20,
        help="with --jaeger: bytes of all of Jaeger's answers together (default 256 MiB)",
    )
    p_rep.add_argument(
        "--timeout", type=_seconds, default=30.0, help="with --jaeger: seconds for each request (default 30)"
    )
    p_play = sub.add_parser(
        "replay",
        help="send a run's OTLP JSON files, or what verl processes spooled, to an OTLP/HTTP endpoint",
        epilog=EPILOG,
    )
    p_play.add_argument("folder", type=Path, nargs="?", help="the run's OTEL_VERL_FILE_DIR")
    p_play.add_argument(
        "--spool",
        type=Path,
        metavar="DIR",
        help="instead: send the batches ended processes left in this spool folder (OTEL_VERL_SPOOL_DIR, "
        "default /var/tmp/otel-verl-spool-UID), removing each once accepted; a folder goes only to the "
        "OTLP/HTTP endpoint its process recorded (others are kept and named)",
    )
    p_play.add_argument(
        "--ignore-recorded-endpoint",
        action="store_true",
        help="with --spool: send every spooled batch to the endpoint given, also those a process recorded for "
        "another endpoint (or an OTLP/gRPC one) and those with no record",
    )
    p_play.add_argument(
        "--endpoint", help="OTLP/HTTP base URL, e.g. http://collector:4318 (default: OTEL_EXPORTER_OTLP_*ENDPOINT)"
    )
    p_play.add_argument("--headers", help="k=v,k2=v2 (default: OTEL_EXPORTER_OTLP_*HEADERS)")
    p_play.add_argument(
        "--timeout",
        type=_seconds,
        default=10.0,
        help="deadline of each request in seconds, its retries included (default 10)",
    )
    p_play.add_argument(
        "--max-request-bytes",
        type=_bytes,
        default=None,
        help="split stored lines above this size into several requests (default 20 MiB, the Collector's default limit)",
    )
    p_doctor = sub.add_parser(
        "doctor", help="check what the instrumentation would do in this environment (problems first)", epilog=EPILOG
    )
    p_doctor.add_argument("--verbose", "-v", action="store_true", help="also list every check that passed, and notes")
    p_stack = sub.add_parser(
        "stack",
        help="run Collector, Prometheus, Alertmanager, Jaeger and VictoriaLogs locally, without Docker",
        epilog=EPILOG,
    )
    p_stack.add_argument(
        "action",
        choices=("up", "down", "status", "configs", "build"),
        help="up: start every component and wait until each is ready; down: stop them; status: which ones answer; "
        "configs DIR: write the ops kit's configs into DIR; build [COMPONENT...]: build the binaries from their "
        "Go modules",
    )
    p_stack.add_argument("targets", nargs="*", metavar="DIR|COMPONENT", help="configs: the folder; build: components")
    p_stack.add_argument("--force", action="store_true", help="configs: replace files of DIR that differ")
    p_stack.add_argument(
        "--bin-dir", type=Path, help="folder with the binaries (searched before PATH and the folder `build` fills)"
    )
    p_stack.add_argument(
        "--data-dir",
        type=Path,
        help="data, logs and state (default: OTEL_VERL_STACK_DIR or ~/.local/share/otel-verl/stack)",
    )
    p_stack.add_argument(
        "--port",
        action="append",
        metavar="NAME=PORT",
        help="override a port (repeatable); NAME: otlp-grpc (4317), otlp-http (4318), prometheus (9090), "
        "alertmanager (9093), jaeger (16686), victorialogs (9428), otelcol-health, otelcol-metrics, "
        "jaeger-grpc, jaeger-otlp-grpc, jaeger-otlp-http, jaeger-health",
    )
    p_stack.add_argument(
        "--timeout", type=_seconds, default=90.0, help="seconds `up` waits for every component to be ready (default 90)"
    )
    p_stack.add_argument(
        "--config-dir",
        type=Path,
        help="a folder of ops-kit configs (default: OTEL_VERL_COLLECTOR_DIR, else the kit installed with otel-verl)",
    )
    p_stack.add_argument(
        "--role",
        choices=("all-in-one", "gateway", "agent"),
        default="all-in-one",
        help="all-in-one (default): the Collector and the backends; agent: a node's Collector, forwarding to "
        "--gateway; gateway: a Collector of the gateway tier, exporting to this host's all-in-one backends",
    )
    p_stack.add_argument(
        "--bind",
        default="127.0.0.1",
        metavar="ADDR",
        help="address of the OTLP receivers (default 127.0.0.1); another than loopback, or an IPv6 one, needs "
        "--tls-cert, --tls-key and --token-file",
    )
    p_stack.add_argument("--tls-cert", type=Path, metavar="FILE", help="PEM certificate of the OTLP receivers")
    p_stack.add_argument("--tls-key", type=Path, metavar="FILE", help="its PEM key")
    p_stack.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="bearer token (one line): with TLS the receivers take only requests with it; an agent sends it "
        "to the gateways",
    )
    p_stack.add_argument(
        "--gateway",
        metavar="HOST:PORT[,HOST:PORT]|dns:NAME:PORT",
        help="agent: the gateways, a fixed list or every address of a DNS name (looked up again every 5 s)",
    )
    p_stack.add_argument(
        "--gateway-ca",
        type=Path,
        metavar="FILE",
        help="agent: CA of the gateways' certificates (default: the system's)",
    )
    p_stack.add_argument(
        "--collector-config",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="another Collector config merged after the role's (repeatable), e.g. collector/otelcol-debug.yaml",
    )
    return parser


def _reading() -> None:
    """Before a run folder is read: what this process holds so far (its modules) lives as long as
    it does, so the cyclic collector leaves it out of its scans (``gc.freeze``); else each of the
    collections that a run's millions of short-lived records set off walks all of it again."""
    gc.freeze()


def _run(ns: argparse.Namespace) -> int:
    # Each command imports only its own module: `otel-verl summary` needs no HTTP, doctor no file reader.
    if ns.command == "summary":
        from otel_verl.offline.summary import summary

        _reading()
        return summary(ns.folder, include_validation=ns.include_validation)
    if ns.command == "report":
        from otel_verl.offline.report import report

        _reading()

        if (ns.folder is None) == (ns.jaeger is None):
            raise CommandError("report: give a run folder or --jaeger URL --run RUN_ID (one of them)", USAGE)
        if ns.jaeger is not None:
            from otel_verl.live.jaeger_report import jaeger_report_command

            return jaeger_report_command(ns)
        return report(ns.folder, ns.output, include_validation=ns.include_validation)
    if ns.command == "replay":
        from otel_verl.offline.replay import MAX_REQUEST_BYTES, replay

        if (ns.folder is None) == (ns.spool is None):
            raise CommandError("replay: give a run folder or --spool DIR (one of them)", USAGE)
        if ns.spool is not None:
            from otel_verl.offline.replay_spool import replay_spool

            return replay_spool(
                ns.spool, ns.endpoint, ns.headers, ns.timeout, ignore_recorded_endpoint=ns.ignore_recorded_endpoint
            )
        limit = ns.max_request_bytes or MAX_REQUEST_BYTES
        return replay(ns.folder, ns.endpoint, ns.headers, ns.timeout, max_request_bytes=limit)
    if ns.command == "stack":
        from otel_verl.stack import CollectorSetup, stack

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
        return stack(
            ns.action, ns.bin_dir, ns.data_dir, ns.port, ns.timeout, ns.config_dir, ns.targets, ns.force, setup
        )
    from otel_verl.live.doctor import doctor

    return doctor(verbose=ns.verbose)


def main(argv: list[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    where = f"otel-verl {ns.command}"
    try:
        return _run(ns)
    except CommandError as exc:  # its message may name what a run folder holds: say() escapes it
        say(f"{where}: {exc}", sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        say(f"{where}: interrupted", sys.stderr)
        return 130
    except BrokenPipeError:  # `otel-verl summary DIR | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK
    except Exception as exc:  # noqa: BLE001 - the last guard of "never a traceback"
        say(f"{where}: unexpected error {type(exc).__name__}: {exc} (a bug in otel-verl: please report it)", sys.stderr)
        return PROBLEM


if __name__ == "__main__":
    raise SystemExit(main())
