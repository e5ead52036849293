"""What the commands' parsers share: the parser whose errors are one line, the exit codes' epilog,
and the checked number types of options (seconds, bytes, hours, counts)."""

from __future__ import annotations

import argparse
import math
from typing import NoReturn

from otel_verl.exits import USAGE

EPILOG = "exit codes: 0 ok, 1 problem found (named on stderr), 2 usage error"
MAX_TIMEOUT_S = 86400.0  # a day per request: beyond it the socket layer cannot represent the deadline


class Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line (argparse prints the usage block first); the
    sub-parsers of a command are of this class too (argparse makes them of their parent's)."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_TIMEOUT_S:  # also rejects NaN
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0 and up to {MAX_TIMEOUT_S:g}")
    return value


def byte_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1024:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of bytes of at least 1024")
    return value


def hours(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 24 * 366:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of hours above 0 and up to a year")
    return value


def count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to 1000000")
    return value
