"""verl's documented v1 hooks (``otel_verl.hooks.callbacks``) on verl's real classes.

* the checkpoint callback: a user's own ``trainer.checkpoint_callback_class`` (built by verl's
  ``build_checkpoint_callback``, saved through verl's real ``_save_checkpoint``) is called exactly
  once per save, stays the user's object, and its exception passes through unchanged; the guard
  learns "verl saved step N in folder D" from it, also from a trainer whose own save never goes
  through the patched ``PPOTrainer._save_checkpoint`` (a user's subclass, a later verl);
* the step callbacks: bound to the mode's override (``PPOTrainerSync.on_step_end`` runs verl's
  ``update_weights`` stage) and a user's override of that; the step's span where no ``step`` timer
  made one, none twice where it did; a step that raises ends its span with the error in ``fit``'s hook;
  after uninstrument, what was attached passes every call through.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.profiler.performance import marked_timer
from verl_cpu_harness import checkpoint_callback as user_callback

from otel_verl import semconv
from otel_verl.config import settings
from otel_verl.hooks import callbacks, hookset, targets
from otel_verl.hooks.guard import checkpoint as guard_checkpoint
from otel_verl.process.state import PROCESS


class _WorkerGroup:
    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        os.makedirs(local_path, exist_ok=True)
        Path(local_path, "model.pt").write_text(f"weights of step {global_step}")


class _Loader:
    def state_dict(self):
        return {"epoch": 0}


class _Replicas:
    def __init__(self) -> None:
        self.synced: list[int] = []

    def update_weights(self, step):
        self.synced.append(step)


class UsersTrainer(PPOTrainerSync):
    """A user's subclass overriding the mode's ``on_step_end`` (and calling it)."""

    def on_step_end(self):
        self.order.append("user")
        super().on_step_end()


class OwnSaveTrainer(PPOTrainerSync):
    """A trainer whose save is its own (a user's subclass, or a later verl's renamed save): it never
    goes through ``PPOTrainer._save_checkpoint``, and calls the callback as verl documents."""

    def _save_checkpoint(self):
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        self.actor_rollout_wg.save_checkpoint(os.path.join(folder, "actor"))
        Path(folder, "data.pt").write_text("loader")
        self.checkpoint_callback.on_save(trainer=self, global_step=self.global_steps, checkpoint_dir=folder)


@pytest.fixture
def make_trainer(tmp_path, captured, monkeypatch):
    """A real v1 trainer object (no workers) with the user's callback built by verl, hooks attached
    as the hook on ``PPOTrainer.__init__`` attaches them."""
    monkeypatch.delenv(user_callback.FAIL_VAR, raising=False)
    monkeypatch.setenv("OTEL_VERL_GUARD_ACTION", "stop")
    settings.cache_clear()

    def make(cls=PPOTrainerSync, **attrs):
        cfg = OmegaConf.create(
            {
                "trainer": {
                    "default_local_dir": str(tmp_path / "ckpt"),
                    "default_hdfs_dir": None,
                    "checkpoint_callback_class": user_callback.FQN,
                },
                "actor_rollout_ref": {"actor": {"checkpoint": {"async_save": False}}},
            }
        )
        trainer = cls.__new__(cls)
        trainer.config = cfg
        trainer.checkpoint_callback = build_checkpoint_callback(cfg)  # as PPOTrainer.__init__ does
        trainer.actor_rollout_wg = _WorkerGroup()
        trainer.use_critic = False
        trainer.train_dataloader = _Loader()
        trainer.trainer_mode = "sync"
        trainer.total_training_steps = 10
        trainer.global_steps, trainer.steps_per_epoch = 1, 4
        trainer.timing_raw = {}
        trainer.checkpoint_manager = _Replicas()
        trainer.order = []
        for key, value in attrs.items():
            setattr(trainer, key, value)
        callbacks._attach_after_init(lambda: None, trainer, (), {})
        PROCESS.trainer = trainer
        return trainer

    yield make
    callbacks.end_open_step(None)
    PROCESS.trainer = None
    settings.cache_clear()


def _guard_fires(trainer, step):
    from verl.utils.tracking import Tracking

    trainer.global_steps = step
    Tracking(project_name="p", experiment_name="e", default_backend=[]).log(
        data={"training/global_step": step, "actor/pg_loss": float("nan")}, step=step
    )


# ---------------------------------------------------------------- the checkpoint callback
def test_the_users_callback_is_called_once_per_save_and_stays_the_users_object(make_trainer, tmp_path):
    trainer = make_trainer()
    built = trainer.checkpoint_callback
    for step in (1, 2):
        trainer.global_steps = step
        trainer._save_checkpoint()  # verl's own save: the callback hook and the patch both see it
    assert user_callback.saves(tmp_path) == [
        {"step": 1, "dir": str(tmp_path / "ckpt" / "global_step_1"), "async": False},
        {"step": 2, "dir": str(tmp_path / "ckpt" / "global_step_2"), "async": False},
    ]
    assert trainer.checkpoint_callback is built and type(built) is user_callback.RecordingCallback
    assert built.record == str(tmp_path / user_callback.RECORD)  # its own attributes, as it set them
    callbacks.attach(trainer)  # a second attach (a mode's __init__ calling the base one twice): no second call
    trainer.global_steps = 3
    trainer._save_checkpoint()
    assert [s["step"] for s in user_callback.saves(tmp_path)] == [1, 2, 3]


def test_the_users_callbacks_exception_passes_through_unchanged(make_trainer, tmp_path, monkeypatch):
    trainer = make_trainer()
    monkeypatch.setenv(user_callback.FAIL_VAR, "1")
    with pytest.raises(user_callback.CallbackFailed, match="upload of step 1 failed"):
        trainer._save_checkpoint()  # verl documents: it aborts training
    assert [s["step"] for s in user_callback.saves(tmp_path)] == [1]


def test_the_guard_learns_of_a_save_only_the_callback_saw(make_trainer, tmp_path, capsys):
    trainer = make_trainer(OwnSaveTrainer)
    ckpt = tmp_path / "ckpt"
    trainer.global_steps = 2
    trainer._save_checkpoint()  # save_freq hit the step the rule fires at
    _guard_fires(trainer, 2)
    assert not (ckpt / "otel-verl-guard").exists()  # verl saved it already: not saved twice
    assert f"stopping training after step 2; checkpoint {ckpt / 'global_step_2'}" in capsys.readouterr().out
    assert [s["step"] for s in user_callback.saves(tmp_path)] == [2]


def test_the_guards_own_save_is_not_taken_for_verls(make_trainer, tmp_path):
    trainer = make_trainer()
    ckpt = tmp_path / "ckpt"
    trainer._save_checkpoint()  # verl's step 1
    _guard_fires(trainer, 2)  # the guard's save of step 2 also runs verl's callback (verl's save path)
    assert (ckpt / "otel-verl-guard" / "global_step_2" / "actor").is_dir()
    assert [s["step"] for s in user_callback.saves(tmp_path)] == [1, 2]
    assert guard_checkpoint._STATE.verl_saved_step == 1  # verl's own last save is still step 1


def test_where_the_callback_takes_no_wrapper_the_patch_still_says_the_save(make_trainer, tmp_path):
    class Slotted:
        __slots__ = ()

        def on_save(self, **kwargs):
            return None

    trainer = make_trainer(checkpoint_callback=Slotted())
    callbacks.attach(trainer)  # nothing attached, nothing raised
    trainer.global_steps = 4
    trainer._save_checkpoint()
    assert guard_checkpoint._STATE.verl_saved_step == 4


# ---------------------------------------------------------------- the step callbacks
def _spans(captured, name):
    return [s for s in captured.spans.get_finished_spans() if s.name == name]


def test_without_a_step_timer_the_callbacks_make_the_steps_span_around_the_modes_override(make_trainer, captured):
    trainer = make_trainer(global_steps=3)
    trainer.on_step_begin()
    trainer.on_step_end()  # PPOTrainerSync's: update_weights, timed by verl
    assert trainer.checkpoint_manager.synced == [3]  # the mode's override ran, once
    (step,) = _spans(captured, semconv.SPAN_STEP)
    (sync,) = _spans(captured, semconv.SPAN_STAGE_PREFIX + "update_weights")
    assert step.attributes[semconv.ATTR_STEP] == 3 and step.attributes[semconv.ATTR_DRIVER] == "v1"
    assert sync.parent.span_id == step.context.span_id and sync.end_time <= step.end_time


def test_with_the_step_timer_its_span_stays_the_only_one(make_trainer, captured):
    trainer = make_trainer(global_steps=3)
    with marked_timer("step", trainer.timing_raw):  # verl's fit: the timer around both callbacks
        trainer.on_step_begin()
        trainer.on_step_end()
    (step,) = _spans(captured, semconv.SPAN_STEP)
    (sync,) = _spans(captured, semconv.SPAN_STAGE_PREFIX + "update_weights")
    assert sync.parent.span_id == step.context.span_id
    assert step.end_time - step.start_time >= trainer.timing_raw["step"] * 1e9 * 0.99  # verl's own measure


def test_a_users_override_of_the_modes_on_step_end_runs_once_inside_the_span(make_trainer, captured):
    trainer = make_trainer(UsersTrainer, global_steps=2)
    trainer.on_step_begin()
    trainer.on_step_end()
    assert trainer.order == ["user"] and trainer.checkpoint_manager.synced == [2]
    (step,) = _spans(captured, semconv.SPAN_STEP)
    (sync,) = _spans(captured, semconv.SPAN_STAGE_PREFIX + "update_weights")
    assert sync.parent.span_id == step.context.span_id


def test_a_step_that_raises_ends_its_span_with_the_error_in_fits_hook(make_trainer, captured):
    trainer = make_trainer(global_steps=5)

    def fit():
        trainer.on_step_begin()
        raise ZeroDivisionError("a stage failed")

    with pytest.raises(ZeroDivisionError, match="a stage failed"):
        callbacks._fit_ends_open_step(fit, trainer, (), {})
    (step,) = _spans(captured, semconv.SPAN_STEP)
    assert step.status.status_code.name == "ERROR" and "ZeroDivisionError" in step.status.description


def test_after_uninstrument_the_attached_hooks_pass_every_call_through(make_trainer, captured, tmp_path):
    from otel_verl.instrumentor import VerlInstrumentor

    trainer = make_trainer(global_steps=2)  # attached while instrumented
    VerlInstrumentor().uninstrument()  # the instrumentor is a singleton: the one ``captured`` installed
    assert not hookset.in_effect(targets.TRAINER_V1, callbacks.STEP_BEGIN)
    trainer.on_step_begin()
    trainer.on_step_end()
    trainer._save_checkpoint()
    assert not _spans(captured, semconv.SPAN_STEP) and trainer.checkpoint_manager.synced == [2]
    assert [s["step"] for s in user_callback.saves(tmp_path)] == [2]  # the user's callback: still once
    assert guard_checkpoint._STATE.verl_saved_step is None  # nothing of otel-verl's ran


# ---------------------------------------------------------------- declared and installed
def test_the_hook_on_init_attaches_them_and_each_is_a_verl_hook_with_its_fallback(captured):
    wrappers, method = [], PPOTrainer.__dict__["__init__"]
    while hasattr(method, "_self_wrapper"):
        wrappers.append(method._self_wrapper)
        method = method.__wrapped__
    assert callbacks._attach_after_init in wrappers
    for module, target in (
        (targets.CHECKPOINT_CALLBACK, callbacks.ON_SAVE),
        (targets.TRAINER_V1, callbacks.STEP_BEGIN),
        (targets.TRAINER_V1, callbacks.STEP_END),
    ):
        assert targets.spec(module, target).mechanism == targets.HOOK
        assert hookset.in_effect(module, target)  # verl 0.9.1 has each
    fallbacks = {t.key: t.fallback_for for t in targets.TARGETS if t.fallback_for}
    assert fallbacks[f"{targets.TRAINER_V1}.PPOTrainer._save_checkpoint"].endswith("CheckpointCallback.on_save")
    assert all(f in {t.key for t in targets.TARGETS} for f in fallbacks.values())
