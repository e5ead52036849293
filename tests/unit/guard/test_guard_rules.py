"""Guard rules (``otel_verl.guard.rules``): each kind fires once per episode, files are checked,
and the built-in thresholds are the ones the Prometheus alerts use."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from otel_verl.guard.rules import Evaluator, RuleError, load_rules, parse_rules

ALERTS = Path(__file__).resolve().parents[3] / "collector" / "prometheus" / "rules" / "verl-alerts.yaml"
NAN = float("nan")


def rule(**fields):
    return parse_rules({"rules": [{"name": "r", **fields}]})


def run(rules, series, key="k"):
    """Feed ``series`` (one value per step from 1) and return the steps at which a rule fired."""
    ev = Evaluator(rules)
    return [step for step, v in enumerate(series, start=1) for _ in ev.step({key: v}, step)]


def test_nonfinite_fires_once_per_episode_and_rearms():
    r = rule(kind="nonfinite", keys=["*loss*"])
    assert run(r, [1.0, NAN, NAN, 1.0, float("inf")], key="actor/pg_loss") == [2, 5]
    assert run(r, [NAN], key="critic/score/mean") == []  # not one of its keys


def test_above_needs_for_steps_in_a_row():
    r = rule(kind="above", keys=["actor/ppo_kl"], threshold=0.2, for_steps=3)
    assert run(r, [0.3, 0.3, 0.1, 0.3, 0.3, 0.3, 0.3], key="actor/ppo_kl") == [6]


def test_below_and_ratio_below():
    assert run(rule(kind="below", keys=["k"], threshold=0.5), [1, 0.4, 0.3, 1, 0.1]) == [2, 5]
    r = rule(kind="ratio_below", keys=["k"], ratio=0.25, window=4, min_steps=3)
    assert run(r, [2, 2, 2, 2, 0.4, 0.4]) == [5]  # 0.4 / 2 = 0.2 < 0.25


def test_drop_from_the_recent_mean_ignores_baselines_near_zero():
    r = rule(kind="drop", keys=["k"], fraction=0.5, window=5, min_baseline=0.05, min_steps=3, for_steps=2)
    assert run(r, [1, 1, 1, 0.4, 0.4, 0.4]) == [5]
    assert run(r, [0.01, 0.01, 0.01, 0.001, 0.001]) == []  # |baseline| <= min_baseline
    assert run(r, [-1, -1, -1, -1.6, -1.6]) == [5]  # negative rewards: the sign stays right


def test_spike_against_the_recent_median():
    r = rule(kind="spike", keys=["actor/grad_norm"], factor=5, window=10, min_steps=3)
    assert run(r, [1, 1.2, 0.9, 1, 6, 1, 30], key="actor/grad_norm") == [5, 7]
    assert run(r, [1, 6], key="actor/grad_norm") == []  # not enough history yet


def test_non_numeric_values_are_skipped():
    r = rule(kind="above", keys=["*"], threshold=0)
    assert Evaluator(r).step({"text": "x", "vector": [1, 2], "k": 1}, 1)[0].key == "k"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "sometimes", "keys": ["k"]}, "kind must be one of"),
        ({"kind": "above", "keys": ["k"]}, "needs threshold"),
        ({"kind": "above", "keys": [], "threshold": 1}, "keys must be"),
        ({"kind": "above", "keys": ["k"], "threshold": "high"}, "threshold must be a number"),
        ({"kind": "above", "keys": ["k"], "threshold": 1, "for_steps": 0}, "whole number"),
        ({"kind": "above", "keys": ["k"], "threshold": 1, "thresold": 2}, "unknown field"),
    ],
)
def test_bad_rules_say_which_rule_and_why(fields, message):
    with pytest.raises(RuleError, match=message):
        rule(**fields)


def test_a_rules_file_in_yaml_or_json(tmp_path):
    doc = {"rules": [{"name": "kl", "kind": "above", "keys": ["actor/ppo_kl"], "threshold": 0.1}]}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "r.json").write_text(json.dumps(doc))
    assert load_rules(str(tmp_path / "r.yaml")) == load_rules(str(tmp_path / "r.json"))
    with pytest.raises(RuleError, match="cannot read"):
        load_rules(str(tmp_path / "missing.yaml"))
    (tmp_path / "bad.yaml").write_text("rules: [")
    with pytest.raises(RuleError, match="not valid YAML"):
        load_rules(str(tmp_path / "bad.yaml"))


def _alert_exprs(name: str) -> list[str]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [r["expr"] for g in groups for r in g["rules"] if r.get("alert") == name]


def _numbers(expr: str) -> set[float]:
    return {float(n) for n in re.findall(r"[<>]\s*(-?\d+(?:\.\d+)?)", expr)}


@pytest.mark.parametrize("r", load_rules(), ids=lambda r: r.name)
def test_built_in_rules_share_their_thresholds_with_the_prometheus_alerts(r):
    assert r.alert, f"{r.name}: every built-in rule names its Prometheus alert"
    exprs = _alert_exprs(r.alert)
    assert exprs, f"{r.alert} is not in {ALERTS.name}"
    numbers = set().union(*(_numbers(e) for e in exprs))
    if r.limit is not None:
        assert r.limit in numbers, f"{r.name}: {r.limit} not among {r.alert}'s thresholds {sorted(numbers)}"
    if r.min_baseline:
        assert r.min_baseline in numbers


def test_built_in_rules_cover_what_the_issue_asks():
    kinds = {r.name: r.kind for r in load_rules()}
    assert kinds == {
        "nonfinite": "nonfinite",
        "kl_high": "above",
        "reward_collapse": "drop",
        "entropy_collapse": "ratio_below",
        "grad_norm_spike": "spike",
    }
