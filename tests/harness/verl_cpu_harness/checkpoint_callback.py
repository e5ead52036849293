"""A user's own v1 checkpoint callback (``trainer.checkpoint_callback_class``), as verl documents it
(test asset): each ``on_save`` call is one JSON line in ``RECORD`` next to the run's checkpoint
folder (``trainer.default_local_dir``), so a test counts how often verl called it, and with what.
With ``FAIL_VAR`` set, ``on_save`` raises ``CallbackFailed`` after recording (a failed upload)."""

from __future__ import annotations

import json
import os
from typing import Any

from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

RECORD = "checkpoint-callback.jsonl"
FAIL_VAR = "VERL_CPU_HARNESS_CALLBACK_FAILS"
FQN = f"{__name__}.RecordingCallback"


class CallbackFailed(RuntimeError):
    """The user's callback's own failure (verl lets it abort training)."""


class RecordingCallback(CheckpointCallback):
    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        # fixed now: a save may point trainer.default_local_dir elsewhere while it runs (the guard's)
        local_dir = os.path.abspath(str(config.trainer.default_local_dir))
        self.record = os.path.join(os.path.dirname(local_dir), RECORD)

    def on_save(self, trainer: Any, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs: Any):
        line = {"step": global_step, "dir": os.path.abspath(checkpoint_dir), "async": async_save}
        with open(self.record, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
        if os.environ.get(FAIL_VAR):
            raise CallbackFailed(f"upload of step {global_step} failed")


def saves(folder: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The calls recorded for a run whose ``default_local_dir`` is ``folder/<name>``."""
    path = os.path.join(folder, RECORD)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
