"""``otel-verl replay RUN_DIR --endpoint URL``: send a run's stored telemetry to an OTLP/HTTP endpoint.

Each line the ``otlp_json_file`` exporters write is one OTLP ``Export{Trace,Metrics,Logs}ServiceRequest``
in OTLP JSON, exactly the body OTLP/HTTP takes with ``Content-Type: application/json``: every line
of ``traces-*.jsonl`` is POSTed unchanged to ``<URL>/v1/traces``, ``metrics-*`` to ``/v1/metrics``,
``logs-*`` to ``/v1/logs``, and so are the ``distro-<signal>-*`` files (``process.their_files``).
For a run on a cluster without a route to the backend: export to files, copy the folder out,
replay it (or point a Collector's ``otlpjsonfile`` receiver at it).

Endpoint and headers default to the SDK's variables: the OTLP/HTTP URL of each signal as
``otel_verl.endpoints`` derives it (whatever ``OTEL_EXPORTER_OTLP_PROTOCOL`` says: replay
speaks OTLP/HTTP only); ``OTEL_EXPORTER_OTLP_HEADERS`` / ``OTEL_EXPORTER_OTLP_<SIGNAL>_HEADERS``
(``k=v,k2=v2``, values percent-decoded). ``--endpoint`` (a base URL) and ``--headers`` replace them.

Every request goes through ``otel_verl.offline.http_post``, which treats the endpoint's answers as
hostile: ``--timeout`` is a wall-clock deadline for each request, retries and their waits included
(an answer that trickles in is cut there); at most 64 KiB of an answer is read; a redirect (any
3xx) fails the request and says where it pointed, and is never followed, so the headers and their
credentials go to the configured URL only; proxies as ``urllib.request`` finds them
(``http_proxy``, ``https_proxy``, ``no_proxy``). Text from an answer is printed escaped, on one line.

Throttling answers (429, 502, 503, 504) are retried twice, after the ``Retry-After`` they ask for
(else a backoff) when that wait fits in the deadline; a longer one fails the request at once, saying
so. Any other HTTP error fails that request; no answer at all (refused, not resolved, timed out,
cut off) fails the rest of that signal, so a dead endpoint costs at most one timeout per signal.
The OTLP ``partialSuccess`` counts of rejected items are reported, read by protobuf's JSON mapping;
an accepted request whose answer cannot say (a malformed or negative count, an answer above the
read limit) is counted as delivered and its answer as unreadable. A stored line above
``--max-request-bytes`` (default: what a Collector accepts by default) is split into several
requests, each with its items' resource and scope. Lines the reader cannot use are skipped and
named on stderr. Exit code 0 only when every request was accepted, nothing was rejected and every
answer was readable; 2 when an endpoint or header setting is malformed (``otel_verl.exits``).
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from otel_verl import endpoints
from otel_verl.exits import USAGE, CommandError, warn
from otel_verl.offline.http_post import Answer, NoAnswer, Poster, printable
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
from otel_verl.process import point_identity

RETRY_STATUS = (429, 502, 503, 504)
RETRIES = 2
ITEMS = {"traces": "spans", "metrics": "data points", "logs": "log records"}
REJECTED = {"traces": "rejectedSpans", "metrics": "rejectedDataPoints", "logs": "rejectedLogRecords"}
REJECTED_FIELDS = {"traces": "rejected_spans", "metrics": "rejected_data_points", "logs": "rejected_log_records"}
RESPONSES = {
    "traces": ExportTraceServiceResponse,
    "metrics": ExportMetricsServiceResponse,
    "logs": ExportLogsServiceResponse,
}
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
    failed: int = 0  # requests refused, redirected, unanswered, or not sent after an unanswered one
    rejected: int = 0  # partialSuccess rejected items
    unread: int = 0  # accepted requests whose answer cannot say what was rejected
    split_lines: int = 0  # stored lines above the request limit
    split_requests: int = 0  # the requests they became
    oversized: int = 0  # requests still above the limit (one item alone is larger)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.rejected and not self.unread


def partial_success(signal: str, answer: Answer) -> tuple[int, str]:
    """(items rejected, the endpoint's message) from a 2xx answer's OTLP ``partialSuccess``, read by
    protobuf's JSON mapping; ValueError (one printable line) when that answer cannot say.

    A body that is empty or not a JSON object (a proxy's text, a protobuf answer) rejects nothing.
    """
    if not answer.complete:
        raise ValueError(f"its answer is longer than {size(len(answer.body))} (partialSuccess not read)")
    try:
        obj = json.loads(answer.body or b"{}")
    except ValueError:  # also UnicodeDecodeError
        return 0, ""
    if not isinstance(obj, dict):
        return 0, ""
    partial = obj.get("partialSuccess")
    if partial is not None and not isinstance(partial, dict):
        raise ValueError("its partialSuccess is not a JSON object")
    try:
        message = json_format.ParseDict(obj, RESPONSES[signal](), ignore_unknown_fields=True).partial_success
    except json_format.ParseError as exc:
        raise ValueError(f"its partialSuccess is not OTLP: {printable(str(exc), 200)}") from None
    count = getattr(message, REJECTED_FIELDS[signal])
    if count < 0:
        raise ValueError(f"its partialSuccess {REJECTED[signal]} is {count}, not a count")
    return count, printable(message.error_message)


def replay_signal(
    poster: Poster,
    folder: Path,
    signal: str,
    url: str,
    headers: dict[str, str],
    timeout: float,
    skipped: Skipped | None = None,
    max_request_bytes: int = MAX_REQUEST_BYTES,
) -> SignalResult:
    result = SignalResult(signal, url)
    result.files = len(signal_files(folder, signal, theirs=True))
    skipped = Skipped() if skipped is None else skipped
    # ours replaces the user's, whatever its case (HTTP header names are case-insensitive)
    headers = {k: v for k, v in headers.items() if k.lower() != "content-type"} | {"Content-Type": "application/json"}
    dead = False
    for path, number, line, batch in requests(folder, signal, skipped, theirs=True):
        try:
            items = check_request(signal, batch)
        except ValueError as exc:
            skipped.line(path, number, str(exc))
            continue
        body = line.encode("utf-8")
        if signal == "metrics" and point_identity.stamp_json(batch):  # the run's identity on every point
            body = json.dumps(batch, separators=(",", ":")).encode("utf-8")
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
            dead = _send(poster, result, path, url, body, n, headers, timeout)
    return result


def _send(
    poster: Poster,
    result: SignalResult,
    path: Path,
    url: str,
    body: bytes,
    items: int,
    headers: dict[str, str],
    timeout: float,
) -> bool:
    """POST one request (``otel_verl.offline.http_post``: deadline, bounded answer, throttling
    retried, no redirect followed); True when the endpoint gave no answer."""
    try:
        answer = poster.post(url, body, headers, timeout)
    except NoAnswer as exc:
        result.failed += 1
        result.errors.append(f"{endpoints.shown(url)}: {exc}")
        return True
    status = f"{path.name}: HTTP {answer.status} {printable(answer.reason, 80)}".rstrip()
    if not answer.ok:
        result.failed += 1
        if answer.location is not None:
            where = endpoints.shown(printable(answer.location, 200))
            result.errors.append(
                f"{status}: redirected to {where} (not followed: replay sends only to the configured URL)"
            )
        elif 300 <= answer.status < 400:
            result.errors.append(f"{status}: a redirect without a Location (not followed)")
        elif answer.retry_after is not None:
            result.errors.append(
                f"{status}: the endpoint asked to retry after {answer.retry_after:g} s, past the {timeout:g} s deadline"
            )
        else:
            detail = answer.excerpt()
            result.errors.append(f"{status}{': ' + detail if detail else ''}")
        return False
    result.requests += 1
    result.items += items
    try:
        rejected, message = partial_success(result.signal, answer)
    except ValueError as exc:
        result.unread += 1
        result.errors.append(f"{status}: accepted, but {exc}")
        return False
    if rejected:
        result.rejected += rejected
        result.errors.append(f"{path.name}: {rejected} {ITEMS[result.signal]} rejected {message}".strip())
    return False


def print_errors(errors: list[str], out: TextIO, shown: int = 5) -> None:
    """The first ``shown`` errors of a signal, indented under its line, and how many more there were."""
    for error in errors[:shown]:
        print(f"         {error}", file=out)
    if len(errors) > shown:
        print(f"         ... {len(errors) - shown} more errors", file=out)


def _print_result(r: SignalResult, mib: str, out: TextIO) -> None:
    sig = r.signal
    line = (
        f"{sig:8s} -> {endpoints.shown(r.url)}: {r.items} {ITEMS[sig]} sent in {r.requests} requests "
        f"from {r.files} files"
    )
    if r.split_lines:
        line += f"; {r.split_lines} stored lines above {mib} split into {r.split_requests} requests"
    if r.failed:
        line += f"; {r.failed} requests failed"
    if r.rejected:
        line += f"; {r.rejected} {ITEMS[sig]} rejected by the endpoint"
    if r.unread:
        line += f"; {r.unread} answers unreadable (rejections unknown)"
    print(line, file=out)
    print_errors(r.errors, out)
    if r.failed and urllib.parse.urlsplit(r.url).port == endpoints.GRPC_PORT:
        print("         (4317 is the OTLP/gRPC port; replay speaks OTLP/HTTP, usually on 4318)", file=out)


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
    folder = run_folder(folder, theirs=True)
    env = os.environ if env is None else env
    plan = [(sig, signal_url(sig, endpoint, env), signal_headers(sig, headers, env)) for sig in SIGNALS]
    skipped = Skipped()
    results = []
    mib = size(max_request_bytes)
    with Poster(RETRIES, RETRY_STATUS) as poster:
        for sig, url, hdrs in plan:
            if not signal_files(folder, sig, theirs=True):
                print(f"{sig:8s} no {sig}-*.jsonl files", file=out)
                continue
            r = replay_signal(poster, folder, sig, url, hdrs, timeout, skipped, max_request_bytes)
            results.append(r)
            _print_result(r, mib, out)
    out.flush()
    oversized = sum(r.oversized for r in results)
    if oversized:
        warn("replay", f"{oversized} requests hold one item larger than {mib} alone; the endpoint may refuse them", err)
    if skipped:
        warn("replay", skipped.describe(), err)
    total = sum(r.items for r in results)
    failed = sum(r.failed for r in results)
    rejected = sum(r.rejected for r in results)
    unread = sum(r.unread for r in results)
    if failed or rejected or unread:
        what = [f"{failed} requests failed"] if failed else []
        what += [f"{rejected} items rejected"] if rejected else []
        what += [f"{unread} answers unreadable"] if unread else []
        raise CommandError(f"{' and '.join(what)} ({total} items replayed from {folder}; details above)")
    print(f"ok: {total} items replayed from {folder}", file=out)
    return 0
