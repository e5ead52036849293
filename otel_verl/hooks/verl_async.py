"""verl's ``auto_await`` methods (``verl.utils.ray_utils.auto_await``): where a hook's code goes.

``auto_await(async def ...)`` decides from its caller's frame whether to hand back a coroutine (an
awaiting caller) or run it to completion (a sync one). A wrapper between the caller and it would
change that answer, so hooks on such methods (the agent loops' hand-off, the replica controls)
replace the method with ``auto_await`` re-applied around their own coroutine function.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from otel_verl.hooks import targets


def around_auto_await(original: Any, build: Callable[[Any], Any]) -> Any:
    """A ``Hook.replace`` value for verl's ``auto_await(async def ...)`` methods: ``auto_await``
    re-applied around ``build(inner)``, or None when ``original`` no longer has that shape."""
    inner = getattr(original, "__wrapped__", None)
    if inner is None or not inspect.iscoroutinefunction(inner) or inspect.iscoroutinefunction(original):
        return None
    return importlib.import_module(targets.RAY_UTILS).auto_await(build(inner))
