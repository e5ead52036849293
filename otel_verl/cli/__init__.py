"""``otel-verl``: command-line tools around a run's telemetry, one module per command.

``main`` builds the parser from the commands' modules, each of which registers its own
sub-parser (``register``) and the function that runs it (the sub-parser's default ``handler``);
the work itself is in ``otel_verl.offline`` (stored telemetry), ``otel_verl.live`` and ``otel_verl.stack``
(live things), imported only by the command that needs it:

* ``summary``: ``otel-verl summary DIR`` prints what a run wrote with the ``otlp_json_file`` exporters;
* ``report``: ``otel-verl report DIR [-o OUT.html]`` renders the same files as one self-contained
  HTML page (``--jaeger URL --run RUN_ID``: a live run's traces from the stack's Jaeger instead);
* ``replay``: ``otel-verl replay DIR --endpoint URL`` sends them to an OTLP/HTTP endpoint
  (``--spool DIR``: what verl processes left in their on-disk spools);
* ``doctor``: ``otel-verl doctor`` checks what the instrumentation would do here;
* ``stack``: ``otel-verl stack up|down|status`` runs the ops kit's backends as local processes (no
  Docker), or a node's Collector agent or a gateway of several nodes (``up --role``);
  ``stack configs DIR`` writes the kit's configs out, ``stack build`` builds the backends;
* ``options``: what the parsers share (one-line errors, the exit codes' epilog, checked numbers);
* ``run_folder``: what the commands that read a run folder share.

Whatever goes wrong ends as one ``otel-verl <command>: ...`` line on stderr and an exit code
(``otel_verl.exits``: 0 ok, 1 problem found, 2 usage error), never as a traceback; text from a run
folder in it is escaped (``otel_verl.printable``).
"""

from __future__ import annotations

import argparse
import os
import sys

from otel_verl.cli import doctor, replay, report, stack, summary
from otel_verl.cli.options import EPILOG, Parser
from otel_verl.exits import OK, PROBLEM, USAGE, CommandError, say

COMMANDS = (summary, report, replay, doctor, stack)  # in the order --help lists them


def parser() -> argparse.ArgumentParser:
    """The ``otel-verl`` parser: one sub-parser per module of ``COMMANDS``."""
    top = Parser(
        prog="otel-verl",
        description="Tools around the telemetry of verl runs instrumented by otel-verl.",
        epilog=EPILOG,
    )
    # metavar: argparse names the dest in "required" errors; COMMAND is what a user would type.
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(commands)
    return top


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` names; its exit code (``--help`` exits with 0)."""
    try:
        ns = parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code == USAGE:  # argparse's one line is out (options.Parser): the code, as for every usage error
            return USAGE
        raise
    where = f"otel-verl {ns.command}"
    try:
        return ns.handler(ns)
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
