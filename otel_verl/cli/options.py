"""What the commands' parsers share: the parser whose errors are one line, the exit codes' epilog,
and the checked number types of options (seconds, bytes, hours, counts)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any, NoReturn

from otel_verl.exits import USAGE

EPILOG = "exit codes: 0 ok, 1 problem found (named on stderr), 2 usage error"
MAX_TIMEOUT_S = 86400.0  # a day per request: beyond it the socket layer cannot represent the deadline


class Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line (argparse prints the usage block first); the
    sub-parsers of a command are of this class too (argparse makes them of their parent's)."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _checked(convert: Callable[[str], Any], bad: Any, ok: Callable[[Any], bool], what: str) -> Callable[[str], Any]:
    """An option's type: ``convert`` (``bad`` when it cannot), then ``ok`` or one line saying ``what``."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            value = bad
        if not ok(value):  # NaN fails every comparison
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    return parse


seconds = _checked(
    float, math.nan, lambda v: 0 < v <= MAX_TIMEOUT_S, f"a number of seconds above 0 and up to {MAX_TIMEOUT_S:g}"
)
byte_count = _checked(int, 0, lambda v: v >= 1024, "a number of bytes of at least 1024")
hours = _checked(float, math.nan, lambda v: 0 < v <= 24 * 366, "a number of hours above 0 and up to a year")
count = _checked(int, 0, lambda v: 1 <= v <= 1_000_000, "a whole number from 1 to 1000000")
