"""The guard hook on verl's real ``Tracking.log``: report, checkpoint through verl's own method,
stop after the step, each rule by its own action; a guard error never stops training."""

from __future__ import annotations

import json
import logging
import os
import types

import pytest

from otel_verl import config, semconv
from otel_verl.hooks.guard import actions as guard
from otel_verl.process.state import PROCESS

NAN = float("nan")


@pytest.fixture
def tracking():
    from verl.utils.tracking import Tracking

    return Tracking(project_name="p", experiment_name="e", default_backend=["console"])


@pytest.fixture
def trainer(v0_trainer, tmp_path, monkeypatch):
    saved = []
    v0_trainer.config = types.SimpleNamespace(trainer=types.SimpleNamespace(default_local_dir=str(tmp_path)))
    v0_trainer.total_training_steps = 10

    def save():  # what verl's _save_checkpoint leaves behind, where its config says
        saved.append(v0_trainer.global_steps)
        folder = os.path.join(v0_trainer.config.trainer.default_local_dir, f"global_step_{v0_trainer.global_steps}")
        os.makedirs(folder)

    monkeypatch.setattr(v0_trainer, "_save_checkpoint", save, raising=False)
    v0_trainer.saved = saved
    finished = []  # v0's end of training, which a guard stop must still run
    v0_trainer.actor_rollout_wg = types.SimpleNamespace(
        async_calls_finalize_fn_exec=lambda blocking: finished.append(("finalize async saves", blocking))
    )
    monkeypatch.setattr(v0_trainer, "_shutdown_dump_executor", lambda: finished.append("dump executor"), raising=False)
    v0_trainer.finished = finished
    yield v0_trainer


def _action(monkeypatch, action):
    monkeypatch.setenv(config.GUARD_ACTION, action)
    config.settings.cache_clear()


def _log(tracking, trainer, step, **values):
    trainer.global_steps = step
    tracking.log(data={"training/global_step": step, **values}, step=step)


def test_observe_reports_each_firing_once_and_keeps_going(captured, tracking, trainer, monkeypatch, capsys):
    _action(monkeypatch, "observe")  # the former name of alert: a setting that keeps working
    _log(tracking, trainer, 1, **{"actor/pg_loss": 0.1})
    _log(tracking, trainer, 2, **{"actor/pg_loss": NAN})
    _log(tracking, trainer, 3, **{"actor/pg_loss": NAN})  # still NaN: the same episode
    out = capsys.readouterr().out
    assert out.count("otel-verl guard: rule nonfinite at step 2: actor/pg_loss=nan") == 1
    (span,) = [s for s in captured.finished() if s.name == semconv.SPAN_GUARD]
    (event,) = span.events
    assert event.name == semconv.EVENT_GUARD_TRIGGERED
    assert event.attributes[semconv.ATTR_GUARD_RULE] == "nonfinite"
    assert event.attributes[semconv.ATTR_METRIC_KEY] == "actor/pg_loss"
    assert event.attributes[semconv.ATTR_GUARD_ACTION] == "alert"
    (point,) = captured.metric_points()[semconv.M_GUARD_TRIGGERED]
    assert point.value == 1
    assert dict(point.attributes) == {semconv.ATTR_GUARD_RULE: "nonfinite", semconv.ATTR_GUARD_ACTION: "alert"}
    assert trainer.saved == [] and trainer.total_training_steps == 10


def test_validation_logs_are_not_training_steps(captured, tracking, trainer, monkeypatch):
    _action(monkeypatch, "stop")
    tracking.log(data={"val-core/x/reward/mean": NAN, "actor/pg_loss": NAN}, step=0)  # no training/global_step
    assert [s for s in captured.finished() if s.name == semconv.SPAN_GUARD] == []


def test_checkpoint_saves_once_per_firing_through_verls_method(captured, tracking, trainer, monkeypatch):
    _action(monkeypatch, "checkpoint")
    _log(tracking, trainer, 4, **{"actor/grad_norm": NAN, "critic/score/mean": NAN})  # two keys, one step
    _log(tracking, trainer, 5, **{"actor/grad_norm": NAN})
    assert trainer.saved == [4]
    (span,) = [s for s in captured.finished() if s.name == semconv.SPAN_GUARD]
    assert {e.attributes[semconv.ATTR_GUARD_CHECKPOINT] for e in span.events} == {
        str(trainer.config.trainer.default_local_dir) + "/otel-verl-guard/global_step_4"
    }  # its own folder: not one of verl's (test_checkpoint_keeps_verls.py)


def test_stop_checkpoints_ends_the_loop_and_fit_returns_normally(captured, tracking, trainer, monkeypatch, capsys):
    from verl.utils.profiler import marked_timer

    _action(monkeypatch, "stop")
    _log(tracking, trainer, 2, **{"critic/score/mean": NAN})
    assert trainer.saved == [2] and trainer.total_training_steps == 2  # v1's loop condition ends it

    def fit():  # v0's loop goes on to the next step: it ends before that step starts
        with marked_timer("step", {}):
            raise AssertionError("the next step must not run")

    wrapped = guard._fit_until_guard_stop(lambda: fit(), trainer, (), {})
    assert wrapped is None
    assert "training stopped after step 2" in capsys.readouterr().out
    # as at v0's own last step: verl's asynchronous checkpoint saves are waited for, not cut short
    assert trainer.finished == [("finalize async saves", True), "dump executor"]


def test_other_errors_of_fit_pass_through(trainer):
    err = KeyError("verl bug")

    def fit():
        raise err

    with pytest.raises(KeyError) as info:
        guard._fit_until_guard_stop(fit, trainer, (), {})
    assert info.value is err


def test_a_failing_checkpoint_or_rule_file_never_stops_training(
    captured, tracking, trainer, monkeypatch, caplog, tmp_path
):
    _action(monkeypatch, "checkpoint")
    monkeypatch.setenv(config.GUARD_RULES, str(tmp_path / "missing.yaml"))
    config.settings.cache_clear()

    def broken():
        raise OSError("disk full")

    monkeypatch.setattr(trainer, "_save_checkpoint", broken)
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        _log(tracking, trainer, 3, **{"actor/pg_loss": NAN})  # must not raise
    text = caplog.text
    assert "OTEL_VERL_GUARD_RULES" in text and "built-in rules" in text
    assert "could not save a checkpoint at step 3" in text
    assert [s for s in captured.finished() if s.name == semconv.SPAN_GUARD]  # still reported


def test_off_does_nothing(captured, tracking, trainer, monkeypatch):
    _action(monkeypatch, "off")
    _log(tracking, trainer, 2, **{"actor/pg_loss": NAN})
    assert [s for s in captured.finished() if s.name == semconv.SPAN_GUARD] == []
    assert PROCESS.trainer is trainer


def test_the_rules_file_is_read_off_the_training_thread_and_a_fifo_never_blocks(
    captured, tracking, trainer, monkeypatch, caplog, tmp_path
):
    import os
    import threading

    from otel_verl.hooks.guard import rules as rules_module

    _action(monkeypatch, "observe")
    fifo = tmp_path / "rules.fifo"
    os.mkfifo(fifo)
    monkeypatch.setenv(config.GUARD_RULES, str(fifo))
    config.settings.cache_clear()
    done = threading.Event()

    def training_step():  # the training thread's Tracking.log
        _log(tracking, trainer, 3, **{"actor/pg_loss": NAN})
        done.set()

    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        step = threading.Thread(target=training_step, daemon=True)
        step.start()
        step.join(60)
        if step.is_alive():  # blocked on the FIFO (the defect): give it an end of file, then fail
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert done.is_set(), "the training step waited for the rules file"
    assert "not a regular file" in caplog.text and "built-in rules" in caplog.text
    assert [s for s in captured.finished() if s.name == semconv.SPAN_GUARD]  # the built-in rules ran

    # a good file: read at fit's start, on a thread that is not the caller's
    guard.reset()
    (tmp_path / "r.yaml").write_text("rules: [{name: kl, kind: above, keys: [actor/ppo_kl], threshold: 0.1}]\n")
    monkeypatch.setenv(config.GUARD_RULES, str(tmp_path / "r.yaml"))
    config.settings.cache_clear()
    readers = []
    read = rules_module.read_rules_file
    monkeypatch.setattr(
        rules_module, "read_rules_file", lambda path: readers.append(threading.current_thread()) or read(path)
    )
    guard._fit_until_guard_stop(lambda: None, trainer, (), {})
    _log(tracking, trainer, 4, **{"actor/ppo_kl": 0.5})
    assert readers and threading.current_thread() not in readers
    fired = [
        (e.attributes[semconv.ATTR_GUARD_RULE], e.attributes[semconv.ATTR_STEP])
        for s in captured.finished()
        if s.name == semconv.SPAN_GUARD
        for e in s.events
    ]
    assert ("kl", 4) in fired  # the user's rule, from the file


def test_a_checkpoint_verls_config_cannot_name_never_reaches_tracking_log(
    captured, tracking, trainer, monkeypatch, caplog
):
    _action(monkeypatch, "checkpoint")
    trainer.config = types.SimpleNamespace(trainer=types.SimpleNamespace())  # no default_local_dir
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        _log(tracking, trainer, 3, **{"actor/pg_loss": NAN})  # must not raise
    assert "could not save a checkpoint at step 3" in caplog.text
    assert trainer.saved == [] and trainer.total_training_steps == 10
    assert [s for s in captured.finished() if s.name == semconv.SPAN_GUARD]  # still reported


def test_stop_without_the_checkpoint_says_so_clearly(captured, tracking, trainer, monkeypatch, caplog, capsys):
    from verl.utils.profiler import marked_timer

    _action(monkeypatch, "stop")

    def broken():
        raise OSError("disk full")

    monkeypatch.setattr(trainer, "_save_checkpoint", broken)
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        _log(tracking, trainer, 2, **{"critic/score/mean": NAN})
    assert trainer.total_training_steps == 2  # the values are bad: training still ends after this step
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "stopping training after step 2" in ln)
    assert "WITHOUT a checkpoint" in line and "OSError: disk full" in line
    assert "WITHOUT a checkpoint" in caplog.text  # and a WARNING log record, exported with the others

    def fit():
        with marked_timer("step", {}):
            raise AssertionError("the next step must not run")

    assert guard._fit_until_guard_stop(lambda: fit(), trainer, (), {}) is None
    assert "training stopped after step 2 (no checkpoint of that step" in capsys.readouterr().out


def test_a_verl_without_save_checkpoint_is_said_with_its_version(captured, tracking, trainer, monkeypatch, caplog):
    import importlib.metadata

    _action(monkeypatch, "checkpoint")
    monkeypatch.delattr(trainer, "_save_checkpoint")  # the fixture's stand-in
    monkeypatch.delattr(type(trainer), "_save_checkpoint")  # verl's own, renamed in a future release
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        _log(tracking, trainer, 3, **{"actor/pg_loss": NAN})  # must not raise
    (message,) = [r.getMessage() for r in caplog.records if "_save_checkpoint" in r.getMessage()]
    assert f"verl {importlib.metadata.version('verl')}" in message
    assert [s for s in captured.finished() if s.name == semconv.SPAN_GUARD]  # still reported


RULES = """\
rules:
  - {name: spiky, kind: above, keys: [actor/grad_norm], threshold: 1, action: record}
  - {name: kl, kind: above, keys: [actor/ppo_kl], threshold: 0.5, action: alert}
  - {name: cold, kind: below, keys: [actor/entropy], threshold: 0.1}
  - {name: noisy, kind: above, keys: [response_length/mean], threshold: 0}
"""


@pytest.fixture
def logs(monkeypatch):
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    monkeypatch.setattr(PROCESS, "_given_logs", provider)
    return exporter


def _fired(captured) -> dict[tuple[str, int], dict]:
    return {
        (e.attributes[semconv.ATTR_GUARD_RULE], e.attributes[semconv.ATTR_STEP]): dict(e.attributes)
        for s in captured.finished()
        if s.name == semconv.SPAN_GUARD
        for e in s.events
    }


def test_each_rule_acts_by_its_own_action(captured, logs, tracking, trainer, monkeypatch, caplog, capsys, tmp_path):
    """The rules file's action (``spiky``: record), overridden by OTEL_VERL_GUARD_ACTIONS (``kl``:
    alert -> stop), the global action for the rest (``cold``: record), ``off`` for one (``noisy``):
    the recorded rule neither checkpoints nor stops nor pages, the stop stops for its own rule only."""
    (tmp_path / "rules.yaml").write_text(RULES)
    monkeypatch.setenv(config.GUARD_RULES, str(tmp_path / "rules.yaml"))
    monkeypatch.setenv(config.GUARD_ACTIONS_BY_RULE, "kl=stop, noisy=off, klx=stop, spiky=explode")
    _action(monkeypatch, "record")
    with caplog.at_level(logging.WARNING):
        _log(tracking, trainer, 2, **{"actor/grad_norm": 5.0, "response_length/mean": 9.0})
        assert trainer.saved == [] and trainer.total_training_steps == 10  # recorded only
        _log(tracking, trainer, 3, **{"actor/ppo_kl": 0.9, "actor/entropy": 0.01})
    # the bad entry and the one that names no rule: each said once, the good ones applied
    assert "ignoring 1 entry of OTEL_VERL_GUARD_ACTIONS: 'spiky=explode'" in caplog.text
    assert "OTEL_VERL_GUARD_ACTIONS: klx=stop name(s) no rule" in caplog.text
    fired = _fired(captured)
    assert {k: v[semconv.ATTR_GUARD_ACTION] for k, v in fired.items()} == {
        ("spiky", 2): "record",
        ("kl", 3): "stop",
        ("cold", 3): "record",
    }  # noisy is off: never evaluated
    assert trainer.saved == [3] and trainer.total_training_steps == 3  # kl stopped after step 3
    # the step's checkpoint is named on the firing that asked for it only
    assert semconv.ATTR_GUARD_CHECKPOINT in fired[("kl", 3)] and semconv.ATTR_GUARD_CHECKPOINT not in fired[("cold", 3)]
    marker = json.loads((tmp_path / "otel-verl-guard-stop.json").read_text())
    assert marker["rules"] == ["kl"] and "rule cold" not in marker["reason"]
    counted = {
        (p.attributes[semconv.ATTR_GUARD_RULE], p.attributes[semconv.ATTR_GUARD_ACTION]): p.value
        for p in captured.metric_points()[semconv.M_GUARD_TRIGGERED]
    }
    assert counted == {("spiky", "record"): 1, ("kl", "stop"): 1, ("cold", "record"): 1}
    severities = {
        r.log_record.attributes[semconv.ATTR_GUARD_RULE]: r.log_record.severity_text for r in logs.get_finished_logs()
    }
    assert severities == {"spiky": "INFO", "kl": "WARNING", "cold": "INFO"}
    out = capsys.readouterr().out
    assert "rule spiky at step 2: actor/grad_norm=5 above 1 for 1 step(s); action: record" in out
    assert "rule kl at step 3: actor/ppo_kl=0.9 above 0.5 for 1 step(s); action: stop" in out


def test_a_checkpoint_rule_and_an_alert_rule_at_the_same_step(captured, tracking, trainer, monkeypatch, tmp_path):
    (tmp_path / "rules.yaml").write_text(RULES)
    monkeypatch.setenv(config.GUARD_RULES, str(tmp_path / "rules.yaml"))
    monkeypatch.setenv(config.GUARD_ACTIONS_BY_RULE, "*=alert,cold=checkpoint")
    _action(monkeypatch, "stop")  # every rule names its action here: the global one applies to none
    _log(tracking, trainer, 4, **{"actor/grad_norm": 5.0, "actor/entropy": 0.01})
    assert trainer.saved == [4] and trainer.total_training_steps == 10  # saved once, not stopped
    fired = _fired(captured)
    assert {k: v[semconv.ATTR_GUARD_ACTION] for k, v in fired.items()} == {
        ("spiky", 4): "alert",
        ("cold", 4): "checkpoint",
    }
