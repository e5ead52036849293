"""Text taken from a run folder, made safe to show: bounded, and with nothing a terminal obeys.

A run folder is written by other people's jobs, so a span name, an attribute value or a file name
can hold anything: escape sequences that retitle the terminal, clear the screen or hide text, the
bidirectional overrides that show text in another order than it is, a file name's undecodable
bytes (Python's lone surrogates, which cannot even be encoded to print them), or a megabyte of
text. ``printable`` is the one rule for all of it: both the terminal output of the commands and
the report page (``report.markup.esc``) show file text through it.
"""

from __future__ import annotations

import re

MAX_CHARS = 500  # of one value as a table cell, a title or a name shows it
MAX_LINE_CHARS = 4000  # of one line a command prints (a table row, a warning naming skipped files)
# C0 controls, DEL and C1 controls (terminal escape sequences start with ESC or CSI), the line and
# paragraph separators, the bidirectional embeddings/overrides/isolates, and lone surrogates.
_UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSHOWN_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def bounded(value: object, limit: int = MAX_CHARS) -> str:
    """``str(value)``, cut to ``limit`` characters with a note of how many were left out."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def printable(value: object, limit: int = MAX_CHARS, newlines: bool = False) -> str:
    """``value`` as text that shows as itself: at most ``limit`` characters (``bounded``), and each
    control, separator, bidirectional or surrogate character written as its escape (``\\x1b``,
    ``\\u202e``, ``\\udcff``). ``newlines`` keeps line breaks (a block of stack traces)."""
    return (_UNSHOWN_BUT_NEWLINE if newlines else _UNSHOWN).sub(_escape, bounded(value, limit))
