"""Grafana provisioning and the "verl RL training" dashboard."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import sys

import pytest
import yaml
from support.components import require_module
from support.opskit import (
    COMPOSE_FILE,
    DASHBOARD_FILES,
    DASHBOARD_PROVIDERS_FILE,
    DATASOURCES_FILE,
    REPO,
    dashboard_datasource_uid,
    dashboard_panels,
    dashboard_prom_exprs,
    datasource_prom_exprs,
    load_json,
    load_yaml,
    require_tool,
    run_tool,
)

from otel_verl import semconv

GRAFANA_BUILTIN = "-- Grafana --"


@pytest.fixture(scope="module")
def datasources():
    return {d["uid"]: d for d in load_yaml(DATASOURCES_FILE)["datasources"]}


@pytest.fixture(scope="module")
def dashboard():
    (path,) = [p for p in DASHBOARD_FILES if p.name == "verl-rl-training.json"]
    return load_json(path)


def _uid(ds):
    return ds.get("uid") if isinstance(ds, dict) else ds


def _resolved(dashboard, ds):
    """The kit's data source that a reference of the dashboard reaches (its variable resolved)."""
    return dashboard_datasource_uid(dashboard, ds)


def test_datasource_uids_and_types(datasources):
    types = {uid: d["type"] for uid, d in datasources.items()}
    assert types["prometheus"] == "prometheus"
    assert types["tempo"] == "tempo"
    assert types["loki"] == "loki"
    names = [d["name"] for d in datasources.values()]
    assert len(names) == len(set(names))
    assert sum(1 for d in datasources.values() if d.get("isDefault")) == 1


def test_cross_links(datasources):
    prom = datasources["prometheus"]["jsonData"]
    assert {"name": "trace_id", "datasourceUid": "tempo"} in prom["exemplarTraceIdDestinations"]

    tempo = datasources["tempo"]["jsonData"]
    t2l = tempo["tracesToLogsV2"]
    assert t2l["datasourceUid"] == "loki"
    # Provisioning expands $VAR from the environment: Grafana variables need $$.
    assert "$${__trace.traceId}" in t2l["query"] and "trace_id" in t2l["query"]
    t2m = tempo["tracesToMetrics"]
    assert t2m["datasourceUid"] == "prometheus"
    assert t2m["queries"] and all("$$__tags" in q["query"] for q in t2m["queries"])

    loki = datasources["loki"]["jsonData"]
    (df,) = [f for f in loki["derivedFields"] if f["name"] == "trace_id"]
    assert df["datasourceUid"] == "tempo" and df["matcherType"] == "label" and df["matcherRegex"] == "trace_id"


def test_every_datasource_reference_resolves(datasources):
    refs = []
    for d in datasources.values():
        jd = d.get("jsonData") or {}
        refs += [x["datasourceUid"] for x in jd.get("exemplarTraceIdDestinations", [])]
        refs += [x["datasourceUid"] for x in jd.get("derivedFields", [])]
        for key in ("tracesToLogsV2", "tracesToMetrics", "serviceMap", "lokiSearch"):
            if key in jd:
                refs.append(jd[key]["datasourceUid"])
    assert refs and set(refs) <= set(datasources)


def test_dashboard_provider_points_at_mounted_folder():
    providers = load_yaml(DASHBOARD_PROVIDERS_FILE)["providers"]
    (p,) = providers
    grafana = load_yaml(COMPOSE_FILE)["services"]["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    assert mounts[p["options"]["path"]] == "./grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./grafana/provisioning"


def test_dashboard_identity(dashboard):
    assert dashboard["title"] == "verl RL training"
    assert dashboard["uid"] == "verl-rl-training"
    ids = [p["id"] for p in dashboard_panels(dashboard)]
    assert len(ids) == len(set(ids))


def _references(dashboard):
    """(where, data-source reference) of every panel, target, annotation and query variable."""
    for panel in dashboard_panels(dashboard):
        if panel["type"] == "row":
            continue
        yield panel["title"], panel.get("datasource")
        for t in panel.get("targets", []):
            if "datasource" in t:
                yield f"{panel['title']}:{t.get('refId')}", t["datasource"]
    for ann in dashboard["annotations"]["list"]:
        if _uid(ann["datasource"]) != GRAFANA_BUILTIN:
            yield f"annotation {ann['name']}", ann["datasource"]
    for var in dashboard["templating"]["list"]:
        if "datasource" in var:
            yield f"variable {var['name']}", var["datasource"]


def test_panel_datasources_are_provisioned(dashboard, datasources):
    checked = 0
    for where, ds in _references(dashboard):
        assert _resolved(dashboard, ds) in datasources, where
        assert datasources[_resolved(dashboard, ds)]["type"] == ds["type"], where
        checked += 1
    assert checked >= 20


def test_no_fixed_datasource_uid(dashboard):
    """Every reference goes through a data-source variable, so that the dashboard imports into any
    Grafana (the UIDs there are not the kit's); scripts/dashboards/kit.py's PROMETHEUS, TEMPO and
    LOKI are such references."""
    variables = {v["name"]: v for v in dashboard["templating"]["list"] if v["type"] == "datasource"}
    for where, ds in _references(dashboard):
        name = re.fullmatch(r"\$\{(\w+)\}", _uid(ds) or "")
        assert name, f"{where}: fixed data-source UID {ds!r} (use kit.PROMETHEUS, ... in scripts/dashboards)"
        assert variables[name.group(1)]["query"] == ds["type"], where
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names[: len(variables)] == list(variables), "data-source variables come before the queries that use them"


def test_import_inputs_cover_every_datasource_variable(dashboard):
    """Grafana's importer asks for each `__inputs` data source and writes its UID wherever the JSON
    says ${DS_...}: there, each data-source variable's default."""
    inputs = {i["name"]: i for i in dashboard["__inputs"]}
    required = {r["id"] for r in dashboard["__requires"] if r["type"] == "datasource"}
    for var in dashboard["templating"]["list"]:
        if var["type"] != "datasource":
            continue
        (name,) = re.fullmatch(r"\$\{(\w+)\}", var["current"]["value"]).groups()
        assert inputs[name]["type"] == "datasource" and inputs[name]["pluginId"] == var["query"], var["name"]
        assert var["query"] in required
    text = json.dumps(dashboard)
    assert set(re.findall(r"\$\{(DS_\w+)\}", text)) == set(inputs), "an input nothing uses, or a use with no input"


def test_imported_into_another_grafana_every_reference_reaches_the_chosen_datasources(dashboard):
    """Grafana's importer (pkg/services/dashboardimport: every ${INPUT} of a string replaced by the
    chosen value) with data sources whose UIDs are not the kit's: every reference resolves to them."""
    chosen = {"DS_PROMETHEUS": "mimir-prod", "DS_TEMPO": "tempo-eu", "DS_LOKI": "loki-eu"}
    imported = json.loads(re.sub(r"\$\{(DS_\w+)\}", lambda m: chosen[m.group(1)], json.dumps(dashboard)))
    current = {v["name"]: v["current"]["value"] for v in imported["templating"]["list"] if v["type"] == "datasource"}
    for where, ds in _references(imported):
        name = re.fullmatch(r"\$\{(\w+)\}", ds["uid"]).group(1)
        assert current[name] == chosen[f"DS_{ds['type'].upper()}"], where


SDK_HOW = "grafana-foundation-sdk is in the test extra: pip install -e '.[test]'"


def _gen_dashboards():
    """scripts/gen_dashboards.py as a module (it needs grafana-foundation-sdk)."""
    require_module("grafana_foundation_sdk", SDK_HOW)
    spec = importlib.util.spec_from_file_location("gen_dashboards", REPO / "scripts" / "gen_dashboards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_dashboards_are_what_their_code_makes():
    """collector/grafana/dashboards/*.json are written by scripts/gen_dashboards.py from
    scripts/dashboards/ (grafana-foundation-sdk): edit the code, then run it."""
    gen = _gen_dashboards()
    assert gen.stale() == [], "run: .venv/bin/python scripts/gen_dashboards.py"
    done = run_tool([sys.executable, str(REPO / "scripts" / "gen_dashboards.py"), "--check"])
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_check_fails_on_a_hand_edited_or_unknown_dashboard(tmp_path):
    gen = _gen_dashboards()
    texts = gen.render()
    assert set(texts) == {p.name for p in DASHBOARD_FILES}
    for name, text in texts.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert gen.stale(tmp_path) == []
    edited = tmp_path / "verl-rl-training.json"
    edited.write_text(edited.read_text(encoding="utf-8").replace('"1m"', '"5m"', 1), encoding="utf-8")
    (tmp_path / "hand-made.json").write_text("{}\n", encoding="utf-8")
    assert gen.stale(tmp_path) == ["hand-made.json", "verl-rl-training.json"]


def _outside_grafanas_schema(dashboard: dict) -> list[str]:
    """The fields of ``dashboard`` that Grafana's dashboard schema (the SDK's types) does not read back."""
    require_module("grafana_foundation_sdk", SDK_HOW)
    from grafana_foundation_sdk.cog import plugins
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    plugins.register_default_plugins()  # the panel and query types, by plugin id
    back = json.loads(json.dumps(Dashboard.from_json(dashboard), cls=JSONEncoder))
    lost: list[str] = []

    def walk(before, after, path):
        if isinstance(before, dict):
            for key, value in before.items():
                if not isinstance(after, dict) or key not in after:
                    lost.append(f"{path}.{key}")
                else:
                    walk(value, after[key], f"{path}.{key}")
        elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
            for i, (b, a) in enumerate(zip(before, after, strict=True)):
                walk(b, a, f"{path}[{i}]")
        elif before != after:
            lost.append(f"{path} ({before!r} read as {after!r})")

    walk(dashboard, back, "")
    return lost


def test_the_dashboard_is_grafanas_schema_through_and_through(dashboard):
    """Every field is one Grafana's schema has, where it has it (read back whole by the SDK's types),
    but the export's ``__inputs``/``__requires`` and what Grafana's Prometheus data source reads
    from its annotation (scripts/dashboards/kit.py's PrometheusAnnotation)."""
    prometheus_annotation = {"step", "titleFormat", "textFormat", "tagKeys", "useValueForTime"}
    (i,) = [i for i, a in enumerate(dashboard["annotations"]["list"]) if a["datasource"]["type"] == "prometheus"]
    expected = {".__inputs", ".__requires"} | {f".annotations.list[{i}].{k}" for k in prometheus_annotation}
    assert set(_outside_grafanas_schema(dashboard)) == expected


def test_the_schema_check_names_a_misplaced_field(dashboard):
    """A panel's axis bounds under ``custom`` (where a time series has none: Grafana ignores them)."""
    broken = json.loads(json.dumps(dashboard))
    (panel,) = [p for p in broken["panels"] if p["title"] == "GPU utilisation per rank"]
    panel["fieldConfig"]["defaults"]["custom"]["min"] = 0
    lost = _outside_grafanas_schema(broken)
    assert [x for x in lost if "custom.min" in x] == [
        f".panels[{broken['panels'].index(panel)}].fieldConfig.defaults.custom.min"
    ]


def test_a_datasource_reference_without_its_variable_is_refused():
    """The export (``__inputs``) is made from the data-source variables: a reference to one the
    dashboard lacks, or a variable nothing uses, stops the generator."""
    _gen_dashboards()
    kit = importlib.import_module("dashboards.kit")
    variable = {"type": "datasource", "name": "ds_prometheus", "query": "prometheus"}
    panel = {"datasource": {"type": "prometheus", "uid": "${ds_prometheus}"}}
    assert [i["name"] for i in kit.exported({"templating": {"list": [variable]}, "panels": [panel]})["__inputs"]] == [
        "DS_PROMETHEUS"
    ]
    with pytest.raises(ValueError, match="ds_loki"):
        kit.exported({"templating": {"list": [variable]}, "panels": [panel, {"datasource": kit.LOKI.to_json()}]})
    with pytest.raises(ValueError, match="ds_prometheus"):
        kit.exported({"templating": {"list": [variable]}, "panels": []})


def test_panels_do_not_overlap(dashboard):
    cells = {}
    for panel in dashboard_panels(dashboard):
        g = panel["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_run_and_experiment_variables(dashboard):
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    for name in ("experiment", "run"):
        v = variables[name]
        assert v["type"] == "query" and v["multi"] and v["includeAll"]
        assert v["allValue"] == ".*"
    assert "$experiment" in variables["run"]["query"]
    # Every Prometheus panel query filters on the selected run(s).
    for panel in dashboard_panels(dashboard):
        for t in panel.get("targets", []):
            if _resolved(dashboard, t.get("datasource")) == "prometheus":
                assert "$run" in t["expr"], (panel["title"], t["expr"])


def _panel(dashboard, title):
    matches = [p for p in dashboard_panels(dashboard) if p["title"] == title]
    assert len(matches) == 1, f"panel {title!r} not found"
    return matches[0]


def test_reward_and_kl_share_a_panel_with_two_axes(dashboard):
    p = _panel(dashboard, "Reward and KL")
    exprs = {t["refId"]: t["expr"] for t in p["targets"]}
    assert "verl_training_reward" in exprs["A"] and "verl_training_kl" in exprs["B"]
    (ov,) = [o for o in p["fieldConfig"]["overrides"] if o["matcher"] == {"id": "byFrameRefID", "options": "B"}]
    assert {"id": "custom.axisPlacement", "value": "right"} in ov["properties"]


def test_required_panels(dashboard):
    titles = {p["title"] for p in dashboard_panels(dashboard)}
    for t in (
        "Losses",
        "Entropy",
        "Gradient norm",
        "Tokens/s per GPU",
        "Step time",
        "Time per step by stage (stacked)",
        "Trajectory latency",
        "Slowest trajectories",
        "GPU utilisation per rank",
        "GPU memory per rank",
        "Sample generations",
    ):
        assert t in titles, t


def test_stage_breakdown_is_stacked(dashboard):
    p = _panel(dashboard, "Time per step by stage (stacked)")
    assert p["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    assert "verl_stage" in p["targets"][0]["legendFormat"]


def test_slowest_trajectories_is_a_traceql_table(dashboard):
    p = _panel(dashboard, "Slowest trajectories")
    assert p["type"] == "table" and _resolved(dashboard, p["datasource"]) == "tempo"
    (t,) = p["targets"]
    assert t["queryType"] == "traceql" and "duration >" in t["query"] and "resource.verl.run.id" in t["query"]
    # each step's slowest, whose tree the agent-loop workers always export (hooks/rollout/keep.py)
    assert f"span.{semconv.ATTR_ROLLOUT_SLOWEST_RANK} = 1 ||" in t["query"]
    assert f"span.{semconv.ATTR_ROLLOUT_KEPT_BECAUSE}" in t["query"]


def test_sample_generations_come_from_loki(dashboard):
    p = _panel(dashboard, "Sample generations")
    assert p["type"] == "logs" and _resolved(dashboard, p["datasource"]) == "loki"
    assert "verl_sample_reward" in p["targets"][0]["expr"]


def test_alert_annotations(dashboard):
    anns = [a for a in dashboard["annotations"]["list"] if _resolved(dashboard, a["datasource"]) == "prometheus"]
    assert anns and all("ALERTS" in a["expr"] and "$run" in a["expr"] for a in anns)


def _substitute_grafana_vars(expr: str) -> str:
    expr = expr.replace("$$", "$")
    expr = expr.replace("{$__tags}", '{verl_run_id="x"}')
    expr = re.sub(r"\$__(rate_)?interval|\$__range", "5m", expr)
    expr = re.sub(r"\$\{(\w+)(:\w+)?\}|\$(\w+)", ".*", expr)
    return expr


def test_dashboard_promql_parses(tmp_path):
    """Every Prometheus query of the dashboard and the data-source links is
    valid PromQL (checked by promtool, Grafana variables substituted)."""
    promtool = require_tool("promtool")
    exprs = [e for _, kind, e in dashboard_prom_exprs() if kind == "expr"]
    exprs += [e for _, e in datasource_prom_exprs()]
    assert len(exprs) >= 25
    rules = [{"record": f"dashboard:expr_{i}", "expr": _substitute_grafana_vars(e)} for i, e in enumerate(exprs)]
    f = tmp_path / "dashboard-exprs.yaml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    res = run_tool([promtool, "check", "rules", str(f)])
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(rules)} rules found" in res.stdout


def test_promql_parse_check_can_fail(tmp_path):
    promtool = require_tool("promtool")
    f = tmp_path / "bad.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "g",
                        "rules": [
                            {
                                "record": "x:y",
                                "expr": _substitute_grafana_vars(
                                    'sum by (le (rate(foo_bucket{a=~"$run"}[$__rate_interval]))'
                                ),
                            }
                        ],
                    }
                ]
            }
        )
    )
    assert run_tool([promtool, "check", "rules", str(f)]).returncode != 0
