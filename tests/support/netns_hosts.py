"""Hosts for a multi-node test on one machine: a network namespace and a host name each.

``Network`` makes a bridge in this (the root) namespace with addresses of its own (the machine
the test itself, the backends and the gateways run on), and one namespace per host, joined to the
bridge by a veth pair, with an address in a private /24 that exists only inside this machine
(10.247.X.0/24, X not in use here) and no route out of it: traffic of a host reaches the other
hosts and the bridge's addresses, nothing else. ``/etc/netns/<namespace>/hosts`` (which ``ip netns
exec`` mounts over ``/etc/hosts``) names the hosts, so that each host's name resolves to its
address (gloo, like NCCL, looks its own host name up) and a name can list several addresses (the
agents' DNS resolver for the gateways reads it; ``set_name`` rewrites it in place while a test
runs). The namespaces share this machine's clock, file system and process table.

A command runs on a host through ``on``: ``ip netns exec`` plus ``unshare --uts`` with the
host's name set. Everything is named after ``tag`` (the test's pid), so that tests of several
sessions on one machine never meet; ``down`` ends every process still inside the namespaces (all
started by the test: nothing else enters them), then removes the namespaces, links and files. A
``Network`` left behind by a killed test (its pid gone) is removed by the next one (``reap_stale``).

What the hosts' processes share: ``tls_files`` (a CA, a server certificate for localhost and the
bridge's addresses, a bearer token) and ``clean_node_env`` (a node's environment as its own ``ray
start`` has it).

Needs root (``CAP_NET_ADMIN``, ``CAP_SYS_ADMIN``), ``ip`` (iproute2) and ``unshare`` (util-linux).
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.tls import ca_and_server

PREFIX = "otv"  # otv<pid>...: every name a Network makes
NETNS_ETC = Path("/etc/netns")
LOCK = Path("/tmp/otel-verl-netns.lock")  # picking a free /24 and making it, one test at a time
FIRST_SUBNET = "10.247.{}.0/24"
STOP_GRACE_S = 10.0


def missing_tools() -> str | None:
    """Why this machine cannot make a Network, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare", "sh"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


@dataclass
class Host:
    name: str  # its host name (and the name in every host's /etc/hosts)
    netns: str
    address: str
    veth: str  # the root namespace's end of its link


@dataclass
class Network:
    tag: str
    host_names: tuple[str, ...]
    root_addresses: int = 1  # addresses of the bridge itself: .1, then .4 on (.2/.3... are the hosts)
    subnet: ipaddress.IPv4Network | None = None
    hosts: list[Host] = field(default_factory=list)
    root: list[str] = field(default_factory=list)
    names: dict[str, list[str]] = field(default_factory=dict)  # the extra names of every hosts file

    @property
    def bridge(self) -> str:
        return f"{PREFIX}{self.tag}br"

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    # -- making and removing
    def up(self) -> Network:
        reap_stale()
        with open(LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.subnet = _free_subnet(int(self.tag))
            net = list(self.subnet.hosts())
            host_ips = [str(net[1 + i]) for i in range(len(self.host_names))]  # .2, .3, ...
            self.root = [str(net[0])] + [str(net[2 + len(self.host_names) + i]) for i in range(self.root_addresses - 1)]
            _ip("link", "add", self.bridge, "type", "bridge")
            for address in self.root:
                _ip("addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        for i, (name, address) in enumerate(zip(self.host_names, host_ips, strict=True)):
            host = Host(name, f"{PREFIX}{self.tag}{chr(ord('a') + i)}", address, f"{PREFIX}{self.tag}v{i}")
            self.hosts.append(host)
            _ip("netns", "add", host.netns)
            _ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
            _ip("link", "set", host.veth, "master", self.bridge, "up")
            _ip("-n", host.netns, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
            _ip("-n", host.netns, "link", "set", "eth0", "up")
            _ip("-n", host.netns, "link", "set", "lo", "up")
            (NETNS_ETC / host.netns).mkdir(parents=True, exist_ok=True)
        self._write_hosts_files()
        return self

    def down(self) -> None:
        """End every process in the namespaces, then remove them, the bridge and the files."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = [pid for host in self.hosts for pid in netns_pids(host.netns)]
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + (STOP_GRACE_S if sig == signal.SIGTERM else 5.0)
            while pids and time.monotonic() < deadline:
                pids = [pid for pid in pids if _alive(pid)]
                time.sleep(0.2)  # polling: a process of another parent cannot be waited for
            if not pids:
                break
        for host in self.hosts:
            _ip("netns", "del", host.netns, check=False)  # its veth end goes with it, and so the pair
            _ip("link", "del", host.veth, check=False)
            shutil.rmtree(NETNS_ETC / host.netns, ignore_errors=True)
        _ip("link", "del", self.bridge, check=False)

    # -- using
    def on(self, host: str, argv: list[str]) -> list[str]:
        """The command line of ``argv`` on ``host``: in its network namespace, under its host name."""
        h = self.host(host)
        wrap = ["ip", "netns", "exec", h.netns, "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"']
        return [*wrap, h.name, *argv]

    def set_name(self, name: str, addresses: list[str]) -> None:
        """Make ``name`` resolve to ``addresses`` on every host (rewritten in place: ``ip netns exec``
        mounted the file itself, a new file would not be seen)."""
        self.names[name] = list(addresses)
        self._write_hosts_files()

    def _write_hosts_files(self) -> None:
        lines = ["127.0.0.1 localhost"] + [f"{h.address} {h.name}" for h in self.hosts]
        lines += [f"{address} {name}" for name, addresses in self.names.items() for address in addresses]
        text = "\n".join(lines) + "\n"
        for host in self.hosts:
            path = NETNS_ETC / host.netns / "hosts"
            with open(path, "r+" if path.exists() else "w") as f:
                f.seek(0)
                f.write(text)
                f.truncate()


def netns_pids(netns: str) -> list[int]:
    out = _ip("netns", "pids", netns, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _free_subnet(seed: int) -> ipaddress.IPv4Network:
    """A 10.247.X.0/24 that no address or route of this machine's root namespace touches."""
    used = _ip("-4", "-o", "addr").stdout + _ip("-4", "route").stdout
    for i in range(234):
        subnet = ipaddress.ip_network(FIRST_SUBNET.format(16 + (seed + i) % 234))
        prefix = str(subnet.network_address).rsplit(".", 1)[0] + "."
        if prefix not in used:
            return subnet
    raise RuntimeError("no free 10.247.X.0/24 on this machine")


def reap_stale() -> None:
    """Remove the Networks of tests whose process is gone (a killed test session)."""
    out = _ip("netns", "list", check=False).stdout
    tags = {m.group(1) for m in re.finditer(rf"^{PREFIX}(\d+)[a-z]\b", out, re.M)}
    for tag in tags:
        if Path(f"/proc/{tag}").exists():
            continue  # that test still runs (or its pid was reused: then leave it, to be safe)
        names = [line.split()[0] for line in out.splitlines() if line.startswith(f"{PREFIX}{tag}")]
        stale = Network(tag, ())
        stale.hosts = [Host(n, n, "", f"{PREFIX}{tag}v{ord(n[-1]) - ord('a')}") for n in names]
        stale.down()


def tls_files(folder: Path, addresses: list[str], token: str) -> dict[str, Path]:
    """A CA, and one server certificate (signed by it) for localhost and every address/name the
    agents and gateways are reached at."""
    paths = ca_and_server(folder, ["localhost", "gateways"], ["127.0.0.1", *addresses])
    paths["token"] = folder / "token"  # the Collectors' bearertokenauth file: the token alone
    paths["token"].write_text(token + "\n")
    paths["headers"] = folder / "otlp-headers"  # OTEL_VERL_OTLP_HEADERS_FILE: what OTEL_EXPORTER_OTLP_HEADERS would say
    paths["headers"].write_text(f"authorization=Bearer%20{token}\n")
    for path in paths.values():
        path.chmod(0o600)
    return paths


def clean_node_env() -> dict[str, str]:
    """A node's environment as a cluster's own ``ray start`` has it: no OTEL_*, no sitecustomize.

    The code under test must be what the node imports: where this session imports otel_verl or the
    harness from a checkout other than the venv's install (a developer's worktree), its folder is
    on the node's PYTHONPATH, as an install on the node would be."""
    venv_bin = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "RAY_AUTH_MODE": "disabled",  # `ray start` turns token auth on; the job client would need it
    }
    probe = "import otel_verl, verl_cpu_harness; print(otel_verl.__file__); print(verl_cpu_harness.__file__)"
    seen = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    import verl_cpu_harness

    import otel_verl

    ours = [str(Path(m.__file__).resolve().parents[1]) for m in (otel_verl, verl_cpu_harness)]
    theirs = [str(Path(line).resolve().parents[1]) for line in seen.stdout.split()]
    if theirs != ours:
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(ours))
    return env
