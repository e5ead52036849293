"""``otel-verl report --jaeger URL --run RUN_ID``: the report page of a live run, its traces read from Jaeger.

The stack of ``otel-verl stack up`` keeps a run's traces in Jaeger v2 (the Go-built binary has no
web UI). Jaeger's API v3 answers a search with the traces as OTLP JSON (``{"result":
{"resourceSpans": [...]}}``, ``/api/v3/traces?query.service_name=...&query.start_time_min=...``),
the shape the OTLP JSON file exporter writes; so the spans of the run (the resources whose
``verl.run.id`` is RUN_ID) are written, one resource a line, to ``traces-jaeger.jsonl`` in a
private temporary folder, and the page is the one ``otel-verl report FOLDER`` renders from that
folder, read by the same reader with the same checks. The page says where its spans came from;
its curves are not read from the stack (they are Prometheus's: the page names the query).

Jaeger's answers are not trusted: each request is bounded in time (``--timeout``, the whole
request), all the answers together in bytes (``--max-bytes``; more is an error naming the
option, never a page of part of the run), the search in traces per service (``--max-traces``; a
search that reached it is named on the page) and the services asked in number; redirects are not
followed (``offline.http_post``). The API v3 search cannot filter by attribute, so every trace of
the service in the window is fetched and the run's resources are kept.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import tempfile
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_verl import semconv
from otel_verl.exits import PROBLEM, USAGE, CommandError
from otel_verl.printable import printable

MAX_BYTES = 256 * 2**20  # all answers together
MAX_TRACES = 5000  # per service searched (Jaeger's query.num_traces)
MAX_SERVICES = 64  # services asked for traces when --service is not given
LOOKBACK_HOURS = 24.0
TIMEOUT_S = 30.0
RUN_IDS_NAMED = 10  # run ids named when RUN_ID is not among the traces
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class Fetched:
    """What the search found: the run's resources (each an OTLP ``ResourceSpans``) and what else it saw."""

    resource_spans: list[dict[str, Any]] = field(default_factory=list)
    services: list[str] = field(default_factory=list)  # the services searched
    traces: int = 0  # traces Jaeger answered, over all services
    full: list[str] = field(default_factory=list)  # services whose search returned --max-traces traces
    other_runs: set[str] = field(default_factory=set)  # run ids of the other resources seen
    bytes: int = 0


def check_url(url: str) -> str:
    """Jaeger's base URL (``http://host:16686``), without a trailing slash; USAGE when it is not one."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CommandError(
            f"--jaeger {printable(url, 120)!r} is not an http(s) URL (e.g. http://localhost:16686)", USAGE
        )
    if parts.username or parts.password:  # an answer's error or a log line must never carry them
        raise CommandError("--jaeger: give the URL without credentials (user:password@ is not sent)", USAGE)
    if parts.query or parts.fragment:
        raise CommandError("--jaeger: give the base URL, without ?query or #fragment", USAGE)
    return url.rstrip("/")


def _rfc3339(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _resource_run_id(rs: Any) -> str | None:
    """The ``verl.run.id`` of one ``ResourceSpans`` of an answer (None for any other shape)."""
    if not isinstance(rs, dict) or not isinstance(rs.get("resource"), dict):
        return None
    for a in _list(rs["resource"].get("attributes")):
        if isinstance(a, dict) and a.get("key") == semconv.RES_RUN_ID and isinstance(a.get("value"), dict):
            value = a["value"].get("stringValue")
            return value if isinstance(value, str) else None
    return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _trace_ids(rs: dict[str, Any]) -> Iterator[str]:
    """The trace ids of one ``ResourceSpans`` of an answer (whatever its shape: the reader checks it)."""
    for ss in _list(rs.get("scopeSpans")):
        for s in _list(ss.get("spans")) if isinstance(ss, dict) else ():
            if isinstance(s, dict) and isinstance(s.get("traceId"), str):
                yield s["traceId"]


def _unseen(rs: dict[str, Any], seen: set[tuple[str, str]]) -> dict[str, Any] | None:
    """``rs`` with only the spans not ``seen`` yet (by trace and span id: a span Jaeger holds twice,
    or an answer repeats, is one span); None when none is left. A span without string ids is kept
    as it is: the reader checks it and names it skipped."""
    scopes = []
    for ss in _list(rs.get("scopeSpans")):
        if not isinstance(ss, dict):
            continue
        spans = []
        for s in _list(ss.get("spans")):
            key = (s.get("traceId"), s.get("spanId")) if isinstance(s, dict) else None
            if key is not None and all(isinstance(k, str) for k in key):
                if key in seen:
                    continue
                seen.add(key)
            spans.append(s)
        if spans:
            scopes.append({**ss, "spans": spans})
    return {**rs, "scopeSpans": scopes} if scopes else None


class _Client:
    """GETs of one command: the rules of ``offline.http_post``, one byte budget for all answers."""

    def __init__(self, base: str, timeout: float, max_bytes: int) -> None:
        from otel_verl.offline.http_post import Poster

        self.base, self.timeout, self.left = base, timeout, max_bytes
        self.poster = Poster(retries=0, retry_status=())

    def get(self, path: str, params: dict[str, str] | None = None, missing_ok: bool = False) -> Any:
        """The JSON of ``path``'s answer; None for a 404 when ``missing_ok`` (a search that found nothing)."""
        from otel_verl.offline.http_post import NoAnswer

        url = f"{self.base}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        self.poster.limit = self.left
        try:
            answer = self.poster.get(url, {"Accept": "application/json"}, self.timeout)
        except NoAnswer as exc:
            raise CommandError(f"Jaeger at {self.base} gave no answer to {path}: {exc}") from None
        self.left -= len(answer.body)
        if not answer.complete:
            raise CommandError(
                "Jaeger's answers to the search went past --max-bytes; raise it, or narrow the search "
                "(--service, --lookback-hours, --max-traces)"
            )
        if answer.status == 404 and missing_ok:
            return None
        if not answer.ok:
            why = f" (redirect to {printable(answer.location or '', 120)})" if answer.location else ""
            raise CommandError(
                f"Jaeger at {self.base} answered {path} with {answer.status}{why}: {answer.excerpt(200)}"
            )
        try:
            return json.loads(answer.body.decode("utf-8"))
        except (ValueError, RecursionError):
            raise CommandError(f"Jaeger at {self.base} answered {path} with something that is not JSON") from None

    def close(self) -> None:
        self.poster.close()


def _services(client: _Client) -> list[str]:
    answer = client.get("/api/v3/services")
    names = answer.get("services") if isinstance(answer, dict) else None
    if not isinstance(names, list):
        raise CommandError(f"Jaeger at {client.base} answered /api/v3/services without a list of services")
    return sorted({n for n in names if isinstance(n, str) and n})[:MAX_SERVICES]


def fetch_run(
    base: str,
    run_id: str,
    service: str | None = None,
    lookback_hours: float = LOOKBACK_HOURS,
    max_traces: int = MAX_TRACES,
    max_bytes: int = MAX_BYTES,
    timeout: float = TIMEOUT_S,
) -> Fetched:
    """Every resource of run ``run_id`` in the traces Jaeger (``base``) has from the last
    ``lookback_hours``: of ``service``'s traces, or of each service's (at most ``MAX_SERVICES``)."""
    client = _Client(check_url(base), timeout, max_bytes)
    out = Fetched()
    now = dt.datetime.now(dt.UTC)
    window = {
        "query.start_time_min": _rfc3339(now - dt.timedelta(hours=lookback_hours)),
        "query.start_time_max": _rfc3339(now + dt.timedelta(minutes=1)),  # a clock a little ahead
        "query.num_traces": str(max_traces),
    }
    seen: set[tuple[str, str]] = set()  # a trace that spans services comes back once per service
    try:
        out.services = [service] if service else _services(client)
        for name in out.services:
            answer = client.get("/api/v3/traces", {"query.service_name": name, **window}, missing_ok=True)
            if answer is None:
                continue
            result = answer.get("result") if isinstance(answer, dict) else None
            found = result.get("resourceSpans") if isinstance(result, dict) else None
            if not isinstance(found, list):
                raise CommandError(f"Jaeger at {client.base} answered a search without OTLP resourceSpans")
            traces = set()
            for rs in found:
                traces |= set(_trace_ids(rs)) if isinstance(rs, dict) else set()
                rid = _resource_run_id(rs)
                if rid == run_id:
                    kept = _unseen(rs, seen)
                    if kept is not None:
                        out.resource_spans.append(kept)
                elif rid is not None:
                    out.other_runs.add(rid)
            out.traces += len(traces)
            if len(traces) >= max_traces:
                out.full.append(name)
    finally:
        out.bytes = max_bytes - client.left
        client.close()
    return out


def default_output(run_id: str) -> Path:
    """``report-<run id>.html`` in the current folder, the run id's unusual characters as ``_``."""
    return Path(f"report-{_SAFE_NAME.sub('_', run_id)[:100] or 'run'}.html")


def notes(base: str, run_id: str, fetched: Fetched, max_traces: int) -> list[str]:
    """What the page says of its source (first among its notes)."""
    out = [
        f"spans from Jaeger at {base} (API v3, services {', '.join(fetched.services)}): "
        f"{len(fetched.resource_spans)} resources of run {run_id} in {fetched.traces} traces",
        f'curves are not read from the stack: Prometheus has them, e.g. {{verl_run_id="{run_id}"}} '
        "(the kit's prometheus.yml promotes verl.run.id)",
    ]
    if fetched.full:
        out.append(
            f"the search of {', '.join(fetched.full)} returned --max-traces ({max_traces}) traces: "
            "older spans of the run may be missing"
        )
    return out


def jaeger_report(
    base: str,
    run_id: str,
    output: Path | None = None,
    service: str | None = None,
    lookback_hours: float = LOOKBACK_HOURS,
    max_traces: int = MAX_TRACES,
    max_bytes: int = MAX_BYTES,
    timeout: float = TIMEOUT_S,
    include_validation: bool = False,
) -> tuple[Path, Any, Fetched]:
    """Fetch run ``run_id``'s traces from Jaeger and write the report page (``write_report``):
    (the page's path, the ``Report``, what was fetched). A ``CommandError`` when Jaeger has none,
    naming the runs it has (also when ``run_id`` is empty: how a user finds it)."""
    from otel_verl.offline.report import write_report

    base = check_url(base)
    fetched = fetch_run(base, run_id, service, lookback_hours, max_traces, max_bytes, timeout)
    others = sorted(fetched.other_runs)
    named = ", ".join(others[:RUN_IDS_NAMED]) + (", ..." if len(others) > RUN_IDS_NAMED else "")
    if not run_id:  # the user does not know it yet: name the runs there are
        raise CommandError(f"give --run RUN_ID; the runs Jaeger at {base} has: {named or 'none'}", USAGE)
    if not fetched.resource_spans:
        hint = f"; the runs it has there: {named}" if others else ""
        raise CommandError(
            f"Jaeger at {base} has no spans of run {run_id} in the last {lookback_hours:g} h "
            f"({fetched.traces} traces of {', '.join(fetched.services) or 'no service'}){hint}",
            PROBLEM,
        )
    with tempfile.TemporaryDirectory(prefix="otel-verl-jaeger-") as tmp:
        with open(Path(tmp) / "traces-jaeger.jsonl", "w", encoding="utf-8") as f:
            for rs in fetched.resource_spans:
                f.write(json.dumps({"resourceSpans": [rs]}, separators=(",", ":")) + "\n")
        path, rep = write_report(
            tmp,
            output if output is not None else default_output(run_id),
            include_validation,
            source=f"Jaeger at {base}",
            notes=notes(base, run_id, fetched, max_traces),
        )
    return path, rep, fetched


def jaeger_report_command(ns: Any) -> int:
    """``otel-verl report --jaeger URL --run RUN_ID``: write the page and say what is in it."""
    from otel_verl.exits import say

    path, rep, fetched = jaeger_report(
        ns.jaeger,
        ns.run or "",
        ns.output,
        ns.service,
        ns.lookback_hours,
        ns.max_traces,
        ns.max_bytes,
        ns.timeout,
        ns.include_validation,
    )
    say(
        f"wrote {path}: {rep.totals.count} steps, {rep.spans} spans of run {ns.run} from {fetched.traces} traces "
        f"in Jaeger ({fetched.bytes} bytes)"
        + (f" (default timeline: step {rep.default_step}, the slowest)" if rep.default_step is not None else "")
    )
    for note in rep.notes:
        say(f"  note: {note}")
    return 0
