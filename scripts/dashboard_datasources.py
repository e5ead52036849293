"""Make the kit's dashboards importable into any Grafana: data-source variables instead of fixed UIDs.

    python scripts/dashboard_datasources.py          # rewrite collector/grafana/dashboards/*.json
    python scripts/dashboard_datasources.py --check  # exit 1 when a dashboard is not rewritten yet

For each dashboard, idempotently (run it again after adding panels):

* every data-source reference ``{"type": T, "uid": <the kit's provisioned UID of type T>}``
  (collector/grafana/provisioning/datasources/datasources.yaml: ``prometheus``, ``tempo``,
  ``loki``) becomes ``{"type": T, "uid": "${ds_T}"}``;
* a data-source variable ``ds_T`` of plugin T is added in front of the other variables for each
  T the dashboard uses. Its default is ``${DS_T}``: Grafana's importer ("Import dashboard", or
  the API with ``inputs``) asks for a data source of each ``__inputs`` entry and writes the
  chosen one's UID there. Provisioned as a file (the kit's compose stack), nothing replaces
  ``${DS_T}``, so the variable falls back to the data source of that type (the kit has one of
  each);
* ``__inputs`` names those inputs and ``__requires`` the plugins, as Grafana's own "Export for
  sharing externally" writes them.

Queries are not touched. The tests (tests/ops/test_ops_grafana.py) resolve ``${ds_T}`` back to the
kit's data source of that type and fail on any fixed UID left.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
DASHBOARDS = REPO / "collector" / "grafana" / "dashboards"
DATASOURCES = REPO / "collector" / "grafana" / "provisioning" / "datasources" / "datasources.yaml"
COMPOSE = REPO / "collector" / "compose.yaml"
# the data sources a dashboard may use, in the order their variables and inputs are listed
PLUGINS = {"prometheus": "Prometheus", "tempo": "Tempo", "loki": "Loki"}


def variable_name(plugin: str) -> str:
    """The dashboard variable that picks the data source of ``plugin``."""
    return f"ds_{plugin}"


def input_name(plugin: str) -> str:
    """The ``__inputs`` entry Grafana's importer asks for (``${DS_PROMETHEUS}`` in the JSON)."""
    return f"DS_{plugin.upper()}"


def provisioned_uids() -> dict[str, str]:
    """plugin -> the UID the kit provisions for it."""
    return {d["type"]: d["uid"] for d in yaml.safe_load(DATASOURCES.read_text())["datasources"] if d["type"] in PLUGINS}


def grafana_version() -> str:
    image = yaml.safe_load(COMPOSE.read_text())["services"]["grafana"]["image"]
    return image.rsplit(":", 1)[1]


def _rewrite_refs(node: Any, uids: dict[str, str], used: set[str]) -> None:
    if isinstance(node, dict):
        ds = node.get("datasource")
        if isinstance(ds, dict) and ds.get("type") in PLUGINS:
            plugin = ds["type"]
            if ds.get("uid") == uids.get(plugin):
                ds["uid"] = "${" + variable_name(plugin) + "}"
            if ds.get("uid") == "${" + variable_name(plugin) + "}":
                used.add(plugin)
        for value in node.values():
            _rewrite_refs(value, uids, used)
    elif isinstance(node, list):
        for value in node:
            _rewrite_refs(value, uids, used)


def _variable(plugin: str) -> dict[str, Any]:
    default = "${" + input_name(plugin) + "}"
    return {
        "type": "datasource",
        "name": variable_name(plugin),
        "label": PLUGINS[plugin],
        "query": plugin,
        "regex": "",
        "refresh": 1,
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "current": {"selected": False, "text": default, "value": default},
        "options": [],
    }


def rewrite(dashboard: dict[str, Any], uids: dict[str, str], version: str) -> dict[str, Any]:
    """``dashboard`` with data-source variables (see the module's docstring); the same when done already."""
    used: set[str] = set()
    _rewrite_refs(dashboard, uids, used)
    plugins = [p for p in PLUGINS if p in used]
    variables = dashboard.setdefault("templating", {}).setdefault("list", [])
    others = [v for v in variables if not (v.get("type") == "datasource" and v.get("query") in PLUGINS)]
    mine = {v["query"]: v for v in variables if v not in others}
    variables[:] = [mine.get(p) or _variable(p) for p in plugins] + others
    inputs = [
        {
            "name": input_name(p),
            "label": PLUGINS[p],
            "description": f"the {PLUGINS[p]} data source of the otel-verl telemetry",
            "type": "datasource",
            "pluginId": p,
            "pluginName": PLUGINS[p],
        }
        for p in plugins
    ]
    requires = [{"type": "grafana", "id": "grafana", "name": "Grafana", "version": version}] + [
        {"type": "datasource", "id": p, "name": PLUGINS[p], "version": "1.0.0"} for p in plugins
    ]
    rest = {k: v for k, v in dashboard.items() if k not in ("__inputs", "__requires")}
    return {"__inputs": inputs, "__requires": requires, **rest}


def text(dashboard: dict[str, Any]) -> str:
    return json.dumps(dashboard, indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say which dashboards are not rewritten")
    args = parser.parse_args(argv)
    uids, version = provisioned_uids(), grafana_version()
    stale = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        before = path.read_text(encoding="utf-8")
        after = text(rewrite(json.loads(before), uids, version))
        if after == before:
            continue
        stale.append(path)
        if not args.check:
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(after, encoding="utf-8")
            tmp.replace(path)
    for path in stale:
        print(f"{'not rewritten' if args.check else 'rewrote'}: {path.relative_to(REPO)}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
