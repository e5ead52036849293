"""``otel-verl summary DIR``: what a run wrote with the ``otlp_json_file`` exporters, as a few lines."""

from __future__ import annotations

import argparse
from pathlib import Path

from otel_verl.cli.options import EPILOG
from otel_verl.cli.run_folder import add_include_validation, before_reading


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("summary", help="summarise a run's OTLP JSON files", epilog=EPILOG)
    parser.add_argument("folder", type=Path, help="the run's OTEL_VERL_FILE_DIR")
    add_include_validation(parser)
    parser.set_defaults(handler=run)


def run(ns: argparse.Namespace) -> int:
    from otel_verl.offline.summary import summary  # each command imports only its own module

    before_reading()
    return summary(ns.folder, include_validation=ns.include_validation)
