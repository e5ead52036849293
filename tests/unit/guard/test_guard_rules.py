"""Guard rules (``otel_verl.guard.rules``): each kind fires once per episode, files are checked,
and the built-in thresholds are the ones the Prometheus alerts use."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest
import yaml

from otel_verl.guard.rules import (
    MAX_FILE_BYTES,
    MAX_RULES,
    Evaluator,
    RuleError,
    RulesLoad,
    load_rules,
    parse_rules,
    read_rules_file,
)

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


def _in_a_thread(fn, *args):
    """``fn(*args)`` on a thread of its own: (finished, its result or exception). A read that
    waits for a FIFO's writer is still running after the (generous) join."""
    out = {}

    def run():
        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["value"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    return not thread.is_alive(), out.get("value")


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "rules.fifo"
    os.mkfifo(fifo)
    finished, result = _in_a_thread(load_rules, str(fifo))
    if not finished:  # the reader still waits (the defect): give it its end of file, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert finished, "reading the rules file waited for a FIFO writer"
    assert isinstance(result, RuleError) and "not a regular file" in str(result)


def test_devices_folders_and_big_files_are_refused(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("rules: []\n" + "#" * MAX_FILE_BYTES)
    cases = [(str(big), "larger than"), (str(tmp_path), "not a regular file")]
    if os.path.exists("/dev/zero"):
        cases.append(("/dev/zero", "not a regular file"))
    for path, message in cases:
        with pytest.raises(RuleError, match=message):
            read_rules_file(path)
    with pytest.raises(RuleError, match="not UTF-8"):
        (tmp_path / "latin1.yaml").write_bytes(b"rules: []  # caf\xe9\n")
        read_rules_file(str(tmp_path / "latin1.yaml"))
    with pytest.raises(RuleError, match="more than"):
        doc = {"rules": [{"name": f"r{i}", "kind": "nonfinite", "keys": ["*"]} for i in range(MAX_RULES + 1)]}
        (tmp_path / "many.json").write_text(json.dumps(doc))
        load_rules(str(tmp_path / "many.json"))


def test_the_rules_file_is_read_on_a_thread_of_its_own(tmp_path, monkeypatch):
    from otel_verl.guard import rules as rules_module

    (tmp_path / "r.yaml").write_text("rules: [{name: kl, kind: above, keys: [actor/ppo_kl], threshold: 0.1}]\n")
    readers = []
    read = rules_module.read_rules_file
    monkeypatch.setattr(
        rules_module, "read_rules_file", lambda path: readers.append(threading.current_thread()) or read(path)
    )
    loaded, problem = RulesLoad(str(tmp_path / "r.yaml")).result(60)
    assert problem is None and [r.name for r in loaded] == ["kl"]
    assert readers and readers[0] is not threading.current_thread() and readers[0].daemon
    loaded, problem = RulesLoad(str(tmp_path / "missing.yaml")).result(60)
    assert loaded is None and "cannot read" in problem


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
        "rollout_policy_mismatch": "below",
    }


def test_rollout_policy_mismatch_fires_on_two_steps_of_a_collapsed_correlation():
    """verl's key: a correlation NaN (no valid token) neither fires nor breaks the streak's count."""
    (r,) = [r for r in load_rules() if r.name == "rollout_policy_mismatch"]
    key = "training/rollout_actor_probs_pearson_corr"
    assert run((r,), [0.997, 0.3, 0.99, 0.2, 0.1, 0.1, 0.99, 0.4, 0.4], key=key) == [5, 9]
    assert run((r,), [0.997, NAN, 0.3], key=key) == []
