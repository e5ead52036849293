"""The verl versions this instrumentation supports (checked by ``opentelemetry-instrument``), and
the installed versions of the packages otel-verl hooks into (said in the hook table of each process, ``hooks.compat``).

The bottom layer of the package: it imports nothing of otel-verl.
"""

from __future__ import annotations

# Only what the tests run (scripts/setup.sh installs verl 0.9.1). verl 0.9.0 is run too, as an untested
# release (docs/generated/compatibility.md): its v1 driver works with 0.9.1's dependencies, but its own
# verl-core extra lacks cachetools and its v0 driver needs flash_attn. Keep in step with pyproject.toml's
# `instruments` extra and README's support section (tests/unit/test_package.py).
_instruments = ("verl >= 0.9.1, < 0.10",)

_supports_metrics = True

PYTHON = "python"  # not a distribution: the interpreter's own version (``sys._getframe`` is CPython's)


def installed_version(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (``verl``, ``ray``, ``opentelemetry-sdk``,
    or ``python`` for the interpreter), or None when it is not installed."""
    if dist == PYTHON:
        import platform

        return f"{platform.python_implementation()} {platform.python_version()}"
    import importlib.metadata  # here: instrumentor imports this module in every process of a job

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def package_version(dist: str) -> str:
    """The installed version of ``dist``, or ``unknown`` (not installed, or a broken install)."""
    try:
        return installed_version(dist) or "unknown"
    except Exception:  # noqa: BLE001 - a broken distribution's metadata
        return "unknown"


def versions(dists: tuple[str, ...] | list[str]) -> str:
    """``ray 2.60.0, opentelemetry-sdk 1.45.2``: each of ``dists`` with its installed version."""
    return ", ".join(f"{d} {package_version(d)}" if d != PYTHON else package_version(d) for d in dists)


VERL = "verl"


def untested_version() -> str | None:
    """The installed verl's version when it is outside the tested range; None when it is inside (or
    verl is not installed, or its metadata cannot be read)."""
    try:
        from packaging.requirements import Requirement

        version = installed_version(VERL)
        if version is None:
            return None
        wanted = Requirement(_instruments[0]).specifier
        return None if wanted.contains(version, prereleases=True) else version
    except Exception:  # noqa: BLE001 - an unreadable version is no reason to act
        return None
