"""``otel-verl doctor``: what the instrumentation would do in this environment.

Checks, each one line (``ok``, ``!!`` for a problem, ``--`` for a note); the problems are printed
first, and by default only they and a count of the rest (``--verbose``: every line):

* verl installed and inside the supported range (``otel_verl.package._instruments``);
* the entry points ``opentelemetry_instrumentor: verl`` and ``verl.plugins: otel_verl``;
* the extras that settings in force use (``[system]`` for ``process.*``, ``[gpu]`` for NVML),
  their packages read from otel-verl's installed metadata: a missing one is a note;
* the kill switch (``otel_verl.config.disabled_reason``: ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``,
  ``OTEL_SDK_DISABLED``);
* ``OTEL_VERL_*`` values (a bad one is a problem: it would fall back to its default), and every
  setting of ``otel_verl.config.VARIABLES`` that differs from its default; an ``OTEL_VERL_*``
  variable that is no setting is noted (a typo?);
* the guard's rules file (``OTEL_VERL_GUARD_RULES``), read as the guard reads it
  (``otel_verl.hooks.guard.rules.read_rules_file``: a regular file of at most 1 MiB, valid rules);
* the exporters of each signal from ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` /
  ``OTEL_LOGS_EXPORTER``, each resolved to its entry point, and for OTLP the signal's protocol and
  endpoint (``otel_verl.endpoints``): a malformed one is a problem, a URL is probed with
  a TCP connect (1 s timeout, once per URL) and judged for each signal that uses it (only for a
  signal that is asked for over OTLP: its exporter variable set, or an endpoint; OTLP as the
  distro's mere default with no endpoint set is a note when nothing answers); for
  ``otlp_json_file`` the folder, checked writable; for ``prometheus`` the ports
  (``OTEL_EXPORTER_PROMETHEUS_PORT``: a whole number from 1 to 65535); the OTLP headers of
  ``OTEL_VERL_OTLP_HEADERS_FILE`` and ``OTEL_EXPORTER_OTLP_*HEADERS`` read as the exporters read
  them (``otel_verl.process.otlp_headers``), their names shown, never a value;
* what ``opentelemetry-instrument`` sets up in each kind of process: the distro and configurator
  it loads in the launcher, none in the job's Ray workers (``otel_verl.process.worker_bootstrap``)
  unless ``OTEL_PYTHON_CONFIGURATOR`` names one, and the instrumentations it loads (those switched
  off or whose library is missing listed apart);
* every hook of ``otel_verl.hooks.all_hooks()``: whether its target exists in the installed verl
  (imports verl's modules; the warnings verl gives while importing are collected and listed after
  the hooks).

Exit code 0 when nothing is wrong, 1 otherwise (``otel_verl.exits``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import socket
import sys
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import TYPE_CHECKING, TextIO
from urllib.parse import urlsplit

from otel_verl import config, endpoints
from otel_verl.exits import CommandError
from otel_verl.package import _instruments, installed_version, package_version

if TYPE_CHECKING:
    from otel_verl.hooks.hookset import Hook

CONNECT_TIMEOUT_S = 1.0
_SIGNALS = {"traces": "OTEL_TRACES_EXPORTER", "metrics": "OTEL_METRICS_EXPORTER", "logs": "OTEL_LOGS_EXPORTER"}


OK, BAD, NOTE = "ok", "!!", "--"


@dataclass
class Checks:
    """The lines doctor prints, by section, and the problems among them (any problem: exit code 1).

    Nothing is printed while the checks run: ``report`` prints the problems first, and the other
    lines only when asked (``--verbose``); the same line twice (a hook that two targets share) once.
    """

    out: TextIO
    problems: list[str] = field(default_factory=list)
    lines: list[tuple[str, str, str]] = field(default_factory=list)  # (section, mark, text)
    section: str = ""

    def _add(self, mark: str, msg: str) -> None:
        line = (self.section, mark, msg)
        if line not in self.lines:
            self.lines.append(line)

    def ok(self, msg: str) -> None:
        self._add(OK, msg)

    def bad(self, msg: str) -> None:
        self.problems.append(msg)
        self._add(BAD, msg)

    def note(self, msg: str) -> None:
        self._add(NOTE, msg)

    def heading(self, text: str) -> None:
        """A line of its own in the section (printed with ``--verbose``)."""
        self._add("", text)

    def report(self, verbose: bool) -> None:
        """Problems first; then, with ``verbose``, every line by section; else how many were left out."""
        bad = [text for _, mark, text in self.lines if mark == BAD]
        if bad:
            print("problems:", file=self.out)
            for text in bad:
                print(f"  !!  {text}", file=self.out)
        if verbose:
            current = None
            for sec, mark, text in self.lines:
                if mark == BAD:
                    continue  # printed first
                if sec != current:
                    print(f"{sec}:", file=self.out)
                    current = sec
                print(f"  {mark}  {text}" if mark else text, file=self.out)
            return
        oks = sum(1 for _, mark, _ in self.lines if mark == OK)
        notes = sum(1 for _, mark, _ in self.lines if mark == NOTE)
        print(f"{oks} checks ok, {notes} notes (otel-verl doctor --verbose lists them)", file=self.out)


def _version(dist: str) -> str | None:
    return installed_version(dist)  # None when not installed


def check_verl(r: Checks) -> bool:
    from packaging.requirements import Requirement

    req = Requirement(_instruments[0])
    version = _version(req.name)
    if version is None:
        r.bad(f"verl is not installed (supported: {req.specifier})")
        return False
    if req.specifier.contains(version, prereleases=True):
        r.ok(f"verl {version} (supported: {req.specifier})")
    elif config.settings().untested_verl:
        r.note(
            f"verl {version} is outside the tested range {req.specifier}: otel-verl starts anyway, each hook "
            f"below where its target exists ({config.UNTESTED_VERL}=false: off)"
        )
    else:
        r.bad(
            f"verl {version} is outside the tested range {req.specifier} and {config.UNTESTED_VERL}=false: "
            "otel-verl is off"
        )
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


# extra -> (the setting that uses it, what is missing without it); the packages come from the metadata
EXTRAS = {
    "system": ("process_metrics", "no process.* CPU/memory metrics from the workers"),
    "gpu": ("gpu_metrics", "no hw.gpu.utilization (hw.gpu.memory.* still comes from torch)"),
}


def check_extras(r: Checks, s: config.Settings) -> None:
    from packaging.requirements import Requirement

    try:
        requires = importlib.metadata.requires("otel-verl") or []
    except importlib.metadata.PackageNotFoundError:
        return  # not installed: check_entry_points says so
    for extra, (field_name, without) in EXTRAS.items():
        reqs = [q for q in map(Requirement, requires) if q.marker and q.marker.evaluate({"extra": extra})]
        if not reqs or not getattr(s, field_name):
            continue
        missing = [q.name for q in reqs if _version(q.name) is None]
        if missing:
            r.note(
                f'otel-verl[{extra}] not installed ({", ".join(missing)}): {without}; pip install "otel-verl[{extra}]"'
            )
        else:
            r.ok(f"otel-verl[{extra}]: {', '.join(f'{q.name} {_version(q.name)}' for q in reqs)}")


def check_switches(r: Checks) -> None:
    # A note, not a problem: switching otel-verl off is a choice.
    reason = config.disabled_reason()
    if reason is None:
        return
    if reason.startswith(config.DISABLED_INSTRUMENTATIONS):
        r.note(f"{reason}: nothing will be instrumented")
    else:
        r.note(f"{reason}: no telemetry will be produced")


def check_settings(r: Checks) -> config.Settings:
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
    changed = [f"{v.name}={os.environ[v.name]}" for v in config.VARIABLES if getattr(s, v.field) != v.default]
    total = len(config.VARIABLES)
    if changed:
        r.ok(f"{len(changed)} of {total} OTEL_VERL_* settings differ from their defaults: {', '.join(changed)}")
    else:
        r.ok(f"all {total} OTEL_VERL_* settings at their defaults")
    known = [v.name for v in config.VARIABLES]
    commands = {t.name for t in config.TOOL_VARIABLES}  # read by otel-verl's commands, not by the hooks
    for name in sorted(n for n in os.environ if n.startswith("OTEL_VERL_") and n not in known and n not in commands):
        close = get_close_matches(name, known, n=1)
        r.note(f"{name} is not an otel-verl setting (ignored){f'; did you mean {close[0]}?' if close else ''}")
    return s


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
    probed: dict[str, tuple[bool, str]] = {}  # url -> (reachable, where): each URL is probed once
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
                _check_endpoint(r, signal, lookup, protocol, probed, asked=_otlp_asked(signal, raw))
                continue
            if name == "prometheus":
                _check_prometheus(r, signal)
                continue
            r.ok(f"{signal}: exporter {name}")


def _otlp_asked(signal: str, raw: str | None) -> bool:
    """Whether this environment asks for ``signal`` over OTLP: its exporter variable names an OTLP
    exporter, or an OTLP endpoint is set for it. Otherwise OTLP is only the distro's default, and
    an endpoint nobody configured is not judged (a run that writes files needs no Collector)."""
    if raw is not None:
        return True
    return any(
        (os.environ.get(v) or "").strip()
        for v in ("OTEL_EXPORTER_OTLP_ENDPOINT", f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    )


def _check_endpoint(
    r: Checks, signal: str, exporter: str, protocol: str, probed: dict[str, tuple[bool, str]], asked: bool = True
) -> None:
    """Judge ``signal``'s own endpoint: protocol and URL well-formed, and the URL reachable; when
    OTLP is not ``asked`` for, an endpoint that does not answer is a note, not a problem."""
    wrong = endpoints.protocol_problem(signal)
    endpoint = endpoints.resolve(signal, protocol=protocol)
    wrong = wrong or endpoint.problem(protocol)
    if wrong:
        r.bad(f"{signal}: {wrong}")
        return
    url = endpoint.url
    again = url in probed
    if not again:
        probed[url] = _reachable(url)
    reachable, where = probed[url]
    how = " (probed above)" if again else ""
    if reachable:
        r.ok(f"{signal}: {exporter} -> {endpoints.shown(url)} (reachable: TCP connect to {where}){how}")
    elif not asked:
        r.note(
            f"{signal}: {exporter} (the default: {_SIGNALS[signal]} and the OTLP endpoint are unset) -> "
            f"{endpoints.shown(url)} not reachable: {where}{how}; not judged: set the endpoint to export there, "
            f"or {_SIGNALS[signal]}=otlp_json_file to write files"
        )
    else:
        r.bad(f"{signal}: {exporter} -> {endpoints.shown(url)} NOT reachable: {where}{how}")


def _check_prometheus(r: Checks, signal: str) -> None:
    """The pull endpoint's ports, by the rule the exporter applies (``exporters.prometheus_port``)."""
    from otel_verl.process import exporters

    first, problem = exporters.prometheus_port()
    if problem:
        r.bad(f"{signal}: prometheus: {problem}")
    ports = exporters.prometheus_ports(first)
    host = os.environ.get("OTEL_EXPORTER_PROMETHEUS_HOST", "").strip() or exporters.PROMETHEUS_DEFAULT_HOST
    where = f"{host}:{ports[0]}-{ports[-1]}" if len(ports) > 1 else f"{host}:{ports[0]}"
    r.ok(f"{signal}: prometheus pull endpoint on {where} (the first free port of each process)")


def check_guard_rules(r: Checks, s: config.Settings) -> None:
    """The user's rules file (``OTEL_VERL_GUARD_RULES``), read by the rule the guard applies, and
    the per-rule actions (``OTEL_VERL_GUARD_ACTIONS``) against the rules the guard would use."""
    from otel_verl.hooks.guard.rules import RuleError, load_rules, resolve_actions

    if s.guard_action == "off":
        return
    rules = None
    if s.guard_rules:
        try:
            rules = load_rules(s.guard_rules)
        except RuleError as exc:
            r.bad(f"{config.GUARD_RULES}: {exc}; the guard would use its built-in rules")
        else:
            r.ok(f"guard rules: {len(rules)} from {s.guard_rules}")
    if s.guard_actions:
        rules = rules if rules is not None else load_rules(None)
        actions, unmatched = resolve_actions(rules, s.guard_actions, s.guard_action)
        if unmatched:
            r.bad(f"{config.GUARD_ACTIONS_BY_RULE}: {', '.join(unmatched)} name(s) no rule of the guard's")
        by_action: dict[str, list[str]] = {}
        for name, action in actions.items():
            by_action.setdefault(action, []).append(name)
        r.ok("guard actions: " + "; ".join(f"{a}: {', '.join(names)}" for a, names in by_action.items()))


def check_headers(r: Checks, s: config.Settings) -> None:
    """The OTLP headers of ``OTEL_VERL_OTLP_HEADERS_FILE`` and ``OTEL_EXPORTER_OTLP_*HEADERS``, read
    as the exporters read them: their names only, never a value."""
    from otel_verl.process import otlp_headers

    for var in sorted(v for v in os.environ if v.startswith("OTEL_EXPORTER_OTLP_") and v.endswith("_HEADERS")):
        found, bad = otlp_headers.env_entries(os.environ[var])
        if bad:
            r.bad(f"{var} has {bad} entries that are not `name=value` (not shown): they are not sent")
        else:
            r.ok(f"{var}: {', '.join(sorted(found)) or 'no headers'} (values not shown)")
    path = s.otlp_headers_file
    if not path:
        return
    loaded = otlp_headers.load(path)
    if loaded.problem is not None:
        r.bad(f"{config.OTLP_HEADERS_FILE}={path} {loaded.problem}; the OTLP exporters would send no headers from it")
        return
    if loaded.readable_by_all:
        r.bad(f"{config.OTLP_HEADERS_FILE}={path} can be read by every user of this node (chmod 600 it)")
    r.ok(f"OTLP headers from {path}: {', '.join(sorted(loaded.headers))} (values not shown)")


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


def _resolve(hook: Hook) -> str | None:
    """None when ``hook`` would apply (``hooks.compat.check``: its target exists with the shape its
    wrapper expects), else why not."""
    from otel_verl.hooks import compat

    try:
        module = importlib.import_module(hook.module)
    except Exception as exc:  # noqa: BLE001
        return f"module {hook.module} not importable ({exc.__class__.__name__}: {exc})"
    try:
        compat.check(hook, module)
    except (AttributeError, compat.ShapeError) as exc:
        return str(exc)
    return None


def check_opentelemetry_setup(r: Checks, s: config.Settings) -> None:
    """What ``opentelemetry-instrument`` sets up in each kind of process (``process.worker_bootstrap``)."""
    from otel_verl.hooks.ray_launch import SYSTEM_METRICS
    from otel_verl.process import worker_bootstrap as wb

    distro = wb.selected("opentelemetry_distro", "OTEL_PYTHON_DISTRO")
    configurator = wb.selected("opentelemetry_configurator", wb.CONFIGURATOR_VAR)
    r.note(f"distro: {distro or 'none'}")
    if configurator is None:
        r.note("configurator: none; every verl process builds otel-verl's pipeline, the global one for user code")
    else:
        r.note(f"launcher: the configurator {configurator} builds the SDK providers at start-up")
        if os.environ.get(wb.CONFIGURATOR_VAR):
            r.note(
                f"Ray workers: {configurator}, named by {wb.CONFIGURATOR_VAR}, runs there too: otel-verl leaves "
                "its providers, so user code's telemetry lacks the run id, role and rank (unset it: one pipeline)"
            )
        else:
            r.note(f"Ray workers: no distro or configurator ({configurator} is left out): otel-verl's pipeline")
    r.note("Ray's own daemons (GCS, raylet, dashboard) run no bootstrap on a cluster ray.init starts")
    found = wb.loaded_instrumentations()
    loads = sorted(name for name, why in found.items() if why is None)
    ray_off = [] if s.ray_system_metrics or SYSTEM_METRICS not in loads else [SYSTEM_METRICS]
    r.note(f"instrumentations loaded in every process ({len(loads)}): {', '.join(loads) or 'none'}")
    if ray_off:
        r.note(f"  but not in Ray's processes: {', '.join(ray_off)} (OTEL_VERL_RAY_SYSTEM_METRICS=true keeps it)")
    skipped = sorted(f"{name} ({why})" for name, why in found.items() if why is not None)
    if skipped:
        r.note(f"instrumentations installed but not loaded: {', '.join(skipped)}")


def check_hooks(r: Checks, hooks: Sequence[Hook] | None = None) -> None:
    # Imported here: the hooks import wrapt and the instrumentation package, which the other
    # checks (and the other otel-verl commands) do not need.
    from otel_verl.hooks import all_hooks, compat

    version = package_version("verl")
    caught: list[warnings.WarningMessage] = []
    rows: dict[str, compat.Row] = {}
    for hook in all_hooks() if hooks is None else hooks:
        where = f"{hook.module}.{hook.target}"
        # verl warns while importing (optional engines missing): listed after the hooks, not amid them
        with warnings.catch_warnings(record=True) as got:  # keeps the filters: what Python would print
            why = _resolve(hook)
        caught += got
        status = compat.APPLIED if why is None else compat.ABSENT if hook.optional else compat.SKIPPED
        row = rows.setdefault(where, compat.Row(where, status, why or "", hook.package))
        how = f"  [{row.mechanism}, since {row.since}]"  # the columns of the processes' own table
        cond = " (only in Ray worker actors)" if hook.only_if is not None else ""
        if why is None:
            r.ok(f"hook {where}{cond}{how}")
        elif hook.optional:
            r.note(f"hook {where}: {why} in verl {version} (optional: skipped){how}")
        else:
            r.bad(f"hook {where}: {why} in verl {version}; that telemetry would be disabled{how}")
    # the header each verl process logs with its table (``hooks.compat.REPORT``), here for all hooks
    r.note(compat.header(list(rows.values())).replace(": hooks ", ": hooks that would be ", 1))
    messages = list(dict.fromkeys(f"{w.category.__name__}: {str(w.message).strip()}" for w in caught))
    if messages:
        r.heading(f"warnings while importing verl's modules ({len(messages)}; not otel-verl problems):")
    for message in messages:
        r.note(message)


def doctor(out: TextIO | None = None, hooks: Sequence[Hook] | None = None, verbose: bool = False) -> int:
    """Run every check; print the problems first and, with ``verbose``, every check's line; 0 when
    no problem was found, else a ``CommandError``."""
    from otel_verl.version import __version__

    out = sys.stdout if out is None else out
    r = Checks(out)
    print(f"otel-verl {__version__} doctor (python {sys.version.split()[0]}, {sys.executable})", file=out)
    r.section = "package"
    verl_ok = check_verl(r)
    check_entry_points(r)
    check_switches(r)
    r.section = "settings"
    s = check_settings(r)
    check_extras(r, s)
    check_guard_rules(r, s)
    r.section = "exporters"
    check_headers(r, s)
    check_exporters(r)
    r.section = "opentelemetry-instrument"
    check_opentelemetry_setup(r, s)
    r.section = "hooks"
    if verl_ok:
        check_hooks(r, hooks)
    else:
        r.note("skipped: verl is not installed")
    r.report(verbose)
    if r.problems:
        more = f" (and {len(r.problems) - 1} more: the problems above)" if len(r.problems) > 1 else ""
        raise CommandError(f"{len(r.problems)} problem(s) found: {r.problems[0]}{more}")
    print("no problems found.", file=out)
    return 0
