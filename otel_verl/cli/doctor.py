"""``otel-verl doctor``: what the instrumentation would do in this environment (problems first)."""

from __future__ import annotations

import argparse

from otel_verl.cli.options import EPILOG


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "doctor", help="check what the instrumentation would do in this environment (problems first)", epilog=EPILOG
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="also list every check that passed, and notes")
    parser.set_defaults(handler=run)


def run(ns: argparse.Namespace) -> int:
    from otel_verl.live.doctor import doctor

    return doctor(verbose=ns.verbose)
