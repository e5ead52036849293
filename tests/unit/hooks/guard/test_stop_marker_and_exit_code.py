"""A guard stop a scheduler can tell apart (``otel_verl.hooks.guard.stop_exit``): the marker file the
TaskRunner writes, and the launcher's exit code, through the real guard hook on verl's
``Tracking.log`` and the ``ray.init`` hook. The stall board is an in-memory stand-in."""

from __future__ import annotations

import json
import types

import pytest

from otel_verl import config, patches
from otel_verl import job_board as board
from otel_verl.hooks import ray_launch
from otel_verl.hooks.guard import actions as guard
from otel_verl.hooks.guard import stop_exit as guard_exit

NAN = float("nan")


@pytest.fixture
def kv(monkeypatch):
    docs: dict[tuple[str, str], dict] = {}
    monkeypatch.setattr(board, "publish", lambda run_id, doc, topic=board.STALL: docs.__setitem__((run_id, topic), doc))
    monkeypatch.setattr(board, "read", lambda run_id, topic=board.STALL: docs.get((run_id, topic)))
    return docs


@pytest.fixture
def trainer(v0_trainer, tmp_path, monkeypatch):
    v0_trainer.config = types.SimpleNamespace(trainer=types.SimpleNamespace(default_local_dir=str(tmp_path / "ckpt")))
    v0_trainer.total_training_steps = 10
    monkeypatch.setattr(v0_trainer, "_save_checkpoint", lambda: None, raising=False)
    yield v0_trainer


def _env(monkeypatch, **values):
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    config.settings.cache_clear()


def _stop_at_step_2(trainer):
    from verl.utils.tracking import Tracking

    trainer.global_steps = 2
    Tracking(project_name="p", experiment_name="e", default_backend=[]).log(
        data={"training/global_step": 2, "actor/pg_loss": NAN}, step=2
    )


def test_a_stop_writes_the_marker_next_to_the_checkpoints(captured, trainer, kv, monkeypatch, tmp_path, capsys):
    _env(monkeypatch, OTEL_VERL_GUARD_ACTION="stop", OTEL_VERL_RUN_ID="run-g")
    _stop_at_step_2(trainer)
    path = tmp_path / "ckpt" / config.GUARD_MARKER_NAME
    doc = json.loads(path.read_text())
    assert doc["kind"] == guard_exit.MARKER_KIND and doc["run_id"] == "run-g" and doc["step"] == 2
    assert doc["rules"] == ["nonfinite"] and "actor/pg_loss=nan" in doc["reason"]
    assert doc["exit_code"] == 0  # none asked for: rc 0 stays the default
    assert kv[("run-g", board.GUARD)]["marker"] == str(path)
    assert f"otel-verl guard: stop marker {path}" in capsys.readouterr().out
    assert [p.name for p in path.parent.iterdir()] == [config.GUARD_MARKER_NAME]  # no temporary file left
    # the next run of the same folder starts training: the earlier run's marker goes
    guard.reset()
    guard._fit_until_guard_stop(lambda: None, trainer, (), {})
    assert not path.exists()


def test_a_marker_path_of_ones_own_and_a_foreign_file_there_is_kept(captured, trainer, kv, monkeypatch, tmp_path):
    own = tmp_path / "flags" / "stopped.json"
    _env(monkeypatch, OTEL_VERL_GUARD_ACTION="stop", OTEL_VERL_GUARD_MARKER=str(own))
    _stop_at_step_2(trainer)
    assert json.loads(own.read_text())["step"] == 2
    own.write_text('{"kind": "something else"}')  # not a marker of ours: never removed
    guard.reset()
    guard._fit_until_guard_stop(lambda: None, trainer, (), {})
    assert own.exists()


def _launch(get_result, init=True):
    """verl's run_ppo in miniature: ray.init (through the hook), then ray.get of the TaskRunner."""
    import ray

    if init:
        ray_launch._ray_init_wrapper(lambda **kw: None, None, (), {})
    return ray.get(get_result)


def _other_get(ref):
    import ray

    return ray.get(ref)


@pytest.fixture
def fake_ray_get(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "get", lambda ref, **kw: f"got {ref}")
    monkeypatch.setattr(guard_exit, "_launcher_caller", None)
    monkeypatch.setattr(guard_exit, "_getframe", None)
    yield
    patches.undo_all()


def test_the_launcher_exits_with_the_code_asked_for_after_a_guard_stop(kv, monkeypatch, fake_ray_get, capsys):
    _env(monkeypatch, OTEL_VERL_GUARD_EXIT_CODE="3", OTEL_VERL_RUN_ID="run-x")
    assert _launch("before any stop") == "got before any stop"  # the run finished: rc 0 as always
    kv[("run-x", board.GUARD)] = {"kind": guard_exit.MARKER_KIND, "step": 4, "rules": ["kl_high"], "marker": "/m.json"}
    assert _other_get("ref") == "got ref"  # another function's ray.get is left alone
    with pytest.raises(SystemExit) as stop:
        _launch("the run", init=False)
    assert stop.value.code == 3
    out = capsys.readouterr().out
    assert "training was stopped after step 4 (kl_high); exiting with 3 (OTEL_VERL_GUARD_EXIT_CODE)" in out


def test_without_an_exit_code_ray_get_is_not_even_wrapped(kv, monkeypatch, fake_ray_get):
    import ray

    _env(monkeypatch, OTEL_VERL_RUN_ID="run-y")
    plain = ray.get
    kv[("run-y", board.GUARD)] = {"kind": guard_exit.MARKER_KIND, "step": 1}
    assert _launch("ref") == "got ref"
    assert ray.get is plain and guard_exit._launcher_caller is None
