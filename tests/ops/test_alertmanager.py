"""collector/alertmanager/alertmanager.yml."""

from __future__ import annotations

import yaml
from support.opskit import ALERTMANAGER_CONFIG, load_yaml, require_tool, run_tool


def test_amtool_check_config():
    amtool = require_tool("amtool")
    res = run_tool([amtool, "check-config", str(ALERTMANAGER_CONFIG)])
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout + res.stderr


def test_amtool_rejects_undefined_receiver(tmp_path):
    """The check above can fail: a route to an unknown receiver is an error."""
    amtool = require_tool("amtool")
    cfg = load_yaml(ALERTMANAGER_CONFIG)
    cfg["route"]["receiver"] = "does-not-exist"
    bad = tmp_path / "alertmanager.yml"
    bad.write_text(yaml.safe_dump(cfg))
    res = run_tool([amtool, "check-config", str(bad)])
    assert res.returncode != 0


def test_webhook_receiver_and_run_grouping():
    cfg = load_yaml(ALERTMANAGER_CONFIG)
    receivers = {r["name"]: r for r in cfg["receivers"]}
    assert cfg["route"]["receiver"] in receivers
    hooks = [w for r in receivers.values() for w in r.get("webhook_configs", [])]
    assert hooks and all(w["url"].startswith("http") for w in hooks)
    assert {"alertname", "verl_run_id"} <= set(cfg["route"]["group_by"])
    for route in cfg["route"].get("routes", []):
        assert route["receiver"] in receivers
