"""OTLP request headers from a file (``OTEL_VERL_OTLP_HEADERS_FILE``): credentials that stay off Ray.

The SDK's OTLP exporters take their headers (``authorization=Bearer%20<token>``, an API key)
from ``OTEL_EXPORTER_OTLP_HEADERS`` only. A job's Ray workers on other nodes get their
environment from the job's ``runtime_env``, which Ray stores and shows in its dashboard, so
``hooks.ray_launch`` keeps header variables out of it. The path of a file travels instead (a
path is no secret; the file, readable on every node, holds the secret), and each process reads
it when it builds its exporters.

The file holds what ``OTEL_EXPORTER_OTLP_HEADERS`` would: ``key=value`` entries, percent-encoded,
separated by commas or by lines (blank lines and lines starting with ``#`` are skipped), parsed
by the SDK's own rule. Its headers are added to those of ``OTEL_EXPORTER_OTLP_<SIGNAL>_HEADERS``
(or, without it, ``OTEL_EXPORTER_OTLP_HEADERS``); a name in both takes the file's value. They go
to the OTLP exporters of this process only, i.e. to the endpoint they were configured for.

Hostile input: only a regular file is read (a symlink to one is fine: Kubernetes mounts secrets
that way), at most ``MAX_BYTES``, UTF-8 without control characters. Anything else is one warning
naming the path and why, never the content, and the exporters are built without these headers
(the Collector then refuses their data; training goes on). A file that every user of the node can
read is used, with one warning.
"""

from __future__ import annotations

import os
import stat
from functools import lru_cache

from otel_verl._safe import warn_once
from otel_verl.config import settings

MAX_BYTES = 64 * 1024  # far more than any set of headers; a bigger "headers file" is the wrong file
GENERIC_VAR = "OTEL_EXPORTER_OTLP_HEADERS"
# The SDK's OTLP exporters (gRPC and HTTP): what takes ``headers=``.
OTLP_MODULE_PREFIX = "opentelemetry.exporter.otlp.proto."


def _problem(path: str, why: str) -> None:
    warn_once(
        "otlp headers file",
        "OTEL_VERL_OTLP_HEADERS_FILE=%s %s; the OTLP exporters of this process send no headers from it",
        path,
        why,
    )


def _read(path: str) -> str | None:
    """The file's text, or None after one warning (see the module's rules)."""
    try:
        # O_NONBLOCK: a FIFO at that path must not block this process's start
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        _problem(path, f"cannot be opened ({exc.strerror or exc})")
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            _problem(path, "is not a regular file")
            return None
        data = os.read(fd, MAX_BYTES + 1)
    except OSError as exc:
        _problem(path, f"cannot be read ({exc.strerror or exc})")
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        _problem(path, f"is larger than {MAX_BYTES} bytes")
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        _problem(path, "is not UTF-8 text")
        return None
    lines = [line.strip() for line in text.splitlines()]
    entries = [line for line in lines if line and not line.startswith("#")]
    if any(not entry.isprintable() for entry in entries):
        _problem(path, "holds control characters")
        return None
    if info.st_mode & stat.S_IROTH:
        warn_once(
            "otlp headers file readable",
            "OTEL_VERL_OTLP_HEADERS_FILE=%s can be read by every user of this node (chmod 600 it)",
            path,
        )
    return ",".join(entries)


@lru_cache(maxsize=1)
def file_headers() -> dict[str, str] | None:
    """The headers of ``OTEL_VERL_OTLP_HEADERS_FILE`` (read once per process), or None when it is not set.

    An unusable file gives ``{}``: the setting is there, its headers are not."""
    from opentelemetry.util.re import parse_env_headers

    path = settings().otlp_headers_file
    if not path:
        return None
    text = _read(path)
    return {} if text is None else dict(parse_env_headers(text, liberal=True))


def applies(cls: type) -> bool:
    """Whether ``cls`` is one of the SDK's OTLP exporters (the ones that send headers)."""
    return cls.__module__.startswith(OTLP_MODULE_PREFIX)


def headers_for(signal: str) -> dict[str, str] | None:
    """The headers for ``signal``'s OTLP exporter: those of the environment (as the SDK resolves
    them) with the file's on top; None without the setting (the exporter then reads the
    environment itself, as always)."""
    from opentelemetry.util.re import parse_env_headers

    extra = file_headers()
    if extra is None:
        return None
    raw = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_HEADERS") or os.environ.get(GENERIC_VAR)
    headers = dict(parse_env_headers(raw, liberal=True)) if raw else {}
    headers.update(extra)
    return headers
