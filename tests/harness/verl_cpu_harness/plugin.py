"""verl plugin that lets the real verl 0.9.1 trainer run on a CPU-only machine (tests only).

Loaded through the ``verl.plugins`` entry point at ``import verl`` time, in every process.
It does nothing when a GPU is present (or ``VERL_CPU_HARNESS=0``). Otherwise it:

1. registers a "cpu" platform: device "cpu", backend gloo, Ray resource "GPU" (the job starts
   Ray with fake GPUs, ``+ray_kwargs.ray_init.num_gpus=N``), a ``torch.cuda`` stand-in;
2. dedupes the backend string verl gives ``init_process_group`` ("cpu:gloo,cpu:gloo");
3. registers verl's FSDP engines for device "cpu" and drops pinned memory from FSDP2's
   CPUOffloadPolicy (pinning needs an accelerator);
4. loads the critic with sdpa (verl hard-codes flash_attention_2 there);
5. registers the ``hfcpu`` rollout backend (see ``verl_cpu_harness.hfcpu``);
   with vLLM's CPU build installed, verl's own ``vllm`` rollout runs too, with the two shims of
   ``verl_cpu_harness.vllm_cpu``;
6. (fault tests, opt-in) ``VERL_CPU_HARNESS_KILL_AT=<method>:<n>`` kills a worker-group actor
   (``os._exit(1)``) at its ``n``-th call of that ``verl.workers.engine_workers`` method;
7. (fault tests, opt-in) ``VERL_CPU_HARNESS_STEP_SECONDS=<s>`` makes each training step last at
   least ``s`` seconds (``Tracking.log`` waits until ``s`` after its previous call), so that a run
   spans an outage of known length with a known number of steps, on a fast or a loaded machine.
8. (fault tests, opt-in) ``VERL_CPU_HARNESS_HOLD_DIR=<dir>`` holds the driver after it logged
   step ``N`` while ``<dir>/hold-N`` exists (it writes ``<dir>/at-N`` when it starts waiting), so
   that a test does its fault at a known point of the run instead of racing Ray's console.
9. (compatibility tests, opt-in) ``VERL_CPU_HARNESS_NEXT_VERL=1`` makes the installed verl look
   like a next release that moved names the way verl's main does (see ``NEXT_VERL_MOVES``):
   a private method gone and a parameter renamed, training itself unchanged.

Patches that need a verl module are applied right after that module is first imported
(``_when_imported``), so loading the plugin stays cheap and never imports
``verl.trainer.ppo.ray_trainer`` (importing it resolves and locks the platform).
"""

from __future__ import annotations

import importlib.abc
import os
import shutil
import sys
import types
from collections.abc import Callable
from typing import Any

import torch


def _cuda_present() -> bool:
    # A CPU-only Ray actor on a GPU host sees no CUDA device, so also look at the host.
    return torch.cuda.is_available() or shutil.which("nvidia-smi") is not None or os.path.exists("/dev/nvidiactl")


def _enabled() -> bool:
    flag = os.environ.get("VERL_CPU_HARNESS", "auto").strip().lower()
    if flag in ("0", "false", "off"):
        return False
    if flag in ("1", "true", "on"):
        return True
    return not _cuda_present()


# --------------------------------------------------------------------------------------
# post-import hooks: run fn(module) once `name` has been imported (now, if it already is)
# --------------------------------------------------------------------------------------
_hooks: dict[str, list[Callable[[types.ModuleType], None]]] = {}


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                exec_module = spec.loader.exec_module

                def exec_and_hook(module, _exec=exec_module):
                    _exec(module)
                    for fn in _hooks.pop(name, []):
                        fn(module)

                spec.loader.exec_module = exec_and_hook
                return spec
        return None


def _when_imported(name: str, fn: Callable[[types.ModuleType], None]) -> None:
    if name in sys.modules:
        fn(sys.modules[name])
    else:
        _hooks.setdefault(name, []).append(fn)


# --------------------------------------------------------------------------------------
# 1. the "cpu" platform
# --------------------------------------------------------------------------------------
def _zero(*args, **kwargs) -> int:
    return 0


def _noop(*args, **kwargs) -> None:
    return None


class _CpuDeviceModule(types.ModuleType):
    """Stands in for ``torch.cuda``: streams/events from ``torch.cpu``, memory reads 0,
    cache and allocator calls do nothing. ``is_available()`` is False so verl skips its
    GPU-memory bookkeeping."""

    def __init__(self) -> None:
        super().__init__("verl_cpu_harness.cpu_device")
        self.is_available = lambda: False
        self.current_device = lambda: "cpu"
        self.device_count = lambda: 1
        self.get_device_name = lambda *a: "cpu"
        self.mem_get_info = lambda *a: (0, 0)
        self.get_rng_state = lambda *a: torch.get_rng_state()
        self.set_rng_state = lambda state, *a: torch.set_rng_state(state)
        for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
            setattr(self, name, _zero)
        for name in (
            "empty_cache", "ipc_collect", "set_device", "set_per_process_memory_fraction", "manual_seed",
            "manual_seed_all", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
        ):  # fmt: skip
            setattr(self, name, _noop)

    def __getattr__(self, name: str) -> Any:  # Stream, Event, stream, current_stream, synchronize
        return getattr(torch.cpu, name)


def _register_platform() -> None:
    from contextlib import contextmanager

    from verl.plugin.platform import PlatformBase, PlatformRegistry, platform_manager

    cpu_device_module = _CpuDeviceModule()

    @PlatformRegistry.register(platform="cpu")
    class PlatformCPU(PlatformBase):
        device_name = "cpu"
        vendor_name = "cpu"
        device_module = cpu_device_module

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check=False) -> bool:
            # Probed after nvidia/huawei/amd; only claim the host when it has no GPU.
            return not _cuda_present()

        def current_device(self):
            return "cpu"  # verl does tensor.to(get_device_id()); an int would mean cuda:N

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index) -> None:
            pass

        def synchronize(self, device_index: int | None = None) -> None:
            pass

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            pass

        def empty_cache(self) -> None:
            pass

        def get_device_capability(self, device_index: int = 0):
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"  # torch's CPU build has no NCCL

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"  # what Ray sets for the fake GPUs

        @contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            pass

        def profiler_stop(self) -> None:
            pass

        def ray_resource_name(self) -> str:
            return "GPU"  # verl counts "GPU" resources; Ray is started with fake ones

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

    # Something imported before this plugin may already have resolved the platform (to
    # nvidia, the fallback): replace it.
    if platform_manager._current_platform is not None and platform_manager._current_platform.device_name != "cpu":
        platform_manager.set_platform(PlatformCPU())


# --------------------------------------------------------------------------------------
# 2. gloo: verl builds "cpu:gloo,<device>:<backend>", i.e. "cpu:gloo,cpu:gloo" here, which
#    torch rejects ("Duplicate device type cpu in backend string").
# --------------------------------------------------------------------------------------
def _patch_init_process_group() -> None:
    import torch.distributed as dist

    original = dist.init_process_group
    if getattr(original, "_cpu_harness", False):
        return

    def init_process_group(*args, **kwargs):
        backend = kwargs["backend"] if "backend" in kwargs else (args[0] if args else None)
        if isinstance(backend, str) and "," in backend:
            deduped = ",".join(dict.fromkeys(part.strip() for part in backend.split(",")))
            if "backend" in kwargs:
                kwargs["backend"] = deduped
            else:
                args = (deduped, *args[1:])
        return original(*args, **kwargs)

    init_process_group._cpu_harness = True
    dist.init_process_group = init_process_group


# --------------------------------------------------------------------------------------
# 3. FSDP engines on "cpu"
# --------------------------------------------------------------------------------------
def _patch_fsdp_engine(mod: types.ModuleType) -> None:
    from verl.workers.engine.base import EngineRegistry

    # verl registers its FSDP engines for devices ["cuda", "npu"] only.
    engines = EngineRegistry._engines
    if "cpu" not in engines.get("language_model", {}).get("fsdp2", {}):
        EngineRegistry.register("language_model", ["fsdp", "fsdp2"], device="cpu")(mod.FSDPEngineWithLMHead)
        EngineRegistry.register("value_model", ["fsdp", "fsdp2"], device="cpu")(mod.FSDPEngineWithValueHead)

    # FSDP2 ref model: verl hard-codes CPUOffloadPolicy(pin_memory=True); pinning memory
    # raises "Cannot access accelerator device when none is available".
    policy_cls = mod.CPUOffloadPolicy
    if policy_cls is not None and not getattr(policy_cls, "_cpu_harness", False):

        def cpu_offload_policy(pin_memory: bool = True, **kwargs):
            return policy_cls(pin_memory=False, **kwargs)

        cpu_offload_policy._cpu_harness = True
        mod.CPUOffloadPolicy = cpu_offload_policy


# --------------------------------------------------------------------------------------
# 4. critic: verl.utils.model.load_valuehead_model passes attn_implementation=
#    "flash_attention_2" regardless of override_config; load it with sdpa instead.
#    (transformer_impl imports the function at call time, so patching the module works.)
# --------------------------------------------------------------------------------------
def _patch_valuehead_loader(mod: types.ModuleType) -> None:
    def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
        from transformers import AutoModelForTokenClassification

        return AutoModelForTokenClassification.from_pretrained(
            pretrained_model_name_or_path=local_path,
            torch_dtype=torch_dtype,
            config=model_config,
            attn_implementation="sdpa",
            trust_remote_code=trust_remote_code,
        )

    mod.load_valuehead_model = load_valuehead_model


# --------------------------------------------------------------------------------------
# 5. the "hfcpu" rollout backend (verl 0.9.1 rollout always goes through an async server)
# --------------------------------------------------------------------------------------
def _register_rollout_adapter(mod: types.ModuleType) -> None:
    # (name, mode) -> BaseRollout used by the training worker to push weights to the server
    mod._ROLLOUT_REGISTRY[("hfcpu", "async")] = "verl_cpu_harness.hfcpu.HFCPUServerAdapter"


def _register_rollout_replica(mod: types.ModuleType) -> None:
    def load():
        from verl_cpu_harness.hfcpu import HFCPUReplica

        return HFCPUReplica

    mod.RolloutReplicaRegistry.register("hfcpu", load)


# --------------------------------------------------------------------------------------
# 6. fault injection for tests (opt-in): VERL_CPU_HARNESS_KILL_AT=<method>:<n> makes a worker
#    actor die (os._exit(1): no exception, no atexit, as an OOM kill or a segfault would) at the
#    n-th call of <method> of the engine_workers classes. Only in worker-group actors (verl
#    gives them WG_PREFIX); the driver keeps the classes untouched (Ray pickles them there).
# --------------------------------------------------------------------------------------
KILL_AT = "VERL_CPU_HARNESS_KILL_AT"


def _kill_spec() -> tuple[str, int] | None:
    raw = os.environ.get(KILL_AT, "").strip()
    method, sep, count = raw.rpartition(":")
    if not raw or not sep or not method or not count.isdigit() or int(count) < 1:
        return None
    return method, int(count)


def _install_kill_switch(mod: types.ModuleType) -> None:
    import functools

    spec = _kill_spec()
    if spec is None:
        return
    method, at = spec
    calls = [0]
    for cls in (getattr(mod, "ActorRolloutRefWorker", None), getattr(mod, "TrainingWorker", None)):
        original = cls.__dict__.get(method) if cls is not None else None
        if original is None or getattr(original, "_cpu_harness_kill", False):
            continue

        @functools.wraps(original)  # keeps verl's @register metadata
        def dying(*args, _original=original, **kwargs):
            calls[0] += 1
            if calls[0] >= at:
                sys.stderr.write(f"verl_cpu_harness: {KILL_AT}: killing this worker in {method} call {calls[0]}\n")
                sys.stderr.flush()
                os._exit(1)
            return _original(*args, **kwargs)

        dying._cpu_harness_kill = True
        setattr(cls, method, dying)


# --------------------------------------------------------------------------------------
# 7. pacing for tests (opt-in): VERL_CPU_HARNESS_STEP_SECONDS=<s>, each step at least s seconds.
# --------------------------------------------------------------------------------------
STEP_SECONDS = "VERL_CPU_HARNESS_STEP_SECONDS"


def _step_seconds() -> float | None:
    try:
        value = float(os.environ.get(STEP_SECONDS, ""))
    except ValueError:
        return None
    return value if 0 < value < 3600 else None


def _install_pacing(mod: types.ModuleType) -> None:
    import functools
    import time

    seconds = _step_seconds()
    cls = getattr(mod, "Tracking", None)
    original = cls.__dict__.get("log") if cls is not None else None
    if seconds is None or original is None or getattr(original, "_cpu_harness_pace", False):
        return
    last = [None]

    @functools.wraps(original)
    def paced(*args, **kwargs):
        if last[0] is not None:
            time.sleep(max(0.0, last[0] + seconds - time.monotonic()))
        last[0] = time.monotonic()
        return original(*args, **kwargs)

    paced._cpu_harness_pace = True
    cls.log = paced


# --------------------------------------------------------------------------------------
# 8. holding the driver at a step (opt-in): VERL_CPU_HARNESS_HOLD_DIR=<dir>. Once verl's
#    Tracking.log(step=N) returns, the driver waits while <dir>/hold-N exists (the test made it
#    before the job and removes it when its fault is done), after writing <dir>/at-N (the test's
#    signal, independent of when Ray forwards the console). Bounded by HOLD_MAX_S.
# --------------------------------------------------------------------------------------
HOLD_DIR = "VERL_CPU_HARNESS_HOLD_DIR"
HOLD_MAX_S = 900.0
HOLD_POLL_S = 0.1


def hold_at(folder: str, step: object, max_s: float = HOLD_MAX_S) -> bool:
    """Wait while ``folder/hold-<step>`` exists (announced by ``folder/at-<step>``); whether it held."""
    import time

    hold = os.path.join(folder, f"hold-{step}")
    if not os.path.exists(hold):
        return False
    at = os.path.join(folder, f"at-{step}")
    with open(at + ".tmp", "w") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(at + ".tmp", at)
    deadline = time.monotonic() + max_s
    while os.path.exists(hold) and time.monotonic() < deadline:
        time.sleep(HOLD_POLL_S)  # the test's file is the condition; a few reads a second
    return True


def _install_hold(mod: types.ModuleType) -> None:
    import functools

    folder = os.environ.get(HOLD_DIR, "").strip()
    cls = getattr(mod, "Tracking", None)
    original = cls.__dict__.get("log") if cls is not None else None
    if not folder or original is None or getattr(original, "_cpu_harness_hold", False):
        return

    @functools.wraps(original)
    def log(self, data, step, *args, **kwargs):
        try:
            return original(self, data, step, *args, **kwargs)
        finally:
            hold_at(folder, step)

    log._cpu_harness_hold = True
    cls.log = log


# --------------------------------------------------------------------------------------
# 9. a simulated next verl release (opt-in): VERL_CPU_HARNESS_NEXT_VERL=1. Each move happens as
#    its module is imported, before any other post-import hook sees the module (otel-verl's hooks
#    run after it, as they would on a release that shipped the change), and keeps verl's own
#    callers working, so that training is what it was.
# --------------------------------------------------------------------------------------
NEXT_VERL = "VERL_CPU_HARNESS_NEXT_VERL"


def _drop_private_request_id(mod: types.ModuleType) -> None:
    """``LLMServerClient._vllm_request_id`` gone (a private method renamed): the class no longer
    has the name, verl's own ``self._vllm_request_id(...)`` calls reach the new one."""
    cls = mod.LLMServerClient
    cls._engine_request_id = cls.__dict__["_vllm_request_id"]
    delattr(cls, "_vllm_request_id")

    def __getattr__(self, name):  # only for names the instance and class do not have
        if name == "_vllm_request_id":
            return self._engine_request_id
        raise AttributeError(name)

    cls.__getattr__ = __getattr__


def _rename_metrics_batch(mod: types.ModuleType) -> None:
    """``PPOTrainer._compute_metrics(self, batch, ...)`` -> ``(self, batch_meta, ...)``: same
    name, another shape (verl passes the batch by position)."""
    cls = mod.PPOTrainer
    original = cls.__dict__["_compute_metrics"]

    def _compute_metrics(self, batch_meta, metrics, timing_raw, global_steps, epoch):
        return original(self, batch_meta, metrics, timing_raw, global_steps, epoch)

    cls._compute_metrics = _compute_metrics


NEXT_VERL_MOVES: dict[str, Callable[[types.ModuleType], None]] = {
    "verl.workers.rollout.llm_server": _drop_private_request_id,
    "verl.trainer.ppo.v1.trainer_base": _rename_metrics_batch,
}


def _first_after_import(name: str, fn: Callable[[types.ModuleType], None]) -> None:
    """``fn(module)`` right after ``name`` is imported, before the post-import hooks registered
    earlier (otel-verl registers its own before ``import verl`` loads this plugin)."""
    try:
        import wrapt
        from wrapt import importer
    except ImportError:
        _when_imported(name, fn)
        return
    wrapt.register_post_import_hook(fn, name)
    with importer._post_import_hooks_lock:  # test-only: reorder wrapt's list for this module
        hooks = importer._post_import_hooks.get(name)
        if hooks and hooks[-1] is fn:
            hooks.insert(0, hooks.pop())


def install() -> bool:
    """Apply everything; returns False (and does nothing) when a GPU is present."""
    if not _enabled():
        return False
    if not any(isinstance(f, _PostImportFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportFinder())
    _register_platform()
    _patch_init_process_group()
    _when_imported("verl.workers.engine.fsdp.transformer_impl", _patch_fsdp_engine)
    _when_imported("verl.utils.model", _patch_valuehead_loader)
    _when_imported("verl.workers.rollout.base", _register_rollout_adapter)
    _when_imported("verl.workers.rollout.replica", _register_rollout_replica)
    from . import vllm_cpu

    vllm_cpu.install(_when_imported)
    if _kill_spec() is not None and "WG_PREFIX" in os.environ:
        try:  # otel-verl hooks this module with wrapt: two chained import finders would recurse
            import wrapt

            wrapt.register_post_import_hook(_install_kill_switch, "verl.workers.engine_workers")
        except ImportError:
            _when_imported("verl.workers.engine_workers", _install_kill_switch)
    if _step_seconds() is not None:
        try:
            import wrapt

            wrapt.register_post_import_hook(_install_pacing, "verl.utils.tracking")
        except ImportError:
            _when_imported("verl.utils.tracking", _install_pacing)
    if os.environ.get(HOLD_DIR, "").strip():
        try:  # as above: otel-verl hooks verl.utils.tracking with wrapt too
            import wrapt

            wrapt.register_post_import_hook(_install_hold, "verl.utils.tracking")
        except ImportError:
            _when_imported("verl.utils.tracking", _install_hold)
    if os.environ.get(NEXT_VERL, "").strip().lower() in ("1", "true", "on"):
        for name, move in NEXT_VERL_MOVES.items():
            _first_after_import(name, move)
    return True


INSTALLED = install()
