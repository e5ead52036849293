"""Guard rules (``otel_verl.hooks.guard.rules``): each kind fires once per episode (the trends too, in
O(1) per step), files are checked, each rule's action is resolved (its ``OTEL_VERL_GUARD_ACTIONS``
entry, its own, the global one), and the built-in thresholds are the ones the Prometheus alerts use."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest
import yaml

from otel_verl.hooks.guard.rules import (
    MAX_FILE_BYTES,
    MAX_RULES,
    TRENDS,
    Evaluator,
    RuleError,
    RulesLoad,
    load_rules,
    parse_rules,
    read_rules_file,
    resolve_actions,
)

REPO = Path(__file__).resolve().parents[4]
ALERTS = REPO / "collector" / "prometheus" / "rules" / "verl-alerts.yaml"
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


def test_rise_compares_the_last_windows_mean_with_the_one_before():
    r = rule(kind="rise", keys=["actor/grad_norm"], factor=2, window=3)
    calm = [1.0, 1.2, 0.8] * 4
    assert run(r, calm, key="actor/grad_norm") == []
    # a steady climb, no single spike (never 2x the step before): fires once both windows are full
    assert run(r, [1, 1, 1, 1.5, 3, 4, 6, 9, 12], key="actor/grad_norm") == [6]
    assert run(r, [1, 1, 1, 1, 1]) == []  # not one of its keys
    ev = Evaluator(r)
    fired = [f for step, v in enumerate([1, 1, 1, 4, 4, 4], 1) for f in ev.step({"actor/grad_norm": v}, step)]
    (f,) = fired
    assert (f.step, f.value, f.baseline) == (6, 4.0, 1.0)  # the two windows' means
    assert "mean over the last 3 steps 4 is above 2x its mean over the 3 before 1" in f.describe()


def test_rise_rearms_after_the_trend_ends_and_ignores_baselines_near_zero():
    r = rule(kind="rise", keys=["k"], factor=2, window=2, min_baseline=0.01)
    # fires at 4 (mean 3 vs 1); stays on while rising; off once the last 2 are not 2x the 2 before;
    # fires again on the next climb
    assert run(r, [1, 1, 3, 3, 7, 7, 7, 7, 7, 7, 20, 20]) == [4, 12]
    assert run(r, [0.001, 0.001, 0.005, 0.005]) == []  # |earlier mean| <= min_baseline
    assert run(r, [-2, -2, -8, -8]) == []  # a negative mean that grows in size is no rise


def test_fall_is_a_relative_fall_of_the_windowed_mean():
    r = rule(kind="fall", keys=["actor/entropy"], fraction=0.5, window=3, min_baseline=0.05)
    assert run(r, [2, 2, 2, 1.8, 1.5, 1.2, 1.0, 0.9, 0.8], key="actor/entropy") == []  # a slow decline
    assert run(r, [2, 2, 2, 1.2, 0.6, 0.3], key="actor/entropy") == [6]  # 0.7 is 65% below 2
    assert run(r, [0.04, 0.04, 0.04, 0.0, 0.0, 0.0], key="actor/entropy") == []  # near 0: means nothing


def test_trends_skip_non_finite_values_and_stay_bounded():
    r = rule(kind="rise", keys=["k"], factor=2, window=4)
    ev = Evaluator(r)
    for step in range(1, 10_001):
        ev.step({"k": NAN if step % 7 == 0 else 1.0 + (step % 3)}, step)
    (track,) = ev._tracks.values()
    assert len(track.trend.recent) == len(track.trend.earlier) == 4  # two windows, whatever the run's length
    assert len(track.history) == 0
    # the running sums equal the windows' exact sums: no rounding piled up over 10,000 steps
    assert track.trend.recent_sum == pytest.approx(sum(track.trend.recent), rel=1e-12)
    assert track.trend.earlier_sum == pytest.approx(sum(track.trend.earlier), rel=1e-12)
    # a huge value and back: the sums come back to the exact ones (no inf - inf left behind)
    for step, v in enumerate([1e308, 1e308, 1, 1, 1, 1, 1, 1, 1, 1], start=20_000):
        ev.step({"k": v}, step)
    assert track.trend.recent_sum == 4 and track.trend.earlier_sum == 4


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
        ({"kind": "rise", "keys": ["k"], "window": 3}, "needs factor"),
        ({"kind": "fall", "keys": ["k"], "fraction": 0.5}, "needs window"),
        ({"kind": "rise", "keys": ["k"], "factor": 2, "window": 10**9}, "window must be at most"),
        ({"kind": "above", "keys": ["k"], "threshold": 1, "action": "panic"}, "action must be one of"),
        ({"kind": "above", "keys": ["k"], "threshold": 1, "action": "observe"}, "action must be one of"),
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
    from otel_verl.hooks.guard import rules as rules_module

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


@pytest.mark.parametrize("r", [r for r in load_rules() if r.kind not in TRENDS], ids=lambda r: r.name)
def test_built_in_rules_share_their_thresholds_with_the_prometheus_alerts(r):
    assert r.alert, f"{r.name}: every built-in rule but the trends names its Prometheus alert"
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
        "kl_blowup": "above",
        "reward_collapse": "drop",
        "entropy_collapse": "ratio_below",
        "grad_norm_spike": "spike",
        "grad_norm_rise": "rise",
        "entropy_fall": "fall",
        "rollout_policy_mismatch": "below",
        "degenerate_responses": "above",
    }
    # the trends warn, they never stop a run by themselves; the others do what OTEL_VERL_GUARD_ACTION says
    assert {r.name: r.action for r in load_rules() if r.action} == {"grad_norm_rise": "alert", "entropy_fall": "alert"}


def test_an_action_in_the_setting_beats_the_rules_own_which_beats_the_global_one():
    rules = parse_rules(
        {
            "rules": [
                {"name": "kl_blowup", "kind": "above", "keys": ["k"], "threshold": 0.5},
                {"name": "grad_norm_spike", "kind": "spike", "keys": ["g"], "factor": 5, "window": 20},
                {"name": "grad_norm_rise", "kind": "rise", "keys": ["g"], "factor": 3, "window": 10, "action": "alert"},
                {"name": "nonfinite", "kind": "nonfinite", "keys": ["*"], "action": "stop"},
            ]
        }
    )
    assert resolve_actions(rules, (), "record") == (
        {"kl_blowup": "record", "grad_norm_spike": "record", "grad_norm_rise": "alert", "nonfinite": "stop"},
        [],
    )
    # "stop on KL blow-up, page on grad-norm spikes, record the rest": the last matching entry wins
    by_rule = (("*", "record"), ("kl_blowup", "stop"), ("grad_norm_*", "alert"), ("kl_blwup", "stop"))
    actions, unmatched = resolve_actions(rules, by_rule, "alert")
    assert actions == {
        "kl_blowup": "stop",
        "grad_norm_spike": "alert",
        "grad_norm_rise": "alert",
        "nonfinite": "record",
    }
    assert unmatched == ["kl_blwup=stop"]  # a typo matches no rule: said, not guessed


def test_a_rule_set_off_is_not_evaluated():
    rules = parse_rules({"rules": [{"name": "a", "kind": "above", "keys": ["k"], "threshold": 0}]})
    actions, _ = resolve_actions(rules, (("a", "off"),), "stop")
    assert actions == {"a": "off"}


def test_the_recipes_of_the_guard_page_are_settings_that_work(monkeypatch, caplog):
    """Every ``OTEL_VERL_GUARD_ACTIONS`` of docs/guard.md parses whole and names built-in rules only;
    the first is "stop on KL blow-up, page on grad-norm spikes, record the rest"."""
    from otel_verl import config

    recipes = re.findall(r'OTEL_VERL_GUARD_ACTIONS="([^"]+)"', (REPO / "docs" / "guard.md").read_text())
    assert len(recipes) >= 3
    for raw in recipes:
        monkeypatch.setenv(config.GUARD_ACTIONS_BY_RULE, raw)
        config.settings.cache_clear()
        with caplog.at_level("WARNING"):
            s = config.settings()
        assert not caplog.records, raw
        actions, unmatched = resolve_actions(load_rules(), s.guard_actions, s.guard_action)
        assert not unmatched, raw
        if raw == recipes[0]:
            named = {"kl_blowup": "stop", "grad_norm_spike": "alert", "grad_norm_rise": "alert"}
            assert actions == {**{name: "record" for name in actions}, **named}
            assert set(actions.values()) == {"stop", "alert", "record"}
    config.settings.cache_clear()


def test_rollout_policy_mismatch_fires_on_two_steps_of_a_collapsed_correlation():
    """verl's key: a correlation NaN (no valid token) neither fires nor breaks the streak's count."""
    (r,) = [r for r in load_rules() if r.name == "rollout_policy_mismatch"]
    key = "training/rollout_actor_probs_pearson_corr"
    assert run((r,), [0.997, 0.3, 0.99, 0.2, 0.1, 0.1, 0.99, 0.4, 0.4], key=key) == [5, 9]
    assert run((r,), [0.997, NAN, 0.3], key=key) == []
