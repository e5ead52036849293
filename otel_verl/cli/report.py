"""``otel-verl report DIR [-o OUT.html]``: a run's OTLP JSON files as one self-contained HTML page;
``--jaeger URL --run RUN_ID``: a live run's traces from the stack's Jaeger instead."""

from __future__ import annotations

import argparse
from pathlib import Path

from otel_verl.cli.options import EPILOG, byte_count, count, hours, seconds
from otel_verl.cli.run_folder import add_include_validation, before_reading
from otel_verl.exits import USAGE, CommandError


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "report", help="render a run's OTLP JSON files as one self-contained HTML page", epilog=EPILOG
    )
    parser.add_argument("folder", type=Path, nargs="?", help="the run's OTEL_VERL_FILE_DIR")
    parser.add_argument(
        "-o", "--output", type=Path, help="HTML file to write (default: FOLDER/report.html; --jaeger: report-RUN.html)"
    )
    add_include_validation(parser)
    parser.add_argument(
        "--jaeger",
        metavar="URL",
        help="instead of a folder: read the run's traces from this Jaeger v2 (API v3), e.g. the stack's "
        "http://localhost:16686",
    )
    parser.add_argument(
        "--run",
        metavar="RUN_ID",
        help="with --jaeger: the run's verl.run.id (OTEL_VERL_RUN_ID; without it, the runs Jaeger has are named)",
    )
    parser.add_argument("--service", help="with --jaeger: search this service only (default: every service)")
    parser.add_argument(
        "--lookback-hours", type=hours, default=24.0, help="with --jaeger: search traces started this recently (24)"
    )
    parser.add_argument(
        "--max-traces", type=count, default=5000, help="with --jaeger: traces asked per service (default 5000)"
    )
    parser.add_argument(
        "--max-bytes",
        type=byte_count,
        default=256 * 2**20,
        help="with --jaeger: bytes of all of Jaeger's answers together (default 256 MiB)",
    )
    parser.add_argument(
        "--timeout", type=seconds, default=30.0, help="with --jaeger: seconds for each request (default 30)"
    )
    parser.set_defaults(handler=run)


def run(ns: argparse.Namespace) -> int:
    from otel_verl.offline.report import report

    before_reading()
    if (ns.folder is None) == (ns.jaeger is None):
        raise CommandError("report: give a run folder or --jaeger URL --run RUN_ID (one of them)", USAGE)
    if ns.jaeger is not None:
        from otel_verl.live.jaeger_report import jaeger_report_command

        return jaeger_report_command(ns)
    return report(ns.folder, ns.output, include_validation=ns.include_validation)
