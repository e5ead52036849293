"""``up``, ``down`` and ``status``: the components started as processes of their own session,
waited for until each answers its readiness URL (asked directly, never through a proxy of
``$http_proxy``: ``_answers``), stopped by the pids ``up`` recorded (checked against their command
line: ``_ours``). State lives in ``DATA_DIR/stack.json``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from otel_verl.exits import OK, PROBLEM, USAGE, CommandError
from otel_verl.stack.binaries import find_binaries
from otel_verl.stack.kit import default_config_dir
from otel_verl.stack.ports import COLLECTOR_PORTS, HOST
from otel_verl.stack.render import plan
from otel_verl.stack.roles import START_ORDER, CollectorSetup, check_setup, role_components, url_host

STATE_FILE = "stack.json"


STOP_GRACE_S = 15.0


def default_data_dir() -> Path:
    return Path(os.environ.get("OTEL_VERL_STACK_DIR") or Path.home() / ".local" / "share" / "otel-verl" / "stack")


# The stack's own readiness URLs are on this host: asked directly, never through $http_proxy.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _answers(url: str, timeout: float = 2.0) -> bool:
    try:
        with _DIRECT.open(url, timeout=timeout) as resp:  # our own 127.0.0.1 URLs
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _port_free(port: int, host: str = HOST) -> bool:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return False
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError:
            return False
    return True


def _ours(pid: int, binary: str) -> bool:
    """pid is alive and still runs ``binary`` (not a reused pid of something else)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        try:
            os.kill(pid, 0)  # no /proc (macOS): trust the pid
        except OSError:
            return False
        return True
    return bool(cmdline) and cmdline[0].decode(errors="replace") == binary


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])


def _load_state(data_dir: Path) -> dict:
    try:
        return json.loads((data_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _save_state(data_dir: Path, state: dict) -> None:
    tmp = data_dir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2), encoding="utf-8")
    tmp.replace(data_dir / STATE_FILE)


def _running(state: dict) -> dict[str, dict]:
    return {n: c for n, c in (state.get("components") or {}).items() if _ours(c["pid"], c["argv"][0])}


def _stop(pid: int, binary: str, grace_s: float = STOP_GRACE_S) -> None:
    if not _ours(pid, binary):
        return
    try:
        os.killpg(pid, signal.SIGTERM)  # each component leads its own process group
    except OSError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)  # our child when up and down run in one process
            if done:
                return
        except ChildProcessError:
            if not _ours(pid, binary):
                return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _busy_ports(ports: dict[str, int], setup: CollectorSetup) -> list[str]:
    """``name port`` of every port of the role's components that is taken where it would listen."""
    names = [name for name in ports if setup.role == "all-in-one" or name in COLLECTOR_PORTS]
    busy = []
    for name in names:
        if name in ("otlp-grpc", "otlp-http"):
            host = setup.bind
        elif name in COLLECTOR_PORTS:  # health check and self-metrics: loopback, --bind's without TLS
            host = HOST if setup.tls else setup.bind
        else:
            host = HOST
        if not _port_free(ports[name], host):
            busy.append(f"{name} {ports[name]} on {host}")
    return busy


def _next_steps(setup: CollectorSetup, ports: dict[str, int]) -> list[str]:
    """What ``up`` says to do next, for the training job or the agents."""
    grpc = ports["otlp-grpc"]
    if setup.role == "gateway":
        return [f"agents: otel-verl stack up --role agent --gateway {url_host(setup.bind)}:{grpc} --token-file ..."]
    if setup.tls:
        return [
            "for the training job (on every node that reaches it):",
            f"  export OTEL_EXPORTER_OTLP_ENDPOINT=https://{url_host(setup.bind)}:{grpc}",
            "  export OTEL_EXPORTER_OTLP_CERTIFICATE=<the CA of its certificate>",
            "  export OTEL_VERL_OTLP_HEADERS_FILE=<the --token-file: the token alone is sent as Bearer>",
        ]
    host = "localhost" if setup.role == "agent" else url_host(setup.bind)
    steps = ["for the training job:", f"  export OTEL_EXPORTER_OTLP_ENDPOINT=http://{host}:{grpc}"]
    if setup.role == "all-in-one":  # docs/stack.md, "Where to look"
        steps += [
            "to look at a run (docs/stack.md, 'Where to look'):",
            f"  otel-verl report --jaeger http://{HOST}:{ports['jaeger']} --run RUN_ID   (its steps, as one HTML page)",
            f"  http://{HOST}:{ports['prometheus']}/query   (Prometheus's UI, if built with it)",
            f"  http://{HOST}:{ports['victorialogs']}/select/vmui/   (logs)",
        ]
    return steps


def up(
    bin_dir: Path | None,
    data_dir: Path,
    ports: dict[str, int],
    timeout_s: float = 90.0,
    config_dir: Path | None = None,
    out: Callable[[str], None] = print,
    setup: CollectorSetup | None = None,
) -> int:
    setup = setup or CollectorSetup()
    check_setup(setup)
    config_dir = config_dir or default_config_dir()
    if config_dir is None or not (config_dir / "otelcol-config.yaml").is_file():
        raise CommandError(
            f"no ops-kit configs in {config_dir}: pass --config-dir (a folder `otel-verl stack configs` "
            "wrote, or collector/ of an otel-verl clone) or set OTEL_VERL_COLLECTOR_DIR"
            if config_dir is not None
            else "no ops-kit configs installed with otel-verl: pass --config-dir or set OTEL_VERL_COLLECTOR_DIR",
            USAGE,
        )
    order = role_components(setup.role)
    data_dir.mkdir(parents=True, exist_ok=True)
    state = _load_state(data_dir)
    running = _running(state)
    if (
        state.get("role", "all-in-one") == setup.role
        and set(running) == set(order)
        and all(_answers(c["ready_url"]) for c in running.values())
    ):
        # Idempotent, like scripts/backends.sh: a second `up` finds the stack it wants.
        out(f"already running from {data_dir}:")
        return status(data_dir, out)
    if running:
        raise CommandError(
            f"a stack from {data_dir} is already running ({', '.join(running)}): "
            "`otel-verl stack status` shows it, `otel-verl stack down` stops it"
        )
    binaries = find_binaries(bin_dir, order)
    busy = _busy_ports(ports, setup)
    if busy:
        raise CommandError(f"ports in use: {', '.join(busy)}; choose others with --port NAME=PORT")
    components = {c.name: c for c in plan(binaries, config_dir.resolve(), data_dir.resolve(), ports, setup)}
    (data_dir / "logs").mkdir(exist_ok=True)
    state = {
        "data_dir": str(data_dir.resolve()),
        "role": setup.role,
        "order": list(order),
        "ports": ports,
        "components": {},
    }
    started = time.monotonic()
    procs: dict[str, subprocess.Popen] = {}
    for name in order:
        comp = components[name]
        log_path = data_dir / "logs" / f"{name}.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(  # noqa: S603 - binaries the user chose, fixed arguments
                comp.argv,
                env={**os.environ, **comp.env},
                cwd=data_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # outlives this command; down stops its whole group
            )
        procs[name] = proc
        state["components"][name] = {
            "pid": proc.pid,
            "argv": comp.argv,
            "ready_url": comp.ready_url,
            "url": comp.url,
            "log": str(log_path),
        }
        _save_state(data_dir, state)
    pending = list(order)
    deadline = started + timeout_s
    while pending:
        for name in list(pending):
            info = state["components"][name]
            if (rc := procs[name].poll()) is not None:
                _stop_all(state)
                raise CommandError(
                    f"{name} exited with code {rc} during start-up (log {info['log']}): {_tail(Path(info['log']))}"
                )
            if _answers(info["ready_url"]):
                pending.remove(name)
                out(f"{name:<14} ready after {time.monotonic() - started:4.1f} s  {info['url']}  (pid {info['pid']})")
        if pending and time.monotonic() > deadline:
            _stop_all(state)
            raise CommandError(
                f"not ready after {timeout_s:g} s: {', '.join(pending)} "
                f"(logs in {data_dir / 'logs'}); stopped the stack"
            )
        if pending:
            time.sleep(0.25)
    out(f"{setup.role} stack up in {time.monotonic() - started:.1f} s, data in {data_dir}")
    for line in _next_steps(setup, ports):
        out(line)
    return OK


def _order(state: dict) -> tuple[str, ...]:
    """The components of the stack ``state`` records, in start order."""
    order = state.get("order")
    return tuple(order) if isinstance(order, list) else START_ORDER


def _stop_all(state: dict) -> list[str]:
    stopped = []
    # Collector first: whatever it still holds goes to its on-disk queue or to the backends.
    for name in reversed(_order(state)):
        info = (state.get("components") or {}).get(name)
        if info and _ours(info["pid"], info["argv"][0]):
            _stop(info["pid"], info["argv"][0])
            stopped.append(name)
    return stopped


def down(data_dir: Path, out: Callable[[str], None] = print) -> int:
    state = _load_state(data_dir)
    stopped = _stop_all(state)
    (data_dir / STATE_FILE).unlink(missing_ok=True)
    out(f"stopped {', '.join(stopped)}" if stopped else f"no stack running from {data_dir}")
    return OK


def status(data_dir: Path, out: Callable[[str], None] = print) -> int:
    state = _load_state(data_dir)
    comps = state.get("components") or {}
    if not comps:
        out(f"no stack started from {data_dir}")
        return PROBLEM
    healthy = True
    for name in _order(state):
        info = comps.get(name)
        if info is None:
            healthy = False
            out(f"{name:<14} not started")
            continue
        alive = _ours(info["pid"], info["argv"][0])
        ready = alive and _answers(info["ready_url"])
        healthy &= ready
        word = "ready" if ready else ("running, not ready" if alive else "not running")
        out(f"{name:<14} {word:<18} {info['url']}  (pid {info['pid']}, log {info['log']})")
    return OK if healthy else PROBLEM
