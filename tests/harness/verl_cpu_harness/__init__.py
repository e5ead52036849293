"""CPU harness for end-to-end tests: runs the real verl trainer without a GPU; and what the tests and
the benchmarks in ``bench/`` share (this package is installed, so neither puts the other on ``sys.path``).

Running verl on CPU:

- ``plugin``: verl plugin (entry point ``verl.plugins``) that makes verl 0.9.1 run on CPU.
- ``hfcpu``: the ``hfcpu`` rollout backend (HF ``generate`` behind verl's async rollout server API).
- ``vllm_cpu``: verl's own vLLM rollout on vLLM's CPU build (the two shims it needs).
- ``assets``: tiny tokenizer, model, data and reward function, generated locally.
- ``command``: Hydra overrides for ``python -m verl.trainer.main_ppo``.
- ``runner``: runs the trainer and reads its console metrics; ``progress``: one line per phase of a run.
- ``checkpoint_callback``, ``user_telemetry``: user code a run can be given (test assets).
- ``bootstrap_site``: what ``opentelemetry-bootstrap -a install`` would add, as a ``PYTHONPATH`` folder.
- ``python -m verl_cpu_harness``: make the assets and run the trainer.

Shared by tests and benchmarks:

- ``instrumented``: a real run under ``opentelemetry-instrument`` with otel-verl, its telemetry read back.
- ``soak``: a synthetic training loop through verl's own step code, for memory soaks.
- ``agent_loop``: verl's real agent-loop worker with only the Ray boundary and the agent replaced.
- ``stack_load``: one simulated large step through the real Collector into Jaeger and Prometheus.
- ``otlp_receiver``: an in-process OTLP/HTTP receiver; ``ports``: free local ports.
"""

from .assets import Assets, make_assets
from .command import verl_args
from .runner import StepWatcher, parse_console_metrics, run_verl

__all__ = ["Assets", "StepWatcher", "make_assets", "verl_args", "parse_console_metrics", "run_verl"]
