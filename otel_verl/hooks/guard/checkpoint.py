"""The guard's checkpoint, which never costs a checkpoint of verl's, and what resuming picks after it.

The guard saves through verl's own ``_save_checkpoint`` (the same files, hence the same resume
path), but that method also applies verl's retention (``trainer.max_actor_ckpt_to_keep``,
``max_critic_ckpt_to_keep``, ``remove_previous_ckpt_in_save``: the workers' checkpoint managers
delete the oldest ``global_step_*/actor|critic``) and points ``latest_checkpointed_iteration.txt``
at the step it saved: the step whose values were bad. So, for the guard's one call only, on the same
config objects and restored afterwards whatever happens:

* the keep limits are lifted (to ``NO_LIMIT``): that save evicts nothing;
* ``OTEL_VERL_GUARD_RESUME=last_good`` (default): ``trainer.default_local_dir`` (and
  ``default_hdfs_dir``, if set) point into ``<default_local_dir>/otel-verl-guard/``, so the
  checkpoint, its data-loader state and its own tracker file go there and verl's tracker keeps
  naming verl's last own checkpoint. The workers' managers do not count a checkpoint under that
  folder (``BaseCheckpointManager.register_checkpoint`` is skipped for it), so verl's later saves
  evict exactly what they would have without it. When verl saved the step the rule fired at
  itself, its tracker is pointed back (atomically) at verl's newest complete earlier checkpoint;
* ``guard``: saved as verl's own (``global_step_N`` in ``default_local_dir``, the tracker names it):
  resuming picks it, as the user asked; it then counts as one of verl's at verl's later saves.

Each verl save of the trainer (its own, not the guard's) is noted, with its folder, so the guard
knows whether verl just saved the step itself: from verl's checkpoint callback where verl has one
(v1, verl 0.9.1 on: ``hooks.callbacks``), else (v0, verl 0.9.0, a callback that takes no wrapper)
from the patch of ``_save_checkpoint``, which notes a save only when the callback did not.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from otel_verl import config, per_process, private_api
from otel_verl._safe import safe, warn_once
from otel_verl.atomic import write_file
from otel_verl.config import settings
from otel_verl.hooks import targets
from otel_verl.hooks.hookset import Hook
from otel_verl.package import package_version

_log = logging.getLogger("otel_verl")

TRACKER = "latest_checkpointed_iteration.txt"  # verl's: the step trainer.resume_mode=auto resumes from
MAX_TRACKER_BYTES = 64
_STEP_DIR = re.compile(r"global_step_(\d+)")
# verl's keep limits: lifted to a count no run reaches (an int, as a typed config may require), and
# its deprecated "keep 1" switch turned off, for the guard's save only
_KEEP_KEYS = ("max_actor_ckpt_to_keep", "max_critic_ckpt_to_keep")
_REMOVE_PREVIOUS = "remove_previous_ckpt_in_save"
NO_LIMIT = 2**31 - 1


@dataclass
class Saved:
    """What the guard's checkpoint of a step left: the folder of that step's checkpoint (``None``
    with ``failure`` when there is none), and the folder ``trainer.resume_mode=auto`` resumes from
    now (``None``: from scratch)."""

    folder: str | None
    failure: str | None
    resumes_from: str | None


class _State:
    def __init__(self) -> None:
        self.verl_saved_step: int | None = None  # the step verl's own last _save_checkpoint saved
        self.verl_saved_folder: str | None = None  # its folder, as verl's checkpoint callback named it
        self.callback_noted = False  # the running _save_checkpoint's save was noted by the callback
        self.guard_saving = False


_STATE = _State()


def reset() -> None:
    global _STATE
    _STATE = _State()


per_process.register(__name__, reset=reset)


def guard_folder(local_dir: str) -> str:
    """The guard's own checkpoints of a run whose ``trainer.default_local_dir`` is ``local_dir``."""
    return os.path.join(local_dir, config.GUARD_CHECKPOINT_DIR)


def is_guard_path(path: str) -> bool:
    """``<...>/otel-verl-guard/global_step_<n>/<role>``: a worker's part of a guard checkpoint."""
    step_dir = os.path.dirname(os.path.normpath(str(path)))
    return bool(_STEP_DIR.fullmatch(os.path.basename(step_dir))) and (
        os.path.basename(os.path.dirname(step_dir)) == config.GUARD_CHECKPOINT_DIR
    )


# ---------------------------------------------------------------- the TaskRunner
def save(trainer: Any, step: int) -> Saved:
    """The guard's checkpoint of ``step`` (see the module's docstring). Never raises: whatever fails
    here (verl's ``_save_checkpoint``, a verl config without the folder it names) must not reach
    ``Tracking.log``; the config is restored before this returns."""
    try:
        local_dir = str(trainer.config.trainer.default_local_dir)
        last_good = settings().guard_resume == "last_good"
        if _STATE.verl_saved_step == step:  # verl saved this very step itself, before logging it
            folder = _STATE.verl_saved_folder or os.path.join(local_dir, f"global_step_{step}")
            if last_good:
                _point_back(trainer, local_dir, step)
            return Saved(os.path.abspath(folder), None, resumes_from(local_dir))
        save_fn = private_api.attribute(
            trainer,
            "_save_checkpoint",
            name=f"{type(trainer).__name__}._save_checkpoint",
            dists=("verl",),
            effect="the guard saves no checkpoint",
        )
        if save_fn is None:
            failure = f"verl {package_version('verl')} has no {type(trainer).__name__}._save_checkpoint"
            return Saved(None, failure, resumes_from(local_dir))
        into = guard_folder(local_dir) if last_good else local_dir
        changes = _lifted_limits(trainer.config.trainer)
        if last_good:
            changes["default_local_dir"] = into
            hdfs = getattr(trainer.config.trainer, "default_hdfs_dir", None)
            if hdfs is not None:
                changes["default_hdfs_dir"] = guard_folder(str(hdfs))
        with _changed(trainer.config.trainer, changes):
            _STATE.guard_saving = True
            try:
                save_fn()
            finally:
                _STATE.guard_saving = False
        return Saved(os.path.abspath(os.path.join(into, f"global_step_{step}")), None, resumes_from(local_dir))
    except Exception as exc:  # noqa: BLE001 - the guard must not end training by itself
        warn_once("guard checkpoint", "the guard could not save a checkpoint at step %s", step, exc_info=True)
        return Saved(None, f"{type(exc).__name__}: {exc}", _resumes_from_or_none(trainer))


def _lifted_limits(cfg: Any) -> dict[str, Any]:
    """The changes to verl's trainer config under which its ``_save_checkpoint`` removes nothing."""
    changes: dict[str, Any] = {}
    for key in _KEEP_KEYS:
        keep = getattr(cfg, key, None)  # absent from this verl's config: no limit
        if isinstance(keep, int) and not isinstance(keep, bool) and keep > 0:
            changes[key] = NO_LIMIT
    if getattr(cfg, _REMOVE_PREVIOUS, False):
        changes[_REMOVE_PREVIOUS] = False
    return changes


@contextlib.contextmanager
def _changed(cfg: Any, changes: dict[str, Any]) -> Iterator[None]:
    """``cfg``'s keys set to ``changes`` (only those it has, and only where they differ), and set back
    to what they were on the same object afterwards, whatever happens in between. A key that cannot
    be set (a read-only config) raises before anything is saved."""
    done: list[tuple[str, Any]] = []
    try:
        for key, value in changes.items():
            try:
                old = getattr(cfg, key)
            except AttributeError:  # not in this verl's config: nothing to lift
                continue
            if old != value:
                setattr(cfg, key, value)
                done.append((key, old))
        yield
    finally:
        for key, old in reversed(done):
            try:
                setattr(cfg, key, old)
            except Exception:  # noqa: BLE001 - say it, loudly: verl's later saves would use our value
                _log.error("otel-verl guard: could not set trainer.%s back to %r", key, old, exc_info=True)


def _read_tracker(local_dir: str) -> int | None:
    """The step verl's tracker file names, or None (none, unreadable, not a number, not a file)."""
    try:
        fd = os.open(os.path.join(local_dir, TRACKER), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO planted there must not block training
            return None
        text = os.read(fd, MAX_TRACKER_BYTES).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return int(text) if text.isdigit() else None


def resumes_from(local_dir: str) -> str | None:
    """The folder ``trainer.resume_mode=auto`` resumes from, as verl finds it (``find_latest_ckpt_path``)."""
    step = _read_tracker(local_dir)
    if step is None:
        return None
    folder = os.path.join(local_dir, f"global_step_{step}")
    return os.path.abspath(folder) if os.path.isdir(folder) else None


def _resumes_from_or_none(trainer: Any) -> str | None:
    try:
        return resumes_from(str(trainer.config.trainer.default_local_dir))
    except Exception:  # noqa: BLE001 - only for the report
        return None


def _complete(folder: str, trainer: Any) -> bool:
    """A checkpoint verl finished: its data-loader state is written after the actor's and critic's
    parts (both drivers), and retention removes ``actor``/``critic``, not the step's folder."""
    parts = ["actor", "critic"] if getattr(trainer, "use_critic", False) else ["actor"]
    return os.path.isfile(os.path.join(folder, "data.pt")) and all(
        os.path.isdir(os.path.join(folder, p)) for p in parts
    )


@safe("guard: the step trainer.resume_mode=auto resumes from")
def _point_back(trainer: Any, local_dir: str, step: int) -> None:
    """verl saved the step the rule fired at and its tracker names it: name verl's newest complete
    earlier checkpoint instead (the diverged one stays on disk). None left: it stays, and is said."""
    if _read_tracker(local_dir) != step:
        return
    earlier = []
    with os.scandir(local_dir) as entries:
        for entry in entries:
            match = _STEP_DIR.fullmatch(entry.name)
            if match and int(match.group(1)) < step and entry.is_dir(follow_symlinks=False):
                earlier.append(int(match.group(1)))
    for candidate in sorted(earlier, reverse=True):
        if _complete(os.path.join(local_dir, f"global_step_{candidate}"), trainer):
            write_file(os.path.join(local_dir, TRACKER), str(candidate).encode())
            return
    warn_once(
        "guard no earlier checkpoint",
        "guard: verl saved step %s itself and no earlier checkpoint of verl's is left in %s: "
        "trainer.resume_mode=auto resumes from step %s",
        step,
        local_dir,
        step,
    )


def note_save(step: Any, folder: Any) -> None:
    """verl's checkpoint callback: verl saved ``step`` into ``folder`` (the guard's own save: not noted)."""
    _STATE.callback_noted = True
    if not _STATE.guard_saving and isinstance(step, int):
        _STATE.verl_saved_step = step
        _STATE.verl_saved_folder = str(folder) if isinstance(folder, (str, os.PathLike)) else None


def _note_verl_save(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    # the fallback of verl's checkpoint callback: says only a save the callback did not
    _STATE.callback_noted = False
    result = wrapped(*args, **kwargs)
    if not _STATE.guard_saving and not _STATE.callback_noted:
        _note(instance)
    return result


@safe("guard: verl's own checkpoint")
def _note(trainer: Any) -> None:
    _STATE.verl_saved_step = trainer.global_steps
    _STATE.verl_saved_folder = None


# ---------------------------------------------------------------- the workers
def _register_unless_guards(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """A guard checkpoint is not one of verl's: its path never enters the manager's retention list
    (``previous_saved_paths``), so it neither evicts nor later takes the place of one of verl's."""
    path = kwargs.get("new_path", args[0] if args else None)
    if _guards(path):
        return None
    return wrapped(*args, **kwargs)


@safe("guard checkpoint in a worker", default=False)
def _guards(path: Any) -> bool:
    return isinstance(path, str) and is_guard_path(path)


HOOKS = [
    Hook(targets.TRAINER_V0, "RayPPOTrainer._save_checkpoint", _note_verl_save),
    Hook(targets.TRAINER_V1, "PPOTrainer._save_checkpoint", _note_verl_save),
    Hook(
        targets.CHECKPOINT_MANAGER, "BaseCheckpointManager.register_checkpoint", _register_unless_guards, optional=True
    ),
]
