"""The guard's checkpoint never costs one of verl's, and resuming does not pick it unless asked
(``otel_verl.hooks.guard.checkpoint``): verl's real ``_save_checkpoint`` of both drivers, on a
Hydra-like (struct) config with ``max_actor_ckpt_to_keep`` / ``max_critic_ckpt_to_keep``, whose
worker groups keep their checkpoints as verl's FSDP checkpoint manager does on rank 0 (verl's
real ``BaseCheckpointManager`` retention: ``ensure_checkpoint_capacity`` before the save,
``register_checkpoint`` after it)."""

from __future__ import annotations

import dataclasses
import os
import types
from pathlib import Path
from typing import Optional

import pytest

from otel_verl import config
from otel_verl.process.state import PROCESS

NAN = float("nan")


class _WorkerGroup:
    """A worker group of one rank, saving as ``FSDPCheckpointManager.save_checkpoint`` does."""

    def __init__(self) -> None:
        from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager

        self.manager = BaseCheckpointManager.__new__(BaseCheckpointManager)  # no torch.distributed here
        self.manager.previous_saved_paths = []
        self.fail: Exception | None = None

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        self.manager.ensure_checkpoint_capacity(max_ckpt_to_keep)
        if self.fail is not None:
            raise self.fail
        os.makedirs(local_path, exist_ok=True)
        Path(local_path, "model.pt").write_text(f"weights of step {global_step}")
        self.manager.register_checkpoint(local_path, max_ckpt_to_keep)


class _Loader:
    def state_dict(self):
        return {"epoch": 0}


@dataclasses.dataclass
class _TypedTrainer:  # a typed config: a keep limit must stay an int
    default_local_dir: str = ""
    default_hdfs_dir: Optional[str] = None  # noqa: UP045 - OmegaConf reads the annotation
    max_actor_ckpt_to_keep: int = 1
    max_critic_ckpt_to_keep: int = 1
    remove_previous_ckpt_in_save: bool = False


def _config(folder: Path, keep: int, typed: bool = False):
    from omegaconf import OmegaConf

    trainer = {
        "default_local_dir": str(folder),
        "default_hdfs_dir": None,
        "max_actor_ckpt_to_keep": keep,
        "max_critic_ckpt_to_keep": keep,
        "remove_previous_ckpt_in_save": False,
    }
    if typed:
        trainer = OmegaConf.merge(OmegaConf.structured(_TypedTrainer), trainer)
    cfg = OmegaConf.create({"trainer": trainer, "actor_rollout_ref": {"actor": {"checkpoint": {"async_save": False}}}})
    OmegaConf.set_struct(cfg, True)  # as Hydra hands it to verl: unknown keys cannot be added
    return cfg


@pytest.fixture(params=["v0", "v1"])
def make_trainer(request, tmp_path, captured):
    """A real trainer object of either driver (no workers started), saving into ``tmp_path/ckpt``."""

    def make(keep: int, typed: bool = False):
        if request.param == "v0":
            from verl.trainer.ppo.ray_trainer import RayPPOTrainer as cls
        else:
            from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync as cls  # the default v1 trainer
        trainer = cls.__new__(cls)
        trainer.config = _config(tmp_path / "ckpt", keep, typed)
        trainer.actor_rollout_wg, trainer.critic_wg = _WorkerGroup(), _WorkerGroup()
        trainer.use_critic = True
        trainer.train_dataloader = _Loader()
        trainer.trainer_mode = "sync"  # v1
        trainer.checkpoint_callback = types.SimpleNamespace(on_save=lambda **kw: None)  # v1
        trainer.total_training_steps = 10
        PROCESS.trainer = trainer
        return trainer

    yield make
    PROCESS.trainer = None


def _env(monkeypatch, **values):
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    config.settings.cache_clear()


def _verl_saves(trainer, step):
    trainer.global_steps = step
    trainer._save_checkpoint()  # verl's own, as its fit loop calls it


def _guard_fires(trainer, step):
    from verl.utils.tracking import Tracking

    trainer.global_steps = step
    Tracking(project_name="p", experiment_name="e", default_backend=[]).log(
        data={"training/global_step": step, "actor/pg_loss": NAN}, step=step
    )


def _tracker(ckpt: Path) -> str:
    return (ckpt / "latest_checkpointed_iteration.txt").read_text().strip()


@pytest.mark.parametrize("typed", [False, True], ids=["plain", "typed"])
def test_with_a_keep_of_1_verls_checkpoint_stays_and_resume_picks_it(
    make_trainer, monkeypatch, tmp_path, capsys, typed
):
    _env(monkeypatch, OTEL_VERL_GUARD_ACTION="checkpoint")
    trainer = make_trainer(keep=1, typed=typed)
    ckpt = tmp_path / "ckpt"
    _verl_saves(trainer, 1)
    _guard_fires(trainer, 2)
    for role in ("actor", "critic"):
        assert (ckpt / "global_step_1" / role / "model.pt").is_file()  # verl's good checkpoint, whole
        assert (ckpt / "otel-verl-guard" / "global_step_2" / role / "model.pt").is_file()  # the guard's
    assert (ckpt / "otel-verl-guard" / "global_step_2" / "data.pt").is_file()
    assert _tracker(ckpt) == "1"  # trainer.resume_mode=auto resumes verl's last good checkpoint
    assert _tracker(ckpt / "otel-verl-guard") == "2"  # the guard's, for a resume on purpose
    assert not (ckpt / "global_step_2").exists()
    # verl's config is as it was, on the same object, for verl's own later saves
    assert trainer.config.trainer.max_actor_ckpt_to_keep == 1 and trainer.config.trainer.max_critic_ckpt_to_keep == 1
    assert trainer.config.trainer.default_local_dir == str(ckpt)
    out = capsys.readouterr().out
    assert f"trainer.resume_mode=auto resumes from {ckpt / 'global_step_1'}" in out


def test_verls_later_saves_keep_what_they_would_have_kept_without_the_guard(make_trainer, monkeypatch, tmp_path):
    _env(monkeypatch, OTEL_VERL_GUARD_ACTION="checkpoint")
    trainer = make_trainer(keep=2)
    ckpt = tmp_path / "ckpt"
    _verl_saves(trainer, 1)
    _guard_fires(trainer, 2)
    _verl_saves(trainer, 3)  # training went on: verl keeps its own two, steps 1 and 3
    assert (ckpt / "global_step_1" / "actor").is_dir() and (ckpt / "global_step_3" / "actor").is_dir()
    assert (ckpt / "otel-verl-guard" / "global_step_2" / "actor").is_dir()  # not verl's to evict either
    assert trainer.actor_rollout_wg.manager.previous_saved_paths == [
        str(ckpt / "global_step_1" / "actor"),
        str(ckpt / "global_step_3" / "actor"),
    ]
    _verl_saves(trainer, 4)  # verl's own retention, as without the guard: step 1 goes
    assert not (ckpt / "global_step_1" / "actor").exists() and _tracker(ckpt) == "4"


def test_a_step_verl_saved_itself_is_not_what_resume_picks(make_trainer, monkeypatch, tmp_path, capsys):
    _env(monkeypatch, OTEL_VERL_GUARD_ACTION="stop")
    trainer = make_trainer(keep=2)
    ckpt = tmp_path / "ckpt"
    _verl_saves(trainer, 1)
    _verl_saves(trainer, 2)  # save_freq hit the step the rule fires at: verl's tracker names it
    _guard_fires(trainer, 2)
    assert _tracker(ckpt) == "1"  # pointed back at the newest complete earlier one
    assert (ckpt / "global_step_2" / "actor").is_dir() and (ckpt / "global_step_1" / "actor").is_dir()
    assert not (ckpt / "otel-verl-guard").exists()  # nothing saved twice
    assert f"stopping training after step 2; checkpoint {ckpt / 'global_step_2'}" in capsys.readouterr().out


def test_resume_guard_saves_it_as_verls_and_resume_picks_it_still_evicting_nothing(make_trainer, monkeypatch, tmp_path):
    _env(monkeypatch, OTEL_VERL_GUARD_ACTION="stop", OTEL_VERL_GUARD_RESUME="guard")
    trainer = make_trainer(keep=1)
    ckpt = tmp_path / "ckpt"
    _verl_saves(trainer, 1)
    _guard_fires(trainer, 2)
    assert _tracker(ckpt) == "2" and (ckpt / "global_step_2" / "actor").is_dir()  # asked for
    assert (ckpt / "global_step_1" / "actor").is_dir()  # still never at the cost of verl's
    assert trainer.config.trainer.max_actor_ckpt_to_keep == 1


def test_a_read_only_config_saves_nothing_rather_than_evict(make_trainer, monkeypatch, tmp_path, capsys):
    from omegaconf import OmegaConf

    _env(monkeypatch, OTEL_VERL_GUARD_ACTION="stop")
    trainer = make_trainer(keep=1)
    ckpt = tmp_path / "ckpt"
    _verl_saves(trainer, 1)
    OmegaConf.set_readonly(trainer.config, True)
    _guard_fires(trainer, 2)  # must not raise
    assert (ckpt / "global_step_1" / "actor").is_dir() and _tracker(ckpt) == "1"
    assert not (ckpt / "otel-verl-guard" / "global_step_2").exists()
    assert "WITHOUT a checkpoint" in capsys.readouterr().out
    assert trainer.total_training_steps == 2  # the values are bad: it still stops


def test_a_failing_save_leaves_verls_config_as_it_was(make_trainer, monkeypatch, tmp_path):
    _env(monkeypatch, OTEL_VERL_GUARD_ACTION="checkpoint")
    trainer = make_trainer(keep=1)
    ckpt = tmp_path / "ckpt"
    _verl_saves(trainer, 1)
    trainer.actor_rollout_wg.fail = OSError("disk full")
    _guard_fires(trainer, 2)  # must not raise
    assert trainer.config.trainer.default_local_dir == str(ckpt)
    assert trainer.config.trainer.max_actor_ckpt_to_keep == 1
    assert (ckpt / "global_step_1" / "actor").is_dir() and _tracker(ckpt) == "1"


def test_a_fifo_at_verls_tracker_never_blocks_the_guard(tmp_path):
    from otel_verl.hooks.guard import checkpoint as guard_checkpoint

    os.mkfifo(tmp_path / "latest_checkpointed_iteration.txt")  # read with a plain open, this would hang
    assert guard_checkpoint.resumes_from(str(tmp_path)) is None
