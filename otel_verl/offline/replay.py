"""``otel-verl replay RUN_DIR --endpoint URL``: send a run's stored telemetry to an OTLP/HTTP endpoint.

Each line the ``otlp_json_file`` exporters write is one OTLP ``Export{Trace,Metrics,Logs}ServiceRequest``
in OTLP JSON, exactly the body OTLP/HTTP takes with ``Content-Type: application/json``: every line
of ``traces-*.jsonl`` is POSTed unchanged to ``<URL>/v1/traces``, ``metrics-*`` to ``/v1/metrics``,
``logs-*`` to ``/v1/logs``. For a run on a cluster without a route to the backend: export to files,
copy the folder out, replay it (or point a Collector's ``otlpjsonfile`` receiver at it).

Endpoint and headers default to the SDK's variables: the OTLP/HTTP URL of each signal as
``otel_verl.offline.endpoints`` derives it (whatever ``OTEL_EXPORTER_OTLP_PROTOCOL`` says: replay
speaks OTLP/HTTP only); ``OTEL_EXPORTER_OTLP_HEADERS`` / ``OTEL_EXPORTER_OTLP_<SIGNAL>_HEADERS``
(``k=v,k2=v2``, values percent-decoded). ``--endpoint`` (a base URL) and ``--headers`` replace them.

Throttling answers (429, 502, 503, 504) are retried twice; any other HTTP error fails that request;
a connection error (refused, timed out) fails the rest of that signal, so a dead endpoint costs at
most one timeout per signal. The OTLP ``partialSuccess`` counts of rejected items are reported.
A stored line above ``--max-request-bytes`` (default: what a Collector accepts by default) is split
into several requests, each with its items' resource and scope. Lines the reader cannot use are
skipped and named on stderr. Exit code 0 only when every request was accepted and nothing was
rejected; 2 when an endpoint or header setting is malformed (``otel_verl.offline.errors``).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from otel_verl.offline import endpoints
from otel_verl.offline.errors import USAGE, CommandError, warn
from otel_verl.offline.otlp_files import (
    REQUEST_KEYS,
    SIGNALS,
    Skipped,
    check_request,
    count_items,
    requests,
    run_folder,
    signal_files,
    size,
)

RETRY_STATUS = (429, 502, 503, 504)
RETRIES = 2
ITEMS = {"traces": "spans", "metrics": "data points", "logs": "log records"}
REJECTED = {"traces": "rejectedSpans", "metrics": "rejectedDataPoints", "logs": "rejectedLogRecords"}
# The OpenTelemetry Collector's OTLP/HTTP receiver refuses bodies above its confighttp
# ``max_request_body_size``, whose default is 20 MiB (``defaultMaxRequestBodySize`` in
# collector/config/confighttp/confighttp.go); larger stored lines are split to stay under it.
MAX_REQUEST_BYTES = 20 * 1024 * 1024
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name (RFC 9110 token)


def parse_headers(text: str | None) -> dict[str, str]:
    """``k=v,k2=v2`` (the ``OTEL_EXPORTER_OTLP_HEADERS`` format) -> dict; values percent-decoded.

    ValueError for an entry that is not ``key=value``; its text is not in the message (headers
    carry tokens, and a token pasted without its key is still a token).
    """
    out: dict[str, str] = {}
    for n, item in enumerate((text or "").split(","), 1):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"entry {n} is not key=value (values not shown)")
        key, value = urllib.parse.unquote(key.strip()), urllib.parse.unquote(value.strip())
        if not _TOKEN.fullmatch(key):
            raise ValueError(f"entry {n}: the header name is not an HTTP token (values not shown)")
        if any(c in value for c in "\r\n\0") or not value.isascii() and not _latin1(value):
            raise ValueError(f"entry {n}: the value has a character an HTTP header cannot carry (values not shown)")
        out[key] = value
    return out


def _latin1(text: str) -> bool:
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def signal_url(signal: str, endpoint: str | None, env: Mapping[str, str]) -> str:
    """Where ``signal``'s lines go: ``endpoint`` (a base URL) or the SDK's variables, always OTLP/HTTP;
    a ``CommandError`` (usage) when that is not a URL, naming the flag or variable."""
    resolved = endpoints.resolve(signal, env, protocol=endpoints.HTTP, base=endpoint)
    problem = resolved.problem(endpoints.HTTP)
    if problem:
        raise CommandError(problem, USAGE)
    return resolved.url


def signal_headers(signal: str, headers: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """The headers of ``signal``'s requests; a ``CommandError`` (usage) naming a malformed source."""
    sources = (
        [("--headers", headers)]
        if headers is not None
        else [
            ("OTEL_EXPORTER_OTLP_HEADERS", env.get("OTEL_EXPORTER_OTLP_HEADERS")),
            (endpoints.signal_variable("HEADERS", signal), env.get(endpoints.signal_variable("HEADERS", signal))),
        ]
    )
    out: dict[str, str] = {}
    for source, text in sources:
        try:
            out.update(parse_headers(text))
        except ValueError as exc:
            raise CommandError(f"{source}: {exc}", USAGE) from None
    return out


def _json(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def split_request(signal: str, batch: dict, limit: int) -> list[tuple[bytes, int]]:
    """(body, items) requests of at most ``limit`` bytes carrying ``batch``'s items, each under its
    own resource and scope; an item that alone is above ``limit`` goes alone."""
    rkey, skey, ikey = REQUEST_KEYS[signal]
    bodies: list[tuple[bytes, int]] = []
    empty = len(_json({rkey: []}))
    resources: list[dict] = []  # of the request being filled
    size, count = empty, 0

    def flush() -> None:
        nonlocal resources, size, count
        if resources:
            bodies.append((_json({rkey: resources}), count))
        resources, size, count = [], empty, 0

    for r in batch[rkey]:
        r_shell = {k: v for k, v in r.items() if k != skey}
        for sc in r.get(skey, []):
            sc_shell = {k: v for k, v in sc.items() if k != ikey}
            envelope = len(_json({**r_shell, skey: [{**sc_shell, ikey: []}]})) + 1
            items: list | None = None  # this scope's list in the request being filled
            for item in sc.get(ikey, []):
                cost = len(_json(item)) + 1
                if items is None or size + cost > limit:
                    if resources and size + envelope + cost > limit:
                        flush()
                    items = []
                    resources.append({**r_shell, skey: [{**sc_shell, ikey: items}]})
                    size += envelope
                items.append(item)
                size += cost
                count += count_items(signal, {rkey: [{skey: [{ikey: [item]}]}]})
    flush()
    return bodies


@dataclass
class SignalResult:
    signal: str
    url: str
    files: int = 0
    requests: int = 0  # accepted
    items: int = 0  # in accepted requests
    failed: int = 0  # requests refused or not sent after a connection error
    rejected: int = 0  # partialSuccess rejected items
    split_lines: int = 0  # stored lines above the request limit
    split_requests: int = 0  # the requests they became
    oversized: int = 0  # requests still above the limit (one item alone is larger)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.rejected


def _post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="POST")
    for k, v in headers.items():
        request.add_header(k, v)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - the user's endpoint
        return response.status, response.read()


def _rejected(signal: str, body: bytes) -> tuple[int, str]:
    try:
        partial = json.loads(body or b"{}").get("partialSuccess") or {}
    except (ValueError, AttributeError):
        return 0, ""
    return int(partial.get(REJECTED[signal], 0) or 0), str(partial.get("errorMessage", "") or "")


def replay_signal(
    folder: Path,
    signal: str,
    url: str,
    headers: dict[str, str],
    timeout: float,
    retry_wait: float = 0.5,
    skipped: Skipped | None = None,
    max_request_bytes: int = MAX_REQUEST_BYTES,
) -> SignalResult:
    result = SignalResult(signal, url)
    result.files = len(signal_files(folder, signal))
    skipped = Skipped() if skipped is None else skipped
    dead = False
    for path, number, line, batch in requests(folder, signal, skipped):
        try:
            items = check_request(signal, batch)
        except ValueError as exc:
            skipped.line(path, number, str(exc))
            continue
        body = line.encode("utf-8")
        bodies = [(body, items)]
        if len(body) > max_request_bytes:
            try:
                bodies = split_request(signal, batch, max_request_bytes)
            except (LookupError, TypeError, ValueError, AttributeError):
                skipped.line(path, number, f"not an OTLP {signal} request")
                continue
            result.split_lines += 1
            result.split_requests += len(bodies)
            result.oversized += sum(1 for b, _ in bodies if len(b) > max_request_bytes)
        for body, n in bodies:
            if dead:
                result.failed += 1
                continue
            dead = _send(result, path, url, body, n, headers, timeout, retry_wait)
    return result


def _send(
    result: SignalResult,
    path: Path,
    url: str,
    body: bytes,
    items: int,
    headers: dict[str, str],
    timeout: float,
    retry_wait: float,
) -> bool:
    """POST one request, retrying throttling answers; True when the endpoint is unreachable."""
    signal = result.signal
    for attempt in range(RETRIES + 1):
        try:
            _, answer = _post(url, body, headers, timeout)
        except urllib.error.HTTPError as exc:
            if exc.code in RETRY_STATUS and attempt < RETRIES:
                time.sleep(retry_wait * (attempt + 1))
                continue
            detail = exc.read()[:300].decode("utf-8", "replace").strip()
            result.failed += 1
            result.errors.append(f"{path.name}: HTTP {exc.code} {exc.reason}{': ' + detail if detail else ''}")
        except (OSError, http.client.HTTPException) as exc:  # URLError, refused, timed out, a broken answer
            reason = getattr(exc, "reason", exc)
            result.failed += 1
            result.errors.append(f"{endpoints.shown(url)}: {reason}")
            return True
        else:
            result.requests += 1
            result.items += items
            rejected, message = _rejected(signal, answer)
            if rejected:
                result.rejected += rejected
                result.errors.append(f"{path.name}: {rejected} {ITEMS[signal]} rejected {message}".strip())
        return False
    return False


def replay(
    folder: str | Path,
    endpoint: str | None = None,
    headers: str | None = None,
    timeout: float = 10.0,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    max_request_bytes: int = MAX_REQUEST_BYTES,
) -> int:
    """The ``otel-verl replay`` command: 0 when everything was accepted, else a ``CommandError``."""
    out = sys.stdout if out is None else out
    folder = run_folder(folder)
    env = os.environ if env is None else env
    plan = [(sig, signal_url(sig, endpoint, env), signal_headers(sig, headers, env)) for sig in SIGNALS]
    skipped = Skipped()
    results = []
    mib = size(max_request_bytes)
    for sig, url, hdrs in plan:
        if not signal_files(folder, sig):
            print(f"{sig:8s} no {sig}-*.jsonl files", file=out)
            continue
        r = replay_signal(folder, sig, url, hdrs, timeout, skipped=skipped, max_request_bytes=max_request_bytes)
        results.append(r)
        line = (
            f"{sig:8s} -> {endpoints.shown(url)}: {r.items} {ITEMS[sig]} sent in {r.requests} requests "
            f"from {r.files} files"
        )
        if r.split_lines:
            line += f"; {r.split_lines} stored lines above {mib} split into {r.split_requests} requests"
        if r.failed:
            line += f"; {r.failed} requests failed"
        if r.rejected:
            line += f"; {r.rejected} {ITEMS[sig]} rejected by the endpoint"
        print(line, file=out)
        for error in r.errors[:5]:
            print(f"         {error}", file=out)
        if len(r.errors) > 5:
            print(f"         ... {len(r.errors) - 5} more errors", file=out)
        if r.failed and urllib.parse.urlsplit(url).port == endpoints.GRPC_PORT:
            print("         (4317 is the OTLP/gRPC port; replay speaks OTLP/HTTP, usually on 4318)", file=out)
    out.flush()
    oversized = sum(r.oversized for r in results)
    if oversized:
        warn("replay", f"{oversized} requests hold one item larger than {mib} alone; the endpoint may refuse them", err)
    if skipped:
        warn("replay", skipped.describe(), err)
    total = sum(r.items for r in results)
    failed = sum(r.failed for r in results)
    rejected = sum(r.rejected for r in results)
    if failed or rejected:
        what = [f"{failed} requests failed"] if failed else []
        what += [f"{rejected} items rejected"] if rejected else []
        raise CommandError(f"{' and '.join(what)} ({total} items replayed from {folder}; details above)")
    print(f"ok: {total} items replayed from {folder}", file=out)
    return 0
