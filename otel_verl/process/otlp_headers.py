"""OTLP request headers from a file (``OTEL_VERL_OTLP_HEADERS_FILE``): credentials that stay off Ray.

The SDK's OTLP exporters take their headers (``authorization=Bearer%20<token>``, an API key)
from ``OTEL_EXPORTER_OTLP_HEADERS`` only. A job's Ray workers on other nodes get their
environment from the job's ``runtime_env``, which Ray stores and shows in its dashboard, so
``hooks.ray_launch`` keeps header variables out of it. The path of a file travels instead (a
path is no secret; the file, readable on every node, holds the secret), and each process reads
it when it builds its exporters.

The file holds one of these shapes (blank lines and lines starting with ``#`` are skipped, line
ends ``\n`` or ``\r\n``):

* what ``OTEL_EXPORTER_OTLP_HEADERS`` would: ``key=value`` entries, percent-encoded, separated by
  commas or by lines, parsed by the SDK's own rule (``authorization=Bearer%20<token>``);
* ``Name: value`` lines, as in an HTTP request (``Authorization: Bearer <token>``), the value
  taken as it is;
* a JSON object of header names to string values (``{"authorization": "Bearer <token>"}``);
* the token alone on one line, as ``otel-verl stack --token-file`` and the Collector's
  ``bearertokenauth`` take it: sent as ``authorization: Bearer <token>``. A token is RFC 6750's
  ``b64token``: letters, digits and ``-._~+/``, then any number of ``=``. A lone
  ``Bearer <token>`` or ``Basic <credentials>`` line is that ``authorization`` value.

Its headers are added to those of ``OTEL_EXPORTER_OTLP_<SIGNAL>_HEADERS`` (or, without it,
``OTEL_EXPORTER_OTLP_HEADERS``); a name in both takes the file's value. They go to the OTLP
exporters of this process only, i.e. to the endpoint they were configured for.

Hostile input: only a regular file is read (a symlink to one is fine: Kubernetes mounts secrets
that way), at most ``MAX_BYTES``, UTF-8 without control characters. Anything else, a file of no
header or of another shape, is one warning naming the path and why (the shape, a line number),
never the content, and the exporters are built without these headers (the Collector then refuses
their data; training goes on). A file that every user of the node can read is used, with one
warning. The values of ``OTEL_EXPORTER_OTLP_*HEADERS`` are parsed here by the same rule and, like
the file, never logged: the SDK's own warning for a malformed entry (which quotes it) is shown
with the entry replaced (``hide_header_values``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from functools import lru_cache

from otel_verl._safe import warn_once
from otel_verl.config import settings

MAX_BYTES = 64 * 1024  # far more than any set of headers; a bigger "headers file" is the wrong file
GENERIC_VAR = "OTEL_EXPORTER_OTLP_HEADERS"
# The SDK's OTLP exporters (gRPC and HTTP): what takes ``headers=``.
OTLP_MODULE_PREFIX = "opentelemetry.exporter.otlp.proto."
# The SDK's header parser (opentelemetry.util.re): its warning quotes a malformed entry.
SDK_HEADERS_LOGGER = "opentelemetry.util.re"
HIDDEN = "[not shown: it may hold a credential]"

# The OTLP exporter spec's rule for an OTEL_EXPORTER_OTLP_HEADERS entry, as the SDK's liberal parse
# takes it (opentelemetry.util.re): a name of RFC 7230 token characters, ``=``, a value of printable
# ASCII without ``,`` ``;`` ``"`` ``\``. Matched here first so the SDK never sees, and never logs, a
# malformed entry.
_NAME = r"[\x21\x23-\x27\x2a\x2b\x2d\x2e\x30-\x39\x41-\x5a\x5e-\x7a\x7c\x7e]+"
_ENTRY = re.compile(rf"[ \t]*{_NAME}[ \t]*=[ \t]*[\x20\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*[ \t]*")
_ENTRY_SEPARATOR = re.compile(r"[ \t]*,[ \t]*")
_COLON_LINE = re.compile(rf"({_NAME})[ \t]*:[ \t]*(.*)")  # Name: value, the HTTP shape
_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")  # RFC 6750's b64token: what a bearer token is made of
_CREDENTIALS = re.compile(r"(?i:bearer|basic)[ \t]+[A-Za-z0-9._~+/-]+=*")  # an Authorization value alone
_NAME_ONLY = re.compile(_NAME)


def _problem(path: str, why: str) -> None:
    warn_once(
        "otlp headers file",
        "OTEL_VERL_OTLP_HEADERS_FILE=%s %s; the OTLP exporters of this process send no headers from it",
        path,
        why,
    )


@dataclass(frozen=True)
class Loaded:
    """What a headers file gave: its headers, or why none (a sentence without its content)."""

    headers: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    readable_by_all: bool = False


def _read(path: str) -> tuple[str | None, str | None, bool]:
    """The file's text or why not, and whether every user can read it (the module's rules)."""
    try:
        # O_NONBLOCK: a FIFO at that path must not block this process's start
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return None, f"cannot be opened ({exc.strerror or type(exc).__name__})", False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, "is not a regular file", False
        data = os.read(fd, MAX_BYTES + 1)
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or type(exc).__name__})", False
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        return None, f"is larger than {MAX_BYTES} bytes", False
    try:
        return data.decode("utf-8"), None, bool(info.st_mode & stat.S_IROTH)
    except UnicodeDecodeError:
        return None, "is not UTF-8 text", False


def load(path: str) -> Loaded:
    """The headers of the file at ``path``, or why it gives none; logs nothing (``doctor``)."""
    text, why, readable_by_all = _read(path)
    if text is None:
        return Loaded(problem=why)
    found = parse(text)
    if isinstance(found, str):
        return Loaded(problem=found, readable_by_all=readable_by_all)
    return Loaded(headers=found, readable_by_all=readable_by_all)


def env_entries(text: str) -> tuple[dict[str, str], int]:
    """The ``key=value`` entries of ``text`` (comma-separated) by the SDK's rule, and how many
    entries did not fit it (left out: the SDK would have left them out too, with a warning that
    quotes them)."""
    from opentelemetry.util.re import parse_env_headers

    headers: dict[str, str] = {}
    bad = 0
    for entry in _ENTRY_SEPARATOR.split(text):
        if not entry.strip():
            continue
        if _ENTRY.fullmatch(entry.strip()):
            headers.update(parse_env_headers(entry.strip(), liberal=True))
        else:
            bad += 1
    return headers, bad


def _json_headers(text: str) -> dict[str, str] | str:
    """The headers of a JSON object of names to strings, or why not (never its content)."""
    try:
        data = json.loads(text)
    except ValueError:  # its message quotes no content, but a position is no use either
        return "is not valid JSON"
    if not isinstance(data, dict) or not data:
        return "is JSON but not an object of header names to values"
    headers = {}
    for name, value in data.items():
        if not _NAME_ONLY.fullmatch(name) or not isinstance(value, str) or not value.isprintable():
            return "is a JSON object whose entries are not all a header name to a string of one line"
        headers[name.lower()] = value.strip()
    return headers


def parse(text: str) -> dict[str, str] | str:
    """The headers of a headers file's ``text`` (the module's shapes), or why it has none: a
    sentence that names the shape or a line number, never the content."""
    if text.lstrip().startswith("{"):
        return _json_headers(text)
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)]
    entries = [(n, line) for n, line in lines if line and not line.startswith("#")]
    if not entries:
        return "holds no header (it is empty or only comments)"
    if any(not line.isprintable() for _, line in entries):
        return "holds control characters"
    if len(entries) == 1 and _TOKEN.fullmatch(entries[0][1]):
        # a lone word: the bearer token itself, as `stack --token-file` and bearertokenauth take it
        return {"authorization": f"Bearer {entries[0][1]}"}
    if len(entries) == 1 and _CREDENTIALS.fullmatch(entries[0][1]):
        return {"authorization": entries[0][1]}
    headers: dict[str, str] = {}
    for n, line in entries:
        colon = _COLON_LINE.fullmatch(line)
        if colon:
            headers[colon.group(1).lower()] = colon.group(2).strip()
            continue
        found, bad = env_entries(line)
        if bad:
            return f"line {n} is neither `name=value` entries, `Name: value`, JSON nor a lone token"
        headers.update(found)
    return headers


@lru_cache(maxsize=1)
def file_headers() -> dict[str, str] | None:
    """The headers of ``OTEL_VERL_OTLP_HEADERS_FILE`` (read once per process), or None when it is not set.

    An unusable file gives ``{}`` after one warning: the setting is there, its headers are not."""
    path = settings().otlp_headers_file
    if not path:
        return None
    loaded = load(path)
    if loaded.readable_by_all:
        warn_once(
            "otlp headers file readable",
            "OTEL_VERL_OTLP_HEADERS_FILE=%s can be read by every user of this node (chmod 600 it)",
            path,
        )
    if loaded.problem is not None:
        _problem(path, loaded.problem)
    return loaded.headers


def applies(cls: type) -> bool:
    """Whether ``cls`` is one of the SDK's OTLP exporters (the ones that send headers)."""
    return cls.__module__.startswith(OTLP_MODULE_PREFIX)


def headers_for(signal: str) -> dict[str, str] | None:
    """The headers for ``signal``'s OTLP exporter: those of the environment (as the SDK resolves
    them) with the file's on top; None without the setting (the exporter then reads the
    environment itself, as always)."""
    extra = file_headers()
    if extra is None:
        return None
    var = f"OTEL_EXPORTER_OTLP_{signal.upper()}_HEADERS"
    var = var if os.environ.get(var) else GENERIC_VAR
    headers, bad = env_entries(os.environ.get(var) or "")
    if bad:
        warn_once(
            f"otlp headers {var}",
            "%s has %d entries that are not `name=value` (not shown: they may hold a credential); they are not sent",
            var,
            bad,
        )
    headers.update(extra)
    return headers


class _HideValues(logging.Filter):
    """Replaces what the SDK's header parser quotes with ``HIDDEN``; the record still says why."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            record.args = tuple(HIDDEN for _ in record.args) if isinstance(record.args, tuple) else (HIDDEN,)
        return True


_HIDE = _HideValues()


def hide_header_values() -> None:
    """Keep the SDK's header parser from logging a header (once per process; ``exporters``)."""
    log = logging.getLogger(SDK_HEADERS_LOGGER)
    if _HIDE not in log.filters:
        log.addFilter(_HIDE)
