"""``otel-verl doctor``: what the instrumentation would do in this environment.

Checks, each printed as one line (``ok``, ``!!`` for a problem, ``--`` for a note):

* verl installed and inside the supported range (``otel_verl.package._instruments``);
* the entry points ``opentelemetry_instrumentor: verl`` and ``verl.plugins: otel_verl``;
* the kill switch (``otel_verl.config.disabled_reason``: ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``,
  ``OTEL_SDK_DISABLED``);
* ``OTEL_VERL_*`` values (a bad one is a problem: it would fall back to its default);
* the trace/metric exporters from ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``, each
  resolved to its entry point, and for OTLP the endpoint (``otel_verl.offline.endpoints``), probed
  with a TCP connect (1 s timeout); for ``otlp_json_file`` the folder, checked writable;
* every hook of ``otel_verl.hooks.all_hooks()``: whether its target exists in the installed verl
  (imports verl's modules).

Exit code 0 when nothing is wrong, 1 otherwise.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import socket
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

from otel_verl import config, redact
from otel_verl.offline import endpoints
from otel_verl.package import _instruments

if TYPE_CHECKING:
    from otel_verl.hooks.hookset import Hook

CONNECT_TIMEOUT_S = 1.0
_SIGNALS = {"traces": "OTEL_TRACES_EXPORTER", "metrics": "OTEL_METRICS_EXPORTER"}


@dataclass
class Checks:
    """The lines doctor prints, and the problems among them (any problem: exit code 1)."""

    out: TextIO
    problems: list[str] = field(default_factory=list)

    def ok(self, msg: str) -> None:
        print(f"  ok  {msg}", file=self.out)

    def bad(self, msg: str) -> None:
        self.problems.append(msg)
        print(f"  !!  {msg}", file=self.out)

    def note(self, msg: str) -> None:
        print(f"  --  {msg}", file=self.out)


def _version(dist: str) -> str | None:
    # None when not installed (hooks.hookset.package_version says "unknown", also for a broken install).
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_verl(r: Checks) -> bool:
    from packaging.requirements import Requirement

    req = Requirement(_instruments[0])
    version = _version(req.name)
    if version is None:
        r.bad(f"verl is not installed (supported: {req.specifier})")
        return False
    if req.specifier.contains(version, prereleases=True):
        r.ok(f"verl {version} (supported: {req.specifier})")
    else:
        r.bad(f"verl {version} is outside the supported range {req.specifier}; hooks may not apply")
    return True


def check_entry_points(r: Checks) -> None:
    wanted = {
        "opentelemetry_instrumentor": ("verl", "otel_verl:VerlInstrumentor"),
        "verl.plugins": ("otel_verl", "otel_verl._verl_plugin"),
    }
    for group, (name, value) in wanted.items():
        found = [ep for ep in importlib.metadata.entry_points(group=group) if ep.name == name]
        if any(ep.value == value for ep in found):
            r.ok(f"entry point {group}: {name} = {value}")
        elif found:
            r.bad(f"entry point {group}: {name} points at {found[0].value}, expected {value}")
        else:
            r.bad(f"entry point {group}: {name} not found (is otel-verl installed in this environment?)")


def check_switches(r: Checks) -> None:
    # A note, not a problem: switching otel-verl off is a choice.
    reason = config.disabled_reason()
    if reason is None:
        return
    if reason.startswith(config.DISABLED_INSTRUMENTATIONS):
        r.note(f"{reason}: nothing will be instrumented")
    else:
        r.note(f"{reason}: no telemetry will be produced")


def check_settings(r: Checks) -> None:
    records: list[logging.LogRecord] = []

    class _Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    log = logging.getLogger(config.__name__)
    handler = _Catch(logging.WARNING)
    log.addHandler(handler)
    try:
        config.settings.cache_clear()
        s = config.settings()
    finally:
        log.removeHandler(handler)
        config.settings.cache_clear()
    for record in records:
        r.bad(record.getMessage().removeprefix("otel-verl: "))
    r.ok(
        f"{config.SHUTDOWN_TIMEOUT}={s.shutdown_timeout_s:g} s, {config.FORWARD_METRICS}={s.forward_metrics}, "
        f"{config.STEP_EXPORT}={s.step_export}, {config.RAY_RUNTIME_ENV}={s.ray_runtime_env}"
    )


def _shown(url: str) -> str:
    """``url`` as printed: credentials in it (``user:pass@``, a query) are replaced."""
    parts = urlsplit(url if "://" in url else f"//{url}")
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{redact.REDACTED}@{netloc.rsplit('@', 1)[1]}"
    query = redact.REDACTED if parts.query else ""
    shown = parts._replace(netloc=netloc, query=query).geturl()
    return shown if "://" in url else shown.removeprefix("//")


def _reachable(url: str) -> tuple[bool, str]:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    host = parts.hostname or "localhost"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return True, f"{host}:{port}"
    except OSError as exc:
        return False, f"{host}:{port} ({exc.__class__.__name__}: {exc})"


def check_exporters(r: Checks) -> None:
    probed: dict[str, bool] = {}
    for signal, env in _SIGNALS.items():
        raw = os.environ.get(env)
        names = [n.strip() for n in (raw or "otlp").split(",") if n.strip()]
        source = f"{env}={raw}" if raw is not None else f"{env} unset (otlp, as opentelemetry-distro)"
        r.note(source)
        group = f"opentelemetry_{signal}_exporter"
        available = {ep.name for ep in importlib.metadata.entry_points(group=group)}
        for name in names:
            if name == "none":
                r.note(f"{signal}: not exported")
                continue
            protocol = endpoints.signal_protocol(signal)
            lookup = {"otlp": "otlp_proto_http" if endpoints.is_http(protocol) else "otlp_proto_grpc"}.get(name, name)
            if lookup not in available:
                r.bad(f"{signal}: exporter {name!r} not installed (entry points: {', '.join(sorted(available))})")
                continue
            if name == "otlp_json_file":
                folder = os.path.abspath(os.environ.get(config.FILE_DIR) or config.DEFAULT_FILE_DIR)
                r.ok(f"{signal}: otlp_json_file -> {folder}")
                _check_writable(r, folder)
                continue
            if lookup in ("otlp_proto_grpc", "otlp_proto_http"):
                url = endpoints.signal_endpoint(signal, protocol=protocol)
                if url not in probed:
                    probed[url], where = _reachable(url)
                    if probed[url]:
                        r.ok(f"{signal}: {lookup} -> {_shown(url)} (reachable: TCP connect to {where})")
                    else:
                        r.bad(f"{signal}: {lookup} -> {_shown(url)} NOT reachable: {where}")
                else:
                    r.ok(f"{signal}: {lookup} -> {_shown(url)} (see above)")
                continue
            r.ok(f"{signal}: exporter {name}")


def _check_writable(r: Checks, folder: str) -> None:
    probe = folder
    while not os.path.exists(probe):
        probe = os.path.dirname(probe) or "."
    try:
        if not os.path.isdir(probe):
            raise NotADirectoryError(probe)
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        r.bad(f"cannot write telemetry files under {folder}: {exc}")


def _resolve(module_name: str, target: str) -> str | None:
    """None when ``module_name``.``target`` exists, else why not."""
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001
        return f"module {module_name} not importable ({exc.__class__.__name__}: {exc})"
    owner: Any = module
    path = target.split(".")
    for i, part in enumerate(path):
        if not hasattr(owner, part):
            return f"{'.'.join(path[: i + 1])} missing"
        owner = getattr(owner, part)
    return None


def check_hooks(r: Checks, hooks: Sequence[Hook] | None = None) -> None:
    # Imported here: the hooks import wrapt and the instrumentation package, which the other
    # checks (and the other otel-verl commands) do not need.
    from otel_verl.hooks import all_hooks
    from otel_verl.hooks.hookset import package_version

    version = package_version("verl")
    for hook in all_hooks() if hooks is None else hooks:
        where = f"{hook.module}.{hook.target}"
        why = _resolve(hook.module, hook.target)
        cond = " (only in Ray worker actors)" if hook.only_if is not None else ""
        if why is None:
            r.ok(f"hook {where}{cond}")
        elif hook.optional:
            r.note(f"hook {where}: {why} in verl {version} (optional: skipped)")
        else:
            r.bad(f"hook {where}: {why} in verl {version}; that telemetry would be disabled")


def doctor(out: TextIO | None = None, hooks: Sequence[Hook] | None = None) -> int:
    """Run every check, printing one line each; 0 when no problem was found, else 1."""
    from otel_verl.version import __version__

    out = sys.stdout if out is None else out
    r = Checks(out)
    print(f"otel-verl {__version__} doctor (python {sys.version.split()[0]}, {sys.executable})", file=out)
    print("package:", file=out)
    verl_ok = check_verl(r)
    check_entry_points(r)
    check_switches(r)
    print("settings:", file=out)
    check_settings(r)
    print("exporters:", file=out)
    check_exporters(r)
    print("hooks:", file=out)
    if verl_ok:
        check_hooks(r, hooks)
    else:
        r.note("skipped: verl is not installed")
    if r.problems:
        print(f"{len(r.problems)} problem(s) found.", file=out)
        return 1
    print("no problems found.", file=out)
    return 0
