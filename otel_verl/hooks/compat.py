"""Which hooks apply to the installed verl, and the one table per process that says so.

``check`` is the one judgement, used by ``HookSet`` before it wraps a target and by
``otel-verl doctor`` before a job: a target applies when its name exists and has the shape its
wrapper expects (``hooks.targets.TARGETS``: its parameters, sync or async, a class where a method
is named on one); a target that exists with another shape is skipped, never wrapped.

``REPORT`` collects what ``HookSet`` did in this process, and ``say`` logs it once, as one record:
the otel-verl and verl versions, whether verl is in the tested range, and a row per hook
(applied, skipped and why, absent where optional) with its mechanism and since when. It is said
when this process's telemetry starts (``process.state``: by then the modules the process works
with are imported), or at exit in a process that never made any; a hook skipped after that is said
in one more line per module. A WARNING when verl is untested or a hook was skipped, else INFO.
"""

from __future__ import annotations

import atexit
import inspect
import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from otel_verl import per_process
from otel_verl.hooks import targets


class _HookLike(Protocol):
    """What this module reads of a ``hookset.Hook`` (a protocol: ``hookset`` imports this module)."""

    module: str
    target: str
    package: str


_log = logging.getLogger("otel_verl")

APPLIED = "applied"
SKIPPED = "skipped"  # a required hook whose target is missing or has another shape
ABSENT = "absent"  # an optional hook whose target is not there (varies by version or engine)
NOT_HERE = "not here"  # its ``only_if`` is false in this process
NOT_LOADED = "not loaded"  # its module was never imported in this process


class ShapeError(Exception):
    """The target exists with another shape than its wrapper expects."""


def resolve(module: Any, name: str) -> tuple[Any, str, Any]:
    """``(owner, attribute, value)`` of ``name`` ("func" or "Class.method") in ``module``;
    ``AttributeError`` naming the first missing part."""
    parts = name.split(".")
    owner = module
    for i, part in enumerate(parts[:-1]):
        if not hasattr(owner, part):
            raise AttributeError(f"{'.'.join(parts[: i + 1])} missing")
        owner = getattr(owner, part)
    if not hasattr(owner, parts[-1]):
        raise AttributeError(f"{name} missing")
    return owner, parts[-1], getattr(owner, parts[-1])


def shape_problem(owner: Any, name: str, value: Any, shape: targets.Shape) -> str | None:
    """Why ``value`` (``name`` on ``owner``) does not have ``shape``; None when it has."""
    if "." in name and not inspect.isclass(owner):
        return f"{name.rpartition('.')[0]} is no longer a class"
    if not callable(value):
        return f"{name} is no longer callable"
    # another hook's wrapt proxy may sit in front (two hooks on one target): judge what it wraps
    if shape.coroutine is not None and inspect.iscoroutinefunction(inspect.unwrap(value)) != shape.coroutine:
        return f"{name} is {'no longer' if shape.coroutine else 'now'} async"
    if shape.params:
        try:
            params = inspect.signature(value).parameters
        except (TypeError, ValueError):  # no signature to read (a builtin): the name has to do
            return None
        gone = [p for p in shape.params if p not in params]
        if gone:
            return f"{name} has no parameter {', '.join(repr(p) for p in gone)}"
    return None


def check(hook: _HookLike, module: Any) -> tuple[Any, str, Any]:
    """``resolve`` the hook's target in ``module`` and check its shape (``targets.spec``):
    ``AttributeError`` when it is missing, ``ShapeError`` when it exists with another shape."""
    owner, attr, value = resolve(module, hook.target)
    spec = targets.spec(hook.module, hook.target)
    problem = None if spec is None else shape_problem(owner, hook.target, value, spec.shape)
    if problem is not None:
        raise ShapeError(f"shape: {problem}")
    return owner, attr, value


@dataclass
class Row:
    key: str  # module.target
    status: str
    why: str = ""  # for a skipped or absent one
    package: str = "verl"

    @property
    def mechanism(self) -> str:
        spec = targets.by_key(self.key)
        return spec.mechanism if spec is not None else "patch"

    @property
    def since(self) -> str:
        spec = targets.by_key(self.key)
        return spec.since if spec is not None else "?"


def header(rows: Sequence[Row]) -> str:
    """``otel-verl X on verl Y (...): N applied, M skipped, ...``: the versions and the counts."""
    from otel_verl.package import _instruments, package_version, untested_version
    from otel_verl.version import __version__

    untested = untested_version()
    verl = f"verl {package_version('verl')}" + (f" (untested; tested: {_instruments[0]})" if untested else "")
    counts = {s: sum(r.status == s for r in rows) for s in (APPLIED, SKIPPED, ABSENT, NOT_HERE, NOT_LOADED)}
    said = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    return f"otel-verl {__version__} on {verl}: hooks {said or 'none'}"


def lines(rows: Iterable[Row], statuses: Sequence[str] = (SKIPPED, ABSENT, APPLIED)) -> list[str]:
    """One line per row whose status is in ``statuses``, in that order: status, target, why,
    mechanism and since when (aligned)."""
    shown = sorted((r for r in rows if r.status in statuses), key=lambda r: (statuses.index(r.status), r.key))
    width = max((len(r.key) for r in shown), default=0)
    out = []
    for r in shown:
        why = f"  {r.why}" if r.why else ""
        out.append(f"  {r.status:<8} {r.key:<{width}}  [{r.mechanism}, since {r.since}]{why}")
    return out


def applied_lines(rows: Iterable[Row]) -> list[str]:
    """The applied hooks, one line per module: ``applied  module: Class.method, func``."""
    by_module: dict[str, list[str]] = {}
    for r in sorted(rows, key=lambda r: r.key):
        if r.status == APPLIED:
            spec = targets.by_key(r.key)
            module, name = (spec.module, spec.name) if spec is not None else r.key.rsplit(".", 1)
            by_module.setdefault(module, []).append(name)
    return [f"  {APPLIED:<8} {module}: {', '.join(names)}" for module, names in by_module.items()]


def table(rows: Sequence[Row]) -> str:
    """The header, a line per skipped or absent hook (why, mechanism, since when), and the applied
    ones per module (those not loaded or not for this process: counted in the header)."""
    return "\n".join([header(rows), *lines(rows, (SKIPPED, ABSENT)), *applied_lines(rows)])


class HookReport:
    """What ``HookSet`` did with each hook in this process; said once (``say``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, Row] = {}
        self._hooks: dict[str, _HookLike] = {}
        self._said = False
        self._exit_registered = False

    def expect(self, hooks: Iterable[_HookLike]) -> None:
        """The hooks installed (each ``not loaded`` until its module is imported); the exit
        fallback registered once."""
        with self._lock:
            for hook in hooks:
                self._hooks.setdefault(_key(hook), hook)
            if not self._exit_registered:
                self._exit_registered = True
                atexit.register(self.say)
                from otel_verl.process.state import PROCESS  # lazily: the offline tools read this module

                PROCESS.on_built(self.say)  # said when this process's telemetry starts

    def record(self, hook: _HookLike, status: str, why: str = "") -> None:
        key = _key(hook)
        with self._lock:
            old = self._rows.get(key)
            if old is not None and _rank(old.status) >= _rank(status):
                return  # two hooks on one target: the worse outcome stands
            self._rows[key] = Row(key, status, why, hook.package)
            late = self._said and status == SKIPPED
        if late:
            _log.warning("otel-verl: also skipped in this process: %s", lines([self._rows[key]], (SKIPPED,))[0].strip())

    def rows(self) -> list[Row]:
        with self._lock:
            return [self._rows.get(key) or Row(key, NOT_LOADED, "", h.package) for key, h in self._hooks.items()]

    def say(self) -> None:
        """Log the table once per process (never raises)."""
        try:
            with self._lock:
                if self._said or not self._hooks:
                    return
                self._said = True
            rows = self.rows()
            from otel_verl.package import untested_version

            loud = untested_version() is not None or any(r.status == SKIPPED for r in rows)
            _log.log(logging.WARNING if loud else logging.INFO, "%s", table(rows))
        except Exception:  # noqa: BLE001 - a report must never break the process
            _log.debug("otel-verl: could not say the hook table", exc_info=True)

    def reset(self) -> None:
        """Forget everything (tests)."""
        with self._lock:
            self._rows.clear()
            self._hooks.clear()
            self._said = False


def _key(hook: _HookLike) -> str:
    return f"{hook.module}.{hook.target}"


def _rank(status: str) -> int:
    return {NOT_LOADED: 0, NOT_HERE: 1, APPLIED: 2, ABSENT: 3, SKIPPED: 4}[status]


REPORT = HookReport()
per_process.register(__name__, reset=REPORT.reset)
