"""The guard on the real CPU trainer: a reward function that turns NaN from a given step
(``VERL_CPU_HARNESS_NAN_REWARD_AFTER``: 8 trajectories per step, so reward call 8 x (N - 1) + 1 on is NaN).

* ``stop`` (both drivers), with verl saving every 2 steps and keeping one checkpoint
  (``trainer.max_actor_ckpt_to_keep=1``), NaN from step 3, and before it a gradient norm that
  climbs (``VERL_CPU_HARNESS_REWARD_GROWTH``: the reward x100 each step, GRPO without its division
  by the group's std), watched by the built-in rules plus a short trend rule (``grad_norm_climb``:
  ``rise``, window 1, ``action: alert``; the built-in trends need 20 steps): the trend alerts at
  step 2 and training goes on, as docs/guard.md's "everything stops, the early warnings only page"
  recipe says (``OTEL_VERL_GUARD_ACTION=stop``); the NaN rule stops it after step 3 with rc 0
  (v1: with ``OTEL_VERL_GUARD_EXIT_CODE=3``, rc 3); verl's good checkpoint of step 2 is still
  whole, the guard's checkpoint of step 3 (through verl's own path) is in its own folder, verl's
  tracker still names step 2, the stop marker says both; the guard's span, log record and
  counter exported; resuming with ``trainer.resume_mode=auto`` continues from verl's good step 2
  at step 3 (and removes the marker), and there, with the guard on ``checkpoint``, verl's own
  later save (keep 1) spares the guard's checkpoint: the workers never counted it.
* the shipped alert rules, on the series the stopped run exported (``promreplay``): the NaN/Inf
  alerts name exactly the keys verl logged as NaN, the guard's alert its rule, the heartbeat's
  alert the run's end; all silent at step 1.
* per-rule actions (v1; ``OTEL_VERL_GUARD_ACTION=observe``, the former name of ``alert``, and a user
  rules file): each rule fires once per episode; at step 2 ``nonfinite`` alerts and ``kl_drift``
  (``action: record`` in the file, a KL rule with a tiny threshold, as for a drifting run) is only
  recorded: training goes on, no checkpoint; at step 3 ``long_run`` (``alert`` in the file,
  ``stop`` by ``OTEL_VERL_GUARD_ACTIONS``) stops training after that step with the guard's
  checkpoint; on the series the run exported, ``VerlGuardTriggered`` fires for the alerting and the
  stopping rule and never for the recorded one.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from support.opskit import require_tool
from support.promreplay import Replay, run_series
from verl_cpu_harness import checkpoint_callback as user_callback

from otel_verl import semconv

pytestmark = pytest.mark.e2e

NAN_AFTER = "8"  # train_batch_size 4 x rollout.n 2 = 8 reward calls per step; no validation before
STEPS = 4
STOP_NAN_AFTER = "16"  # the stop runs: NaN from step 3, after verl's own checkpoint of step 2
# verl saves step 2 and keeps 1 checkpoint (disk-saving users): the guard's must not evict it
STOP_CHECKPOINTS = ["trainer.save_freq=2", "trainer.max_actor_ckpt_to_keep=1", "trainer.max_critic_ckpt_to_keep=1"]
# the early warning before the NaN: the reward x GROWTH each step (8 reward calls per step); without
# GRPO's division by the group's std the advantages, and the gradient norm, grow with it
GROWTH = 100
TREND = "grad_norm_climb"
TREND_RULE = (
    f'  - {{name: {TREND}, kind: rise, keys: ["actor/grad_norm"], factor: 3, window: 1, min_baseline: 1.0e-9,'
    " action: alert}\n"
)
EXIT_CODE = {"v0": 0, "v1": 3}  # v0: the default (rc 0, as a finished run); v1: one asked for
# v1: the user's own checkpoint callback (verl 0.9.1's trainer.checkpoint_callback_class), which
# otel-verl's checkpoint hook chains: called once per save, the guard's too (verl's own save path)
USER_CALLBACK = {"v0": [], "v1": [f"trainer.checkpoint_callback_class={user_callback.FQN}"]}


def _guard_run(run_instrumented, workdir, driver, action, *, extra=(), env=None, steps=STEPS):
    return run_instrumented(
        workdir,
        driver,
        "grpo",
        steps=steps,
        val_before_train=False,
        extra=list(extra),
        env={"OTEL_VERL_GUARD_ACTION": action, **(env or {})},
    )


def _records(run) -> list[dict]:
    out = []
    for path in run.telemetry_dir.glob("logs-*.jsonl"):
        for line in path.read_text().splitlines():
            for rl in json.loads(line).get("resourceLogs", []):
                for sl in rl["scopeLogs"]:
                    out += sl["logRecords"]
    return out


@pytest.fixture(scope="module", params=["v0", "v1"])
def stopped(request, tmp_path_factory, run_verl_instrumented):
    from otel_verl.hooks.guard.rules import default_rules_text

    workdir = tmp_path_factory.mktemp(f"guard-stop-{request.param}")
    rules = workdir / "rules.yaml"
    rules.write_text(default_rules_text().rstrip("\n") + "\n" + TREND_RULE)  # the built-in rules and the trend
    env = {
        "VERL_CPU_HARNESS_NAN_REWARD_AFTER": STOP_NAN_AFTER,
        "VERL_CPU_HARNESS_REWARD_GROWTH": f"8:{GROWTH}",
        "OTEL_VERL_GUARD_RULES": str(rules),
    }
    if EXIT_CODE[request.param]:
        env["OTEL_VERL_GUARD_EXIT_CODE"] = str(EXIT_CODE[request.param])
    extra = [*STOP_CHECKPOINTS, *USER_CALLBACK[request.param], "algorithm.norm_adv_by_std_in_grpo=False"]
    run = _guard_run(run_verl_instrumented, workdir, request.param, "stop", env=env, extra=extra)
    return workdir, request.param, run, run_verl_instrumented


def test_stop_ends_after_the_bad_step_with_its_exit_code_and_a_checkpoint(stopped):
    workdir, driver, run, _ = stopped
    assert run.returncode == EXIT_CODE[driver], run.output[-3000:]
    assert sorted(run.console) == [1, 2, 3], sorted(run.console)  # verl logged NaN at step 3, then stopped
    assert run.console[3]["actor/pg_loss"] != run.console[3]["actor/pg_loss"]  # NaN, as verl logged it
    assert "otel-verl guard: rule nonfinite at step 3: actor/pg_loss=nan is not finite; action: stop" in run.output
    assert "otel-verl guard: stopping training after step 3" in run.output
    ckpt = workdir / "checkpoints"
    assert sorted(p.name for p in (ckpt / "global_step_2" / "actor").iterdir())  # verl's good one, not evicted
    assert sorted(p.name for p in (ckpt / "otel-verl-guard" / "global_step_3" / "actor").iterdir())  # the guard's
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"  # resume: the good step
    assert not (ckpt / "global_step_3").exists()
    assert f"trainer.resume_mode=auto resumes from {ckpt / 'global_step_2'}" in run.output
    marker = json.loads((ckpt / "otel-verl-guard-stop.json").read_text())  # for a scheduler to read
    assert marker["step"] == 3 and "nonfinite" in marker["rules"] and marker["exit_code"] == EXIT_CODE[driver]
    assert marker["checkpoint"] == str(ckpt / "otel-verl-guard" / "global_step_3")
    assert marker["resume"] == "last_good" and marker["resumes_from"] == str(ckpt / "global_step_2")
    if EXIT_CODE[driver]:
        assert f"exiting with {EXIT_CODE[driver]} (OTEL_VERL_GUARD_EXIT_CODE)" in run.output
    if USER_CALLBACK[driver]:  # once per save: verl's of step 2, the guard's of step 3
        saved = [(s["step"], s["dir"], s["async"]) for s in user_callback.saves(workdir)]
        assert saved == [
            (2, str(ckpt / "global_step_2"), False),
            (3, str(ckpt / "otel-verl-guard" / "global_step_3"), False),
        ]
    steps = [s.attributes.get(semconv.ATTR_STEP) for s in run.spans if s.name == semconv.SPAN_STEP]
    assert sorted(steps) == [1, 2, 3], steps  # one span per step: the step callbacks add none beside the timer's


def test_stop_exports_the_span_event_log_record_and_counter(stopped):
    _, _, run, _ = stopped
    (step3,) = [s for s in run.spans if s.name == semconv.SPAN_STEP and s.attributes.get(semconv.ATTR_STEP) == 3]
    (span,) = [s for s in run.spans if s.name == semconv.SPAN_GUARD and s.trace_id == step3.trace_id]
    assert span.parent_id == step3.span_id  # in that step's trace
    events = span.event_attributes(semconv.EVENT_GUARD_TRIGGERED)
    keys = {e[semconv.ATTR_METRIC_KEY] for e in events}
    assert {"actor/pg_loss", "actor/grad_norm", "critic/score/mean"} <= keys
    assert {(e[semconv.ATTR_GUARD_RULE], e[semconv.ATTR_GUARD_ACTION]) for e in events} == {("nonfinite", "stop")}
    records = [r for r in _records(run) if r.get("eventName") == semconv.EVENT_GUARD_TRIGGERED]
    records = [r for r in records if r["traceId"] == step3.trace_id]
    assert len(records) == len(events) and all(r["severityText"] == "WARNING" for r in records)
    counted = [p for p in run.points if p.name == semconv.M_GUARD_TRIGGERED]
    stops = [p.value for p in counted if p.attributes.get(semconv.ATTR_GUARD_ACTION) == "stop"]
    assert stops and max(stops) == len(events)


def test_a_trend_rule_alerts_a_step_before_the_nan_rule_stops_the_run(stopped):
    """The early warning: verl's gradient norm climbs at step 2 (the reward x100) and the trend rule
    alerts there, by its own action, without a checkpoint or a stop; the NaN at step 3 stops."""
    workdir, _, run, _ = stopped
    norms = {n: run.console[n]["actor/grad_norm"] for n in (1, 2)}
    assert norms[2] > 3 * norms[1] > 0, norms  # verl's own values: the climb the rule saw
    fired = {
        (e[semconv.ATTR_GUARD_RULE], s.attributes["verl.step"]): e
        for s in run.spans
        if s.name == semconv.SPAN_GUARD
        for e in s.event_attributes(semconv.EVENT_GUARD_TRIGGERED)
    }
    assert {k for k in fired if k[0] == TREND} == {(TREND, 2)}, sorted(fired)
    assert fired[(TREND, 2)][semconv.ATTR_GUARD_ACTION] == "alert"
    assert semconv.ATTR_GUARD_CHECKPOINT not in fired[(TREND, 2)]
    assert min(step for rule, step in fired if rule == "nonfinite") == 3  # the trend came a step earlier
    assert re.search(
        rf"otel-verl guard: rule {TREND} at step 2: actor/grad_norm's mean over the last 1 steps \S+ is above "
        r"3x its mean over the 1 before \S+; action: alert",
        run.output,
    ), run.output[-3000:]
    assert not (workdir / "checkpoints" / "otel-verl-guard" / "global_step_2").exists()


# The run replayed 60 times slower: its steps of about a second become minutes, as on GPUs.
SLOWER = 60
CRITICAL = re.compile(".*(loss|grad_norm).*")  # the rules' split of verl's keys (critical vs warning)


def test_the_alerts_fire_on_the_series_this_run_exported(stopped, tmp_path):
    # before the resume test below: it runs the job again in the same folder, over these files
    require_tool("promtool")
    _, _, run, _ = stopped
    replay = Replay(run_series(run.telemetry_dir), slower=SLOWER)
    run_id = {s.labels["verl_run_id"] for s in replay.find("verl_training_step")}.pop()
    step1 = replay.after("verl_training_step")  # step 1 exported, the next step not yet
    warned_at = replay.after("verl_guard_triggered_total", verl_guard_rule=TREND)  # step 2's early warning
    fired_at = replay.after("verl_guard_triggered_total", verl_guard_rule="nonfinite")  # the NaN step's firing
    gone = replay.end() + 6 * 60  # the run ended: the heartbeat has not been exported for 5 min
    cleared = replay.end() + 16 * 60  # 10 min without a new NaN, plus the 5 min lookback
    names = ("VerlNonFiniteLossOrGradNorm", "VerlNonFiniteMetric", "VerlGuardTriggered", "VerlTrainingTelemetryLost")
    got = replay.alerts(tmp_path, [(a, t) for a in names for t in (step1, warned_at, fired_at, gone, cleared)])

    def fired(alert, t, label):
        alerts = got[(alert, t)]
        assert {a["verl_run_id"] for a in alerts} <= {run_id}
        return {a.get(label) for a in alerts}

    bad = {
        n: {k for k, v in values.items() if isinstance(v, float) and not math.isfinite(v)}
        for n, values in run.console.items()
    }
    (nan,) = [keys for keys in bad.values() if keys]  # verl's own console: the one step it logged NaN at
    assert {"actor/pg_loss", "actor/grad_norm"} <= nan and not bad[1]
    for alert in names:
        assert not got[(alert, step1)], (alert, got[(alert, step1)])
    assert fired("VerlNonFiniteLossOrGradNorm", fired_at, "verl_metric_key") == {k for k in nan if CRITICAL.match(k)}
    assert fired("VerlNonFiniteMetric", fired_at, "verl_metric_key") == {k for k in nan if not CRITICAL.match(k)}
    assert warned_at < fired_at and fired("VerlGuardTriggered", warned_at, "verl_guard_rule") == {TREND}
    assert not got[("VerlNonFiniteLossOrGradNorm", warned_at)]  # the page before the NaN: the trend's only
    paged = fired("VerlGuardTriggered", fired_at, "verl_guard_rule")
    assert {"nonfinite"} <= paged <= {"nonfinite", TREND}, paged  # the trend's page lasts its 10 min window
    assert fired("VerlTrainingTelemetryLost", gone, "verl_run_id") == {run_id}
    for alert in ("VerlNonFiniteLossOrGradNorm", "VerlNonFiniteMetric", "VerlGuardTriggered"):
        assert not got[(alert, cleared)], alert  # all clear once the run's last NaN is 10 min old


def test_resume_picks_verls_good_checkpoint_and_verls_later_saves_spare_the_guards(stopped):
    """The same job again with ``trainer.resume_mode=auto``, its reward still broken and the guard on
    ``checkpoint``: it resumes from verl's good step 2; the guard checkpoints step 3 again and
    training goes on; verl saves step 4 (its last) keeping 1, and its workers' retention, which
    never counted the guard's checkpoint, removes nothing of it."""
    workdir, driver, _, run_instrumented = stopped
    ckpt = workdir / "checkpoints"
    resumed = _guard_run(
        run_instrumented,
        workdir,
        driver,
        "checkpoint",
        extra=["trainer.resume_mode=auto", *STOP_CHECKPOINTS, *USER_CALLBACK[driver]],
        env={"VERL_CPU_HARNESS_NAN_REWARD_AFTER": STOP_NAN_AFTER},  # the reward's call count goes on: NaN
    )
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert str(ckpt / "global_step_2") in resumed.output  # verl's own "found checkpoint" line
    assert sorted(resumed.console) == [3, 4], sorted(resumed.console)  # from the good step 2, not the NaN 3
    assert not (ckpt / "otel-verl-guard-stop.json").exists()  # the earlier stop's marker
    assert "otel-verl guard: rule nonfinite at step 3" in resumed.output
    assert sorted(p.name for p in (ckpt / "otel-verl-guard" / "global_step_3" / "actor").iterdir())  # kept
    assert sorted(p.name for p in (ckpt / "global_step_4" / "actor").iterdir())  # verl's own last save
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    if USER_CALLBACK[driver]:  # the resumed job's saves, after the stopped one's two: the guard's 3, verl's 4
        assert [s["step"] for s in user_callback.saves(workdir)] == [2, 3, 3, 4]


@pytest.fixture(scope="module")
def observed(tmp_path_factory, run_verl_instrumented):
    workdir = tmp_path_factory.mktemp("guard-observe")
    rules = workdir / "rules.yaml"
    rules.write_text(
        "rules:\n"
        '  - {name: nonfinite, kind: nonfinite, keys: ["*loss*", "*grad_norm*"]}\n'
        '  - {name: kl_drift, kind: above, keys: ["actor/ppo_kl"], threshold: -1, for_steps: 2, action: record}\n'
        # a key the NaN reward leaves finite: true at every step, so it fires at step 3
        '  - {name: long_run, kind: above, keys: ["response_length/mean"], threshold: -1, for_steps: 3,'
        " action: alert}\n"
    )
    env = {
        "VERL_CPU_HARNESS_NAN_REWARD_AFTER": NAN_AFTER,
        "OTEL_VERL_GUARD_RULES": str(rules),
        "OTEL_VERL_GUARD_ACTIONS": "long_run=stop",  # over the file's alert
    }
    return _guard_run(run_verl_instrumented, workdir, "v1", "observe", env=env, steps=STEPS)


def _fired(run) -> dict[tuple[str, int], dict]:
    """(rule, step) -> the attributes of its ``verl.guard.triggered`` event (one key per rule here)."""
    return {
        (e[semconv.ATTR_GUARD_RULE], s.attributes["verl.step"]): e
        for s in run.spans
        if s.name == semconv.SPAN_GUARD
        for e in s.event_attributes(semconv.EVENT_GUARD_TRIGGERED)
        if e[semconv.ATTR_METRIC_KEY] in ("actor/pg_loss", "actor/ppo_kl", "response_length/mean")
    }


def test_each_rule_fires_once_and_acts_by_its_own_action(observed):
    run = observed
    assert run.returncode == 0, run.output[-3000:]
    assert sorted(run.console) == [1, 2, 3]  # recorded and alerted at 2: on; stopped after 3, not 4
    fired = _fired(run)
    assert {k: e[semconv.ATTR_GUARD_ACTION] for k, e in fired.items()} == {
        ("nonfinite", 2): "alert",  # observe: the former name of alert
        ("kl_drift", 2): "record",  # "above" for 2 steps in a row: fires at step 2, and not again at 3
        ("long_run", 3): "stop",
    }
    assert re.search(
        r"otel-verl guard: rule kl_drift at step 2: actor/ppo_kl=\S+ above -1 .*; action: record", run.output
    )
    assert "otel-verl guard: stopping training after step 3" in run.output
    ckpt = run.telemetry_dir.parent / "checkpoints"
    # the stop's checkpoint only: neither the recorded nor the alerting rule saved one
    assert sorted(p.name for p in (ckpt / "otel-verl-guard").glob("global_step_*")) == ["global_step_3"]
    assert semconv.ATTR_GUARD_CHECKPOINT in fired[("long_run", 3)]
    assert semconv.ATTR_GUARD_CHECKPOINT not in fired[("kl_drift", 2)]
    marker = json.loads((ckpt / "otel-verl-guard-stop.json").read_text())
    assert marker["step"] == 3 and marker["rules"] == ["long_run"]
    severity = {}
    for r in _records(run):
        if r.get("eventName") == semconv.EVENT_GUARD_TRIGGERED:
            attrs = {a["key"]: a["value"].get("stringValue") for a in r["attributes"]}
            severity.setdefault(attrs[semconv.ATTR_GUARD_RULE], set()).add(r["severityText"])
    assert severity == {"nonfinite": {"WARNING"}, "kl_drift": {"INFO"}, "long_run": {"WARNING"}}


def test_the_guard_alert_pages_for_the_rules_that_alert_or_stop_never_for_a_recorded_one(observed, tmp_path):
    require_tool("promtool")
    replay = Replay(run_series(observed.telemetry_dir), slower=SLOWER)
    step1 = replay.after("verl_training_step")
    recorded = replay.after("verl_guard_triggered_total", verl_guard_rule="kl_drift", verl_guard_action="record")
    stopped = replay.after("verl_guard_triggered_total", verl_guard_rule="long_run", verl_guard_action="stop")
    got = replay.alerts(tmp_path, [("VerlGuardTriggered", t) for t in (step1, recorded, stopped)])

    def paged(t):
        return {(a["verl_guard_rule"], a["verl_guard_action"]) for a in got[("VerlGuardTriggered", t)]}

    assert paged(step1) == set()
    assert paged(recorded) == {("nonfinite", "alert")}  # kl_drift fired at the same step: counted, not paged
    assert ("long_run", "stop") in paged(stopped) and not {a for a in paged(stopped) if a[0] == "kl_drift"}
