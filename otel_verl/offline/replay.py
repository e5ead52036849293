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
Exit code 0 only when every request was accepted and nothing was rejected.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from otel_verl.offline import endpoints
from otel_verl.offline.otlp_files import SIGNALS, count_items, iter_lines, signal_files

RETRY_STATUS = (429, 502, 503, 504)
RETRIES = 2
ITEMS = {"traces": "spans", "metrics": "data points", "logs": "log records"}
REJECTED = {"traces": "rejectedSpans", "metrics": "rejectedDataPoints", "logs": "rejectedLogRecords"}


def parse_headers(text: str | None) -> dict[str, str]:
    """``k=v,k2=v2`` (the ``OTEL_EXPORTER_OTLP_HEADERS`` format) -> dict; values percent-decoded."""
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"header {item.strip()!r} is not key=value")
        out[urllib.parse.unquote(key.strip())] = urllib.parse.unquote(value.strip())
    return out


def signal_url(signal: str, endpoint: str | None, env: Mapping[str, str]) -> str:
    """Where ``signal``'s lines go: ``endpoint`` (a base URL) or the SDK's variables, always OTLP/HTTP."""
    return endpoints.signal_endpoint(signal, env, protocol=endpoints.HTTP, base=endpoint)


def signal_headers(signal: str, headers: str | None, env: Mapping[str, str]) -> dict[str, str]:
    if headers is not None:
        return parse_headers(headers)
    out = parse_headers(env.get("OTEL_EXPORTER_OTLP_HEADERS"))
    out.update(parse_headers(env.get(endpoints.signal_variable("HEADERS", signal))))
    return out


@dataclass
class SignalResult:
    signal: str
    url: str
    files: int = 0
    requests: int = 0  # accepted
    items: int = 0  # in accepted requests
    failed: int = 0  # requests refused or not sent after a connection error
    rejected: int = 0  # partialSuccess rejected items
    skipped_lines: int = 0  # not JSON
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
    folder: Path, signal: str, url: str, headers: dict[str, str], timeout: float, retry_wait: float = 0.5
) -> SignalResult:
    result = SignalResult(signal, url)
    files = signal_files(folder, signal)
    result.files = len(files)
    dead = False
    for path in files:
        bad: list[tuple[Path, int]] = []
        for line, batch in iter_lines(path, bad):
            if dead:
                result.failed += 1
                continue
            items = count_items(signal, batch)
            for attempt in range(RETRIES + 1):
                try:
                    _, answer = _post(url, line.encode("utf-8"), headers, timeout)
                except urllib.error.HTTPError as exc:
                    if exc.code in RETRY_STATUS and attempt < RETRIES:
                        time.sleep(retry_wait * (attempt + 1))
                        continue
                    detail = exc.read()[:300].decode("utf-8", "replace").strip()
                    result.failed += 1
                    result.errors.append(f"{path.name}: HTTP {exc.code} {exc.reason}{': ' + detail if detail else ''}")
                except OSError as exc:  # URLError, refused, timed out
                    reason = getattr(exc, "reason", exc)
                    result.failed += 1
                    result.errors.append(f"{url}: {reason}")
                    dead = True
                else:
                    result.requests += 1
                    result.items += items
                    rejected, message = _rejected(signal, answer)
                    if rejected:
                        result.rejected += rejected
                        result.errors.append(f"{path.name}: {rejected} {ITEMS[signal]} rejected {message}".strip())
                break
        result.skipped_lines += len(bad)
    return result


def replay(
    folder: str | Path,
    endpoint: str | None = None,
    headers: str | None = None,
    timeout: float = 10.0,
    env: Mapping[str, str] | None = None,
    out=None,
) -> int:
    out = out or sys.stdout
    folder = Path(folder)
    env = os.environ if env is None else env
    if not folder.is_dir() or not any(signal_files(folder, sig) for sig in SIGNALS):
        print(f"no telemetry files (traces-*.jsonl, metrics-*.jsonl, logs-*.jsonl) in {folder}", file=out)
        return 1
    try:
        plan = [(sig, signal_url(sig, endpoint, env), signal_headers(sig, headers, env)) for sig in SIGNALS]
    except ValueError as exc:
        print(f"bad headers: {exc}", file=out)
        return 2
    results = []
    for sig, url, hdrs in plan:
        if not signal_files(folder, sig):
            print(f"{sig:8s} no {sig}-*.jsonl files", file=out)
            continue
        r = replay_signal(folder, sig, url, hdrs, timeout)
        results.append(r)
        line = f"{sig:8s} -> {url}: {r.items} {ITEMS[sig]} sent in {r.requests} requests from {r.files} files"
        if r.failed:
            line += f"; {r.failed} requests failed"
        if r.rejected:
            line += f"; {r.rejected} {ITEMS[sig]} rejected by the endpoint"
        if r.skipped_lines:
            line += f"; {r.skipped_lines} lines that are not JSON skipped"
        print(line, file=out)
        for err in r.errors[:5]:
            print(f"         {err}", file=out)
        if len(r.errors) > 5:
            print(f"         ... {len(r.errors) - 5} more errors", file=out)
        if r.failed and urllib.parse.urlsplit(url).port == endpoints.GRPC_PORT:
            print("         (4317 is the OTLP/gRPC port; replay speaks OTLP/HTTP, usually on 4318)", file=out)
    ok = all(r.ok for r in results)
    total = sum(r.items for r in results)
    print(f"{'ok' if ok else 'FAILED'}: {total} items replayed from {folder}", file=out)
    return 0 if ok else 1
