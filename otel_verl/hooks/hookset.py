"""``Hook`` and ``HookSet``: wrappers applied when their module is imported, removed on uninstrument.

A hook is applied when its module is imported (never importing verl itself, so the 25+
processes of a Ray job that never touch verl pay nothing). A hook whose target is missing in
the installed verl or Ray (a renamed private name), or exists with another shape than its
wrapper expects (``hooks.compat.check``), is skipped; training is unaffected. What applied and
what did not goes into the process's one hook table (``hooks.compat.REPORT``), with the versions.

A documented verl hook (``Hook.attach``) is not wrapped here: its target (a method verl calls on an
object it made, e.g. the trainer's checkpoint callback) is checked and reported the same way, and
its module attaches ``wrapper`` to each such object (``hooks.callbacks``), asking ``in_effect``
first and at each call: from uninstrument on, what was attached passes every call through.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import wrapt
from opentelemetry.instrumentation.utils import unwrap

from otel_verl.hooks import compat
from otel_verl.package import package_version


@dataclass(frozen=True)
class Hook:
    module: str
    target: str  # "func" or "Class.method"
    wrapper: Callable[..., Any]
    optional: bool = False  # absent in some supported verl versions: skip quietly
    only_if: Callable[[], bool] | None = None  # checked when the module is imported
    # ``replace``: ``wrapper(original)`` returns the new attribute (for decorated functions whose
    # decorator inspects its caller: a wrapt proxy in between would change what it sees).
    replace: bool = False
    # ``attach``: a documented verl hook: checked and reported here, attached per object by its
    # module (``wrapper`` is what it attaches); nothing is wrapped at import
    attach: bool = False

    @property
    def package(self) -> str:
        """The distribution that owns the target (named in the hook table when it is not verl)."""
        return self.module.split(".", 1)[0]


_IN_EFFECT: set[str] = set()  # the ``attach`` hooks' keys whose target checked out (and not uninstalled)


def in_effect(module: str, target: str) -> bool:
    """Whether the ``attach`` hook on ``module``.``target`` is installed and its target checked out."""
    return f"{module}.{target}" in _IN_EFFECT


def attach_to(owner: Any, name: str, wrapper: Any) -> None:
    """Wrap ``owner.name`` on that object only, for an ``attach`` hook (its class stays as it is).
    ``uninstrument()`` leaves such wrappers on the objects verl made, passing calls straight
    through once the hook is no longer ``in_effect``. AttributeError or TypeError: an object that
    takes no attribute (``__slots__``)."""
    wrapt.wrap_function_wrapper(owner, name, wrapper)


def _owner(module: Any, target: str) -> tuple[Any, str]:
    owner_path, _, attr = target.rpartition(".")
    owner = module
    for part in filter(None, owner_path.split(".")):
        owner = getattr(owner, part)
    return owner, attr


def _why(exc: Exception) -> str:
    if isinstance(exc, (AttributeError, compat.ShapeError)):
        return str(exc)
    return f"{exc.__class__.__name__}: {exc}"


class HookSet:
    """Applies hooks on import of their modules and removes them again."""

    def __init__(self, hooks: list[Hook]) -> None:
        self._hooks = hooks
        self._active = False
        self._registered: set[str] = set()
        self.applied: list[Hook] = []
        self._replaced: dict[Hook, tuple[Any, str, Any]] = {}

    def install(self) -> None:
        self._active = True
        compat.REPORT.expect(self._hooks)
        for module in {h.module for h in self._hooks}:
            if module in self._registered:
                if module in sys.modules:
                    self._apply(sys.modules[module])
                continue
            self._registered.add(module)
            # wrapt runs the callback at once if the module is already imported.
            wrapt.register_post_import_hook(self._apply, module)

    def _apply(self, module: Any) -> None:
        if not self._active:
            return
        for hook in self._hooks:
            if hook.module != module.__name__ or hook in self.applied:
                continue
            if hook.only_if is not None and not hook.only_if():
                compat.REPORT.record(hook, compat.NOT_HERE)
                continue
            try:
                owner, attr, _ = compat.check(hook, module)
                if hook.attach:
                    _IN_EFFECT.add(f"{hook.module}.{hook.target}")
                elif hook.replace:
                    original = owner.__dict__.get(attr, getattr(owner, attr))
                    replacement = hook.wrapper(original)
                    if replacement is None:
                        raise compat.ShapeError(f"shape: {hook.target} is not what its replacement expects")
                    setattr(owner, attr, replacement)
                    self._replaced[hook] = (owner, attr, original)
                else:
                    wrapt.wrap_function_wrapper(owner, attr, hook.wrapper)
                self.applied.append(hook)
                compat.REPORT.record(hook, compat.APPLIED)
            except Exception as exc:  # noqa: BLE001 - a renamed verl/Ray internal must not stop training
                why = _why(exc)
                if hook.package != "verl":  # the header names verl's version; another owner's goes here
                    why += f" in {hook.package} {package_version(hook.package)}"
                compat.REPORT.record(hook, compat.ABSENT if hook.optional else compat.SKIPPED, why)

    def uninstall(self) -> None:
        self._active = False
        for hook in reversed(self.applied):
            if hook.attach:
                _IN_EFFECT.discard(f"{hook.module}.{hook.target}")
                continue
            if hook in self._replaced:
                owner, attr, original = self._replaced.pop(hook)
                setattr(owner, attr, original)
                continue
            owner, attr = _owner(sys.modules[hook.module], hook.target)
            unwrap(owner, attr)
        self.applied.clear()
