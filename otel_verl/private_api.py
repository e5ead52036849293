"""The private names of verl, Ray, Python and the OpenTelemetry SDK that otel-verl relies on, looked up in one place.

A private name (a ``_``-prefixed function or attribute, an environment variable or a local
variable that verl sets for itself) is no API of its owner: any release may rename or drop it.
otel-verl reads every such name through ``attribute`` or ``import_attribute``, or reports one it
finds gone with ``missing``. When the name is not there, it says so once per process and name,
with the installed versions of the packages involved (``otel_verl.package.versions``) and what is
lost, and the caller gets its ``default``: the value with which that caller fails safe (each call
site says why its default is the safe one). Training never sees the difference.
"""

from __future__ import annotations

import importlib
from typing import Any

from otel_verl._safe import warn_once
from otel_verl.package import versions


def missing(name: str, dists: tuple[str, ...], effect: str) -> None:
    """Say (once per process) that private name ``name`` of ``dists`` is not there, and ``effect``."""
    warn_once(
        f"private name {name}",
        "%s has no %s (a private name otel-verl relies on); %s",
        versions(dists),
        name,
        effect,
    )


def attribute(obj: Any, path: str, *, name: str, dists: tuple[str, ...], effect: str, default: Any = None) -> Any:
    """``obj.<path>`` (a dotted path), or ``default`` when a part of it is not there (said once).

    ``name`` is how the message calls it (``obj`` itself may be an instance). Only a missing
    attribute counts: any other error of a lookup (a property that raises) reaches the caller."""
    value = obj
    for part in path.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            missing(name, dists, effect)
            return default
    return value


def import_attribute(module: str, path: str, *, dists: tuple[str, ...], effect: str, default: Any = None) -> Any:
    """``<module>.<path>``, imported, or ``default`` when the module or a part of the path is not there (said once)."""
    try:
        owner = importlib.import_module(module)
    except ImportError:
        missing(f"{module}.{path}", dists, effect)
        return default
    return attribute(owner, path, name=f"{module}.{path}", dists=dists, effect=effect, default=default)
