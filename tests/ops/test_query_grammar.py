"""The kit's TraceQL and LogQL, checked without a Tempo or a Loki (both AGPL: never run here).

* Grammar: every TraceQL (the dashboards' Tempo targets) and LogQL (Loki targets, the Tempo data
  source's trace-to-logs query) is parsed by Grafana's own Lezer grammars, ``@grafana/lezer-traceql``
  and ``@grafana/lezer-logql`` (Apache-2.0, the parsers of Grafana's query editors), with Grafana's
  template variables expanded as Grafana expands them (one run, "All", two runs; every ``$slow``).
  A parse tree with an error node fails.
* Names: every span attribute, resource attribute and span name (TraceQL), and every stream label
  and structured-metadata name (LogQL) that the parse trees name is checked against what a real
  verl run emitted (its OTLP JSON files, both drivers, sampled generations on), through Loki's
  OTLP mapping (``collector/loki/loki.yaml``): stream labels are the index-label resource
  attributes, dots turned into underscores. Where a query is a plain filter (one TraceQL spanset of
  ``&&`` string conditions; a LogQL stream selector with single label filters) it is also evaluated
  on the run's records: at least one must match. The data source links (trace to logs, trace to
  metrics tags, the Loki derived field) are resolved on the run's spans and logs the same way.

The grammars come from npm: the first run installs ``tests/ops/query_grammar`` (package-lock.json,
exact versions) with ``npm ci`` into ``~/.cache/otel-verl/npm`` (``OTEL_VERL_NPM_CACHE``), about a
second; without node/npm, or without the registry, the tests stop by ``components.require`` (a
skip on a workstation, a failure under CI) and say why.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.components import require, require_tool
from support.opskit import (
    DASHBOARD_FILES,
    TraceLinks,
    dashboard_trace_log_queries,
    datasource_trace_links,
    grafana_interpolate,
    load_json,
    loki_index_attributes,
    loki_label_name,
)
from support.shared_runs import tail_run

from otel_verl.offline.otlp_files import LogEntry, Skipped, SpanRecord, read_log_records

GRAMMAR_SRC = Path(__file__).resolve().parent / "query_grammar"
INSTALL_TIMEOUT_S = 600
PARSE_TIMEOUT_S = 120
# npm's messages when the registry cannot be reached: a skip, not a failure.
_OFFLINE = re.compile(
    r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|"
    r"network|socket hang up|fetch failed|proxy|self.signed certificate|UNABLE_TO_GET_ISSUER_CERT",
    re.I,
)

# Stand-ins for the parse-only tests (a run's real values in the e2e test): a 32-hex run id and trace
# id, as otel-verl and OTLP write them.
RUN_ID = "3419bc3141b146b897f1d66861f44ca6"
OTHER_RUN_ID = "0af7651916cd43dd8448eb211c80319c"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
# Grafana's interval variables, should a query use them (none does today).
BUILTINS = {"__interval": "1m", "__rate_interval": "1m", "__range": "1h", "__auto": "1m"}

# The sampled v0/v1 runs of tests/e2e/test_logs_e2e.py (same arguments: verl_runs caches one run per
# argument set, so in a full session these cost nothing).


# ---------------------------------------------------------------------------------------------
# The grammar checker (node + Grafana's Lezer grammars)


def _npm_cache_root() -> Path:
    return Path(os.environ.get("OTEL_VERL_NPM_CACHE") or Path.home() / ".cache" / "otel-verl" / "npm")


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    # Several pytest processes may install at once (the machine is shared).
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _install_grammars() -> Path:
    """The folder with the grammars installed and parse.mjs next to them (installs once)."""
    node_how = "the TraceQL/LogQL grammar check needs Node.js (20+) and npm (apt-get install nodejs npm)"
    require_tool("node", node_how)
    npm = require_tool("npm", node_how)
    manifest = [GRAMMAR_SRC / "package.json", GRAMMAR_SRC / "package-lock.json"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in manifest)).hexdigest()[:12]
    root = _npm_cache_root()
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"query-grammar-{digest}"
    with _locked(root / ".query-grammar.lock"):
        if not (target / "node_modules" / ".package-lock.json").is_file():
            tmp = root / f".query-grammar-{digest}.tmp{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            for p in manifest:
                shutil.copy2(p, tmp / p.name)
            try:
                out = subprocess.run(
                    [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
                    cwd=tmp,
                    capture_output=True,
                    text=True,
                    timeout=INSTALL_TIMEOUT_S,
                    env={**os.environ, "npm_config_update_notifier": "false"},
                    check=False,
                )
            except subprocess.TimeoutExpired:
                shutil.rmtree(tmp, ignore_errors=True)
                require("the query grammars", f"`npm ci` took over {INSTALL_TIMEOUT_S} s (registry unreachable?)")
            if out.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                why = (out.stderr or out.stdout)[-1500:]
                offline = [line for line in why.splitlines() if _OFFLINE.search(line)]
                if offline:
                    require("the query grammars", f"npm cannot reach its registry: {offline[0].strip()}")
                pytest.fail(f"`npm ci` in a copy of {GRAMMAR_SRC} failed (rc {out.returncode}): {why}")
            shutil.rmtree(target, ignore_errors=True)
            tmp.rename(target)
        # parse.mjs is copied each time (not part of the cache key): an edit takes effect at once.
        script = (GRAMMAR_SRC / "parse.mjs").read_bytes()
        if not (target / "parse.mjs").is_file() or (target / "parse.mjs").read_bytes() != script:
            (target / "parse.mjs.tmp").write_bytes(script)
            (target / "parse.mjs.tmp").replace(target / "parse.mjs")
    return target


Parse = Callable[[list[tuple[str, str, str]]], dict[str, dict]]


@pytest.fixture(scope="module")
def grammar() -> Parse:
    """``parse([(id, lang, query), ...]) -> {id: result}``: one node process per call."""
    folder = _install_grammars()
    node = shutil.which("node")
    assert node is not None

    def parse(items: list[tuple[str, str, str]]) -> dict[str, dict]:
        payload = json.dumps([{"id": i, "lang": lang, "query": q} for i, lang, q in items])
        out = subprocess.run(
            [node, str(folder / "parse.mjs")],
            input=payload,
            capture_output=True,
            text=True,
            timeout=PARSE_TIMEOUT_S,
            check=False,
        )
        assert out.returncode == 0, f"parse.mjs failed: {out.stderr[-3000:]}"
        doc = json.loads(out.stdout)
        parse.versions = doc["versions"]  # type: ignore[attr-defined]
        return {r["id"]: r for r in doc["results"]}

    return parse


def _describe(result: dict, query: str) -> str:
    errs = "; ".join(f"at {e['from']}-{e['to']} near {e['near']!r}" for e in result["errors"])
    return f"{query!r}: error nodes {errs}\n  tree: {result.get('tree')}"


# ---------------------------------------------------------------------------------------------
# Template variables, as Grafana expands them


def _dashboard_variables() -> list[dict]:
    out: list[dict] = []
    for path in DASHBOARD_FILES:
        out += load_json(path).get("templating", {}).get("list", [])
    return out


def _scenarios(run_id: str, experiment: str) -> list[tuple[str, dict[str, str]]]:
    """(label, values) for every way the dashboard's variables can be set that changes the text:
    one run selected, "All" (the variables' allValue) and two runs (Grafana's multi-value regex
    form ``(a|b)``), each with every option of the custom variables."""
    multi = {"run": (run_id, f"({run_id}|{OTHER_RUN_ID})"), "experiment": (experiment, f"({experiment}|other)")}
    query_vars: dict[str, dict] = {}
    custom: dict[str, list[str]] = {}
    for var in _dashboard_variables():
        if var.get("type") == "query":
            assert var["name"] in multi, f"dashboard variable ${var['name']}: add its values to _scenarios"
            query_vars[var["name"]] = var
        elif var.get("type") == "custom":
            custom[var["name"]] = [o["value"] for o in var.get("options", [])] or var["query"].split(",")
        elif var.get("type") == "datasource":
            continue  # picks where the queries go, not their text
        else:
            raise AssertionError(f"dashboard variable ${var.get('name')} of type {var.get('type')!r}: handle it here")
    base: list[tuple[str, dict[str, str]]] = []
    for label in ("one run", "All", "two runs"):
        values = dict(BUILTINS)
        for name, var in query_vars.items():
            one, two = multi[name]
            values[name] = {"one run": one, "All": var.get("allValue") or ".*", "two runs": two}[label]
        base.append((label, values))
    out = base
    for name, options in custom.items():
        out = [(f"{label}, ${name}={o}", {**values, name: o}) for label, values in out for o in options]
    return out


def _tags_value(tags: dict[str, str], span: SpanRecord) -> str:
    """Grafana's ``${__tags}`` for a Loki link: ``label="value"`` for each configured span attribute
    the span (or its resource) has, joined by ", "."""
    parts = []
    for key, label in tags.items():
        value = span.attributes.get(key, span.resource.get(key))
        if value is not None:
            parts.append(f'{label}="{value}"')
    return ", ".join(parts)


def _link_values(links: TraceLinks, span: SpanRecord) -> dict[str, str]:
    return {
        "__tags": _tags_value(links.logs_tags, span),
        "__trace.traceId": span.trace_id,
        "__span.spanId": span.span_id,
        "__span.traceId": span.trace_id,
    }


def _stand_in_span() -> SpanRecord:
    res = {"service.name": "verl", "verl.run.id": RUN_ID, "verl.experiment": "v1_grpo"}
    return SpanRecord("verl.step", TRACE_ID, SPAN_ID, "", 0, 1, {"verl.step": 1}, res, "UNSET")


def _all_expanded(run_id: str, experiment: str, span: SpanRecord) -> list[tuple[str, str, str]]:
    """(where, lang, query) for every kit query under every variable setting."""
    queries, _ = dashboard_trace_log_queries()
    out = []
    for q in queries:
        for label, values in _scenarios(run_id, experiment):
            out.append((f"{q.where} [{label}]", q.lang, grafana_interpolate(q.query, values)))
    links = datasource_trace_links()
    out.append(
        (
            "datasources.yaml:Tempo:tracesToLogsV2",
            "logql",
            grafana_interpolate(links.logs_query, _link_values(links, span)),
        )
    )
    return out


# ---------------------------------------------------------------------------------------------
# Parse-only tests (no run)


def test_the_kit_has_traceql_and_logql_and_nothing_the_checker_skips() -> None:
    queries, unsupported = dashboard_trace_log_queries()
    assert not unsupported, f"Tempo/Loki queries this checker does not read: {unsupported}; extend opskit"
    langs = {q.lang for q in queries}
    assert langs == {"traceql", "logql"}, queries
    assert datasource_trace_links().logs_query


def test_grafana_interpolation_is_complete() -> None:
    assert grafana_interpolate('{a=~"$run"} ${__trace.traceId} [[run]]', {"run": "x", "__trace.traceId": "t"}) == (
        '{a=~"x"} t x'
    )
    with pytest.raises(KeyError, match=r"\$runn"):
        grafana_interpolate('{a=~"$runn"}', {"run": "x"})
    with pytest.raises(KeyError, match="format"):
        grafana_interpolate('{a=~"${run:regex}"}', {"run": "x"})


def test_every_traceql_and_logql_of_the_kit_parses_with_grafanas_grammars(grammar: Parse) -> None:
    items = _all_expanded(RUN_ID, "v1_grpo", _stand_in_span())
    results = grammar([(str(i), lang, q) for i, (_, lang, q) in enumerate(items)])
    bad = [
        f"{where}: {_describe(results[str(i)], q)}"
        for i, (where, _, q) in enumerate(items)
        if not results[str(i)]["ok"]
    ]
    assert not bad, "\n".join(bad)
    assert len(items) >= 3 * 5 + 3 + 1  # TraceQL x (3 settings x 5 $slow), LogQL x 3, the link
    versions = grammar.versions  # type: ignore[attr-defined]
    assert versions["@grafana/lezer-traceql"] and versions["@grafana/lezer-logql"], versions


def test_the_grammars_reject_broken_queries_and_name_what_they_read(grammar: Parse) -> None:
    """The checker can fail: a kit query with a character dropped, a misspelt intrinsic, a dotted
    (OTLP-style) Loki label, an unclosed selector are error trees; names come from the tree."""
    queries, _ = dashboard_trace_log_queries()
    (_, values), *_ = _scenarios(RUN_ID, "v1_grpo")
    broken: list[tuple[str, str, str]] = []
    for n, q in enumerate(queries):
        text = grafana_interpolate(q.query, values)
        cut = text.index("}")
        broken.append((f"cut{n}", q.lang, text[:cut] + text[cut + 1 :]))  # the selector's '}' dropped
    broken += [
        ("intrinsic", "traceql", '{ nme = "verl.step" }'),
        ("scope", "traceql", "{ spna.verl.step = 1 }"),
        ("duration", "traceql", "{ duration > 60 s }"),
        ("dotted", "logql", '{service.name="verl"}'),
        ("unclosed", "logql", '{service_name="verl" | verl_sample_reward != ""'),
    ]
    results = grammar(broken)
    accepted = [q for i, _, q in broken if results[i]["ok"]]
    assert not accepted, f"the grammars accepted broken queries: {accepted}"

    good = grammar(
        [
            (
                "t",
                "traceql",
                '{ name = "a" && resource.verl.run.id =~ "r" } | select(span.verl.rollout.submit_step, .x)',
            ),
            ("l", "logql", 'sum by (verl_run_id) (count_over_time({service_name="a"} | json | z="1" | y!="" [5m]))'),
        ]
    )
    t, logq = good["t"], good["l"]
    assert t["ok"] and logq["ok"]
    assert [(f["kind"], f["scope"], f["name"], f["in"]) for f in t["fields"]] == [
        ("intrinsic", "", "name", "SpansetFilter"),
        ("attribute", "resource", "verl.run.id", "SpansetFilter"),
        ("attribute", "span", "verl.rollout.submit_step", "SelectOperation"),
        ("attribute", "", "x", "SelectOperation"),
    ]
    (flt,) = t["filters"]
    assert [(c["field"]["name"], c["op"], c["value"]["value"]) for c in flt["comparisons"]] == [
        ("name", "=", "a"),
        ("verl.run.id", "=~", "r"),
    ]
    assert [(m["label"], m["op"], m["in"], m["after_label_maker"]) for m in logq["matchers"]] == [
        ("service_name", "=", "Selector", False),
        ("z", "=", "LabelFilter", True),
        ("y", "!=", "LabelFilter", True),
    ]
    assert [(lb["name"], lb["in"]) for lb in logq["labels"]] == [("verl_run_id", "Grouping")]


# ---------------------------------------------------------------------------------------------
# Names and values against a real run


def read_logs(folder: Path) -> list[LogEntry]:
    """The run's log records with their resource (a map body, as sampled generations have, as JSON
    text); nothing may be skipped."""
    skipped = Skipped()
    out = read_log_records(folder, skipped)
    assert not skipped, skipped.describe()
    return out


def _loki_value(v: Any) -> str:
    # Loki stores attribute values as strings (OTLP AnyValue rendered as text).
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


class LokiView:
    """The run's log records as the kit's Loki stores them: stream labels and structured metadata."""

    def __init__(self, logs: list[LogEntry], index_attributes: set[str]) -> None:
        self.records: list[tuple[dict[str, str], dict[str, str]]] = []
        for r in logs:
            labels = {loki_label_name(k): _loki_value(v) for k, v in r.resource.items() if k in index_attributes}
            labels.setdefault("service_name", "unknown_service")  # Loki's stand-in without service.name
            meta = {loki_label_name(k): _loki_value(v) for k, v in r.resource.items() if k not in index_attributes}
            meta.update({loki_label_name(k): _loki_value(v) for k, v in r.attributes.items()})
            for name, value in (("trace_id", r.trace_id), ("span_id", r.span_id), ("severity_text", r.severity)):
                if value:
                    meta[name] = value
            self.records.append((labels, meta))
        self.stream_labels = {k for labels, _ in self.records for k in labels}
        self.metadata = {k for _, meta in self.records for k in meta}


def _matches(op: str, have: str, want: str) -> bool:
    # Loki's matchers are fully anchored (as Prometheus's); the values the kit's regexes meet here (a
    # 32-hex run id, .*, (a|b)) match the same anchored or not, so Tempo's choice does not matter.
    if op == "=":
        return have == want
    if op == "!=":
        return have != want
    if op == "=~":
        return re.fullmatch(want, have) is not None
    if op == "!~":
        return re.fullmatch(want, have) is None
    raise AssertionError(f"operator {op!r}")


def check_logql(result: dict, view: LokiView) -> list[str]:
    """What is wrong with one parsed LogQL query on this run's logs (empty: nothing found)."""
    problems = []
    for m in result["matchers"]:
        label = m["label"]
        if m["in"] == "Selector":
            if label not in view.stream_labels:
                kind = "is structured metadata, not a stream label" if label in view.metadata else "is not emitted"
                problems.append(f"stream selector label {label!r} {kind} (stream labels: {sorted(view.stream_labels)})")
        elif not m["after_label_maker"] and label not in view.stream_labels | view.metadata:
            problems.append(f"label filter {label!r} is neither a stream label nor structured metadata of any record")
    for lb in result["labels"]:
        if not lb["after_label_maker"] and lb["name"] not in view.stream_labels | view.metadata:
            problems.append(f"label {lb['name']!r} ({lb['in']}) is not a label of any record")
    if _simple(result) and not problems and not selected(result, view):
        problems.append(f"selects none of the run's {len(view.records)} log records")
    return problems


def _simple(result: dict) -> bool:
    """A stream selector and label filters of one matcher each: what ``selected`` evaluates."""
    return result["kind"] == "LogExpr" and all(
        s["kind"] == "LabelFilter" and s["single_matcher"] for s in result["stages"]
    )


def selected(result: dict, view: LokiView) -> list[int]:
    """The indexes of ``view``'s records a simple parsed LogQL query selects (a missing label reads
    as "" in Loki's label filters)."""
    assert _simple(result), result

    def selects(labels: dict[str, str], meta: dict[str, str]) -> bool:
        for m in result["matchers"]:
            scope = labels if m["in"] == "Selector" else {**meta, **labels}
            if not _matches(m["op"], scope.get(m["label"], ""), m["value"]):
                return False
        return True

    return [i for i, (labels, meta) in enumerate(view.records) if selects(labels, meta)]


INTRINSIC_NAME = {"name", "span:name"}


def _span_field(span: SpanRecord, field: dict, by_id: dict[str, SpanRecord]) -> tuple[bool, Any]:
    """(present, value) of a TraceQL field on a span."""
    if field["parent"]:
        parent = by_id.get(span.parent_id)
        if parent is None:
            return False, None
        return _span_field(parent, {**field, "parent": False}, by_id)
    name, scope = field["name"], field["scope"]
    if field["kind"] == "intrinsic":
        if name in INTRINSIC_NAME:
            return True, span.name
        if name.startswith("event:"):
            return bool(span.events), None
        if name.startswith("link:"):
            return bool(span.links), None
        return True, None  # duration, status, kind, trace:*: every span has them
    if scope == "span":
        return name in span.attributes, span.attributes.get(name)
    if scope == "resource":
        return name in span.resource, span.resource.get(name)
    if scope == "":
        if name in span.attributes:
            return True, span.attributes[name]
        return name in span.resource, span.resource.get(name)
    if scope == "event":
        for e in span.events:
            attrs = {a["key"]: a["value"] for a in e.get("attributes", [])}
            if name in attrs:
                return True, None
        return False, None
    if scope == "link":
        return any(name in link.attributes for link in span.links), None
    raise AssertionError(f"TraceQL scope {scope!r} (instrumentation scope attributes are not in the OTLP reader)")


def check_traceql(result: dict, spans: list[SpanRecord]) -> list[str]:
    """What is wrong with one parsed TraceQL query on this run's spans (empty: nothing found)."""
    by_id = {s.span_id: s for s in spans}
    filters = result["filters"]
    plain = len(filters) == 1 and not filters[0]["or"]
    candidates = spans
    problems = []
    if plain:
        # The spans the query is about: those its name condition picks (select() reads them too).
        names = [
            c["value"]["value"]
            for c in filters[0]["comparisons"]
            if c["field"]["kind"] == "intrinsic" and c["field"]["name"] in INTRINSIC_NAME and c["op"] == "="
        ]
        if len(names) == 1:
            candidates = [s for s in spans if s.name == names[0]]
            if not candidates:
                return [f"no span of the run is called {names[0]!r}"]
    for f in result["fields"]:
        if not any(_span_field(s, f, by_id)[0] for s in candidates):
            where = sorted({s.name for s in spans if _span_field(s, f, by_id)[0]})
            on = f" (only on {where[:6]})" if where else " (on no span of the run)"
            problems.append(f"{f['text']} ({f['in']}) is on none of the {len(candidates)} spans it reads{on}")
    strings = [c for c in filters[0]["comparisons"] if c["value"]["type"] == "String"] if plain else []
    if strings and not problems:

        def passes(span: SpanRecord) -> bool:
            for c in strings:
                present, value = _span_field(span, c["field"], by_id)
                # Tempo compares typed values: a string condition never matches an int attribute.
                if not present or not isinstance(value, str) or not _matches(c["op"], value, c["value"]["value"]):
                    return False
            return True

        if not any(passes(s) for s in candidates):
            conds = ", ".join(f"{c['field']['name']} {c['op']} {c['value']['value']!r}" for c in strings)
            problems.append(f"no span of the run meets its string conditions ({conds})")
    return problems


def check_links(links: TraceLinks, spans: list[SpanRecord], view: LokiView) -> list[str]:
    """The span attributes the Tempo data source's links read are on every span; the Loki derived
    field finds a trace id of the run."""
    problems = []
    for kind, tags in (("tracesToLogsV2", links.logs_tags), ("tracesToMetrics", links.metrics_tags)):
        for key in tags:
            missing = sorted({s.name for s in spans if key not in s.attributes and key not in s.resource})
            if missing:
                problems.append(f"{kind} tag {key!r} is missing on spans {missing[:6]}")
    trace_ids = {s.trace_id for s in spans}
    for df in links.derived_fields:
        if df.get("matcherType") == "label":
            values = [meta.get(df["matcherRegex"], labels.get(df["matcherRegex"])) for labels, meta in view.records]
        else:
            raise AssertionError(f"derived field {df['name']}: matcherType {df.get('matcherType')!r}: handle it here")
        found = [v for v in values if v]
        if not found:
            problems.append(f"derived field {df['name']}: no log record has {df['matcherRegex']!r}")
            continue
        urls = {grafana_interpolate(df["url"], {"__value.raw": v}) for v in found}
        if df.get("datasourceUid") == "tempo" and not urls & trace_ids:
            problems.append(f"derived field {df['name']}: its values {sorted(urls)[:3]} are no trace id of the run")
    return problems


def _mutant(lang: str, query: str, result: dict) -> str:
    """``query`` with its first attribute (TraceQL) or stream label (LogQL) misspelt."""
    if lang == "traceql":
        field = next(f for f in result["fields"] if f["kind"] == "attribute")
        return query.replace(field["text"], field["text"] + "x", 1)
    label = next(m["label"] for m in result["matchers"] if m["in"] == "Selector")
    return query.replace(label, label + "x", 1)


@pytest.mark.e2e
@pytest.mark.parametrize("driver", ["v0", "v1"])
def test_every_name_and_filter_of_the_kit_matches_what_a_real_run_emitted(
    verl_runs, grammar: Parse, driver: str
) -> None:
    run = tail_run(verl_runs, driver)  # with sampled generations: log records joined to steps
    spans, logs = run.spans, read_logs(run.telemetry_dir)
    assert spans and logs, "the run wrote no spans or no log records"
    view = LokiView(logs, loki_index_attributes())
    (run_id,) = {s.resource["verl.run.id"] for s in spans}
    (experiment,) = {s.resource["verl.experiment"] for s in spans}
    assert re.fullmatch(r"[0-9a-f]{32}", run_id), run_id  # no regex escaping to model in the variables

    # The trace-to-logs link from a span whose trace has log records (the step a sample belongs to).
    logged = {r.trace_id for r in logs if r.trace_id}
    linked = [s for s in spans if s.trace_id in logged and s.name == "verl.step"]
    assert linked, f"no verl.step trace has a log record: the trace-to-logs link finds nothing ({len(logs)} records)"
    items = _all_expanded(run_id, experiment, linked[0])
    results = grammar([(str(i), lang, q) for i, (_, lang, q) in enumerate(items)])
    found: dict[str, list[str]] = {}  # problem -> the variable settings it shows under
    for i, (where, lang, q) in enumerate(items):
        r = results[str(i)]
        base, _, setting = where.partition(" [")
        if not r["ok"]:
            found.setdefault(f"{base}: {_describe(r, q)}", []).append(setting.rstrip("]"))
            continue
        for p in check_traceql(r, spans) if lang == "traceql" else check_logql(r, view):
            found.setdefault(f"{base}: {p}\n  query: {q}", []).append(setting.rstrip("]"))
    problems = [f"{p}\n  (with {len(s)} variable settings, e.g. {s[0]})" for p, s in found.items()]
    problems += check_links(datasource_trace_links(), spans, view)
    assert not problems, f"{driver} run {run_id}:\n" + "\n".join(problems)

    # The same check fails on a misspelt name, against this run's data.
    firsts = {}
    for i, (where, lang, q) in enumerate(items):
        firsts.setdefault(where.split(" [")[0], (lang, q, results[str(i)]))
    mutants = [(k, lang, _mutant(lang, q, r)) for k, (lang, q, r) in firsts.items()]
    mresults = grammar(mutants)
    passed = []
    for k, lang, q in mutants:
        r = mresults[k]
        if r["ok"] and not (check_traceql(r, spans) if lang == "traceql" else check_logql(r, view)):
            passed.append(q)
    assert not passed, f"misspelt queries passed the check: {passed}"


def test_the_name_checks_fail_on_records_that_lack_the_names(grammar: Parse) -> None:
    """Without a run: the checkers report a span name, attribute, stream label or filter value the
    records do not have (a stand-in span and log record of the shape a run writes)."""
    span = _stand_in_span()
    traj = SpanRecord(
        "verl.rollout.trajectory",
        OTHER_RUN_ID,
        SPAN_ID,
        "",
        0,
        10**9,
        {"verl.rollout.submit_step": 1},
        span.resource,
        "UNSET",
    )
    log = LogEntry(
        "verl.rollout.sample", "{}", {"verl.sample.reward": 1.0}, span.resource, TRACE_ID, SPAN_ID, 0, "INFO"
    )
    view = LokiView([log], loki_index_attributes())
    cases = {
        "ok-t": (
            "traceql",
            f'{{ name = "verl.rollout.trajectory" && resource.verl.run.id =~ "{RUN_ID}" }}'
            " | select(span.verl.rollout.submit_step)",
        ),
        "name": ("traceql", '{ name = "verl.rollout.trajectoryy" }'),
        "attr": ("traceql", '{ name = "verl.rollout.trajectory" } | select(span.verl.step)'),
        "value": ("traceql", f'{{ name = "verl.rollout.trajectory" && resource.verl.run.id = "{OTHER_RUN_ID}" }}'),
        "ok-l": ("logql", f'{{service_name=~".+", verl_run_id=~"{RUN_ID}"}} | verl_sample_reward != ""'),
        "meta-in-selector": ("logql", '{verl_sample_reward=~".+"}'),
        "label": ("logql", '{service_name=~".+"} | verl_sample_rewardd != ""'),
        "nothing": ("logql", f'{{verl_run_id="{OTHER_RUN_ID}"}}'),
    }
    results = grammar([(k, lang, q) for k, (lang, q) in cases.items()])
    verdicts = {}
    for k, (lang, _) in cases.items():
        r = results[k]
        assert r["ok"], _describe(r, cases[k][1])
        verdicts[k] = check_traceql(r, [span, traj]) if lang == "traceql" else check_logql(r, view)
    assert verdicts["ok-t"] == [] and verdicts["ok-l"] == [], verdicts
    assert all(verdicts[k] for k in cases if not k.startswith("ok-")), verdicts
    assert "structured metadata, not a stream label" in verdicts["meta-in-selector"][0]


def test_the_stall_doctors_documented_loki_query_selects_exactly_its_stacks(grammar: Parse) -> None:
    """docs/stall-doctor.md's LogQL query, parsed by Grafana's grammar and evaluated on records from the
    stall doctor's own emitter as the kit's Loki stores them (``LokiView``: index labels from
    loki.yaml, attributes as structured metadata; Loki 3.7 keeps no EventName field), beside another
    record of the same run. A model of Loki, not Loki: it is AGPL and not run here."""
    from unittest import mock

    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    from otel_verl.process.state import PROCESS
    from otel_verl.stall import stacks

    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=Resource.create({"service.name": "verl", "verl.run.id": RUN_ID}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    provider.get_logger("other").emit(body="an ordinary log line of the run", attributes={"verl.step": 2})
    with mock.patch.object(PROCESS, "logger_provider", lambda: provider):
        assert stacks.report({"state": "stalled", "episode": 1, "seq": 1, "step": 2, "stalled_s": 31.0})
    logs = []
    for data in exporter.get_finished_logs():
        r = data.log_record
        attrs, res = dict(r.attributes or {}), dict(data.resource.attributes)
        logs.append(LogEntry(r.event_name or "", str(r.body), attrs, res, format(r.trace_id, "032x"), "", 0, ""))
    view = LokiView(logs, loki_index_attributes())
    doc = (Path(__file__).resolve().parents[2] / "docs" / "stall-doctor.md").read_text()
    (query,) = re.findall(r"`(\{verl_run_id=\"<run id>\"\}[^`]*)`", doc)
    result = grammar([("q", "logql", query.replace("<run id>", RUN_ID))])["q"]
    assert result["ok"], _describe(result, query)
    assert check_logql(result, view) == []
    assert [logs[i].event_name for i in selected(result, view)] == ["verl.stall.stacks"]
