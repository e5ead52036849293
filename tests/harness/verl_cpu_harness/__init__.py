"""CPU harness for end-to-end tests: runs the real verl trainer without a GPU.

- ``plugin``: verl plugin (entry point ``verl.plugins``) that makes verl 0.9.1 run on CPU.
- ``hfcpu``: the ``hfcpu`` rollout backend (HF ``generate`` behind verl's async rollout server API).
- ``assets``: tiny tokenizer, model, data and reward function, generated locally.
- ``command``: Hydra overrides for ``python -m verl.trainer.main_ppo``.
- ``python -m verl_cpu_harness``: make the assets and run the trainer.
"""

from .assets import Assets, make_assets
from .command import verl_args
from .runner import StepWatcher, parse_console_metrics, run_verl

__all__ = ["Assets", "StepWatcher", "make_assets", "verl_args", "parse_console_metrics", "run_verl"]
