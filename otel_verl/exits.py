"""How an ``otel-verl`` command ends: its exit codes, the error that stops it, the warnings it gives.

Every command follows one rule (docs/troubleshooting.md, "Exit codes"): its normal output goes to stdout;
what is wrong goes to stderr as one line ``otel-verl <command>: ...``, never a traceback; and
the exit code says which case it was. Whatever a command prints goes through ``say``: text from a
run folder (names, file names) reaches the terminal escaped (``printable.printable``).
"""

from __future__ import annotations

import sys
from typing import TextIO

from otel_verl.printable import MAX_LINE_CHARS, printable

OK = 0  # done (anything left out was named on stderr)
PROBLEM = 1  # the command ran and found a problem: nothing readable, a refused request, a doctor check
USAGE = 2  # the command line or the environment is wrong: an unknown option, a bad value, a missing path


class CommandError(Exception):
    """Stops a command: ``message`` is the one line printed on stderr, ``code`` the exit code."""

    def __init__(self, message: str, code: int = PROBLEM) -> None:
        super().__init__(message)
        self.code = code


def say(line: str, file: TextIO | None = None, flush: bool = False) -> None:
    """Print one line (default stdout) as ``printable.printable`` shows it: nothing in it reaches the
    terminal as a control sequence, and it is at most ``MAX_LINE_CHARS`` long."""
    print(printable(line, MAX_LINE_CHARS), file=sys.stdout if file is None else file, flush=flush)


def warn(command: str, message: str, err: TextIO | None = None) -> None:
    """One ``otel-verl <command>: warning: ...`` line on stderr (the command goes on)."""
    say(f"otel-verl {command}: warning: {message}", sys.stderr if err is None else err, flush=True)
