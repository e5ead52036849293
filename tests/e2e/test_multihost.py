"""A real verl job on two hosts: a Collector agent per node, two gateways, faults in the gateway tier.

One run, shared by every test of this module (the module fixture ``run``):

* **Hosts.** Two network namespaces with host names ``hosta`` and ``hostb`` (``netns_hosts``), on a
  private /24 of this machine with no route out; the root namespace is the observability host.
* **Backends and gateways** (root namespace): an all-in-one ``otel-verl stack`` for Prometheus,
  Jaeger and VictoriaLogs on 127.0.0.1, and two ``otel-verl stack up --role gateway`` Collectors
  (the all-in-one routing, TLS and a bearer token, ``collector/otelcol-debug.yaml``: a line per
  span) on two addresses of the bridge. The name ``gateways`` lists both on every host.
* **Agents**: ``otel-verl stack up --role agent --gateway dns:gateways:PORT`` on each host (the
  load_balancing exporter, by trace id, persistent queue), its own receivers on localhost with
  TLS and the same token (a shared node: every local user reaches localhost:4317).
* **Ray**: ``ray start --head`` on hosta, ``ray start --address`` on hostb, each with a clean
  environment (no ``OTEL_*``, no auto-instrumentation ``sitecustomize``), one fake GPU each (the
  CPU harness's device), and the job submitted as users submit to a running cluster:
  ``ray job submit --runtime-env-json '{"env_vars": {OTEL_*...}}' -- opentelemetry-instrument
  python -m verl.trainer.main_ppo ... trainer.nnodes=2`` (v0 GRPO, one rank per host). Every
  process exports to its own node's agent (``https://localhost:4317``); the token reaches the
  processes on hostb through ``OTEL_VERL_OTLP_HEADERS_FILE`` (a path in the runtime_env; the
  launcher reads the same file into its own ``OTEL_EXPORTER_OTLP_HEADERS`` in the entrypoint).
  Every signal also goes to OTLP JSON files: the ground truth of what the processes sent.
* **Faults** at known points of the run: the CPU harness holds the driver after it logged a step
  while a file of the test exists (``VERL_CPU_HARNESS_HOLD_DIR``), so the faults never race Ray's
  console. Held after step ``STOP_AFTER``, the first gateway is stopped and leaves the name
  ``gateways`` (what a Kubernetes headless Service does with a pod that stops), and the run goes
  on once both agents resolve the other only. Held after step ``KILL_AFTER``, the other, then the
  only one, is SIGKILLed; the run goes on to step ``KILL_AFTER + 1`` with no gateway, and is held
  again until the agents' queues hold its data; then the gateway is started again on the same
  data and the run finishes.

The tests then compare what the processes sent with what Jaeger, Prometheus and VictoriaLogs hold
(span ids, each process's metric collections, log records), read the gateways' own output for
where each trace went, and check the hosts, ranks and the run id of every step's trace.

Needs root (network namespaces), the binaries of ``bash scripts/backends.sh`` with the agent's
components, and the CPU harness; ``require`` says which is missing.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.components import require, require_harness
from support.netns_hosts import Network, clean_node_env, missing_tools, tls_files
from support.opskit import (
    COLLECTOR,
    StackAPI,
    file_log_records,
    get_json,
    poll_until,
    run_tool,
    running_stack,
)
from verl_cpu_harness.ports import free_ports

from otel_verl import semconv, stack
from otel_verl.offline.otlp_files import MetricPoint, SpanRecord, read_metric_points, read_spans

pytestmark = [pytest.mark.e2e, pytest.mark.live_stack]

STEPS = 6
STOP_AFTER = 2  # the first gateway stops while the driver is held after this step
KILL_AFTER = 4  # the second gateway is SIGKILLed while it is held after this step
RESTART_AFTER = KILL_AFTER + 1  # ... and started again while it is held after this one (a step without gateway)
POLL_S = 240.0  # bounded waits for the backends (the agents' retries back off up to 10 s)
RAY_UP_S = 180.0
JOB_TIMEOUT_S = 900
SERVICE = "verl-multihost"
HOSTS = ("hosta", "hostb")
TOKEN = "multihost-" + uuid.uuid4().hex  # one token: the agents' receivers and the gateways take it
AGENT_COMPONENTS = ("load_balancing", "resource_detection", "debug", "bearertokenauth", "file_storage")
# "<span name> <trace id> <span id> [attributes]": otelcol-debug.yaml's line per span
DEBUG_SPAN_LINE = re.compile(r"(?:^|\s)([0-9a-f]{32}) ([0-9a-f]{16})(?:\s|$)")


# ---------------------------------------------------------------------------------------------
# What the machine must have


def _require_everything() -> Path | None:
    """The backends' folder; stops the module (``require``) on what is missing."""
    require_harness()
    why = missing_tools()
    if why:
        require("network namespaces", f"{why} (the multi-host test makes two hosts with ip netns and unshare)")
    from support.opskit import stack_bin_dir

    bin_dir = stack_bin_dir()  # waits for a background build; require()s the binaries
    otelcol = stack.binaries.find_binaries(bin_dir, ("otelcol",))["otelcol"]
    listed = run_tool([otelcol, "components"]).stdout
    lacking = [c for c in AGENT_COMPONENTS if f"name: {c}\n" not in listed]
    if lacking:
        require(
            "the agent's Collector components",
            f"{otelcol} lacks {', '.join(lacking)}: `bash scripts/backends.sh otelcol-verl` builds builder-config.yaml",
        )
    return bin_dir


# ---------------------------------------------------------------------------------------------
# The run's data


@dataclass
class Gateway:
    name: str
    address: str
    data_dir: Path
    ports: dict[str, int]

    def log(self) -> Path:
        return self.data_dir / "logs" / "otelcol.log"

    def pid(self) -> int:
        return int(stack.supervisor._load_state(self.data_dir)["components"]["otelcol"]["pid"])


@dataclass
class MultiHostRun:
    run_id: str
    returncode: int
    output: str
    job_status: str
    job_info: dict
    steps: dict[int, float]  # step -> unix time its console line was printed
    t_stop: float
    t_moved: float  # when both agents' resolvers listed the remaining gateway only
    t_kill: float
    t_up: float
    spans: dict[str, SpanRecord]  # what the processes sent (OTLP JSON files), by span id
    points: list[MetricPoint]
    file_logs: list[int]  # the time of every log record the processes sent
    jaeger: dict[str, dict]  # span id -> Jaeger span (tags, process tags as "process")
    jaeger_entries: int  # spans in Jaeger's answers, a span stored twice counted twice
    prom_collections: dict[str, list[tuple[int, int]]]  # instance -> [(timestamp ms, series with a sample)]
    vl_logs: list[dict]
    debug: dict[str, list[tuple[int, str, str]]]  # gateway -> [(line offset, trace id, span id)]
    stop_offsets: dict[str, int]  # gateway -> its output's length (lines) when the first one stopped
    accepted_before_stop: dict[str, float]  # gateway -> spans, points and log records it had taken then
    agent_queue_max: float  # the agents' largest persistent-queue size seen during the outage
    raylet_env: dict[str, dict[str, str]]  # host -> the environment its raylet runs with
    token_in_ray_files: list[str]
    backends: StackAPI  # Prometheus, Jaeger, VictoriaLogs (up while the module's tests run)
    wall: dict[str, float] = field(default_factory=dict)

    def trace_spans(self) -> dict[str, list[SpanRecord]]:
        out: dict[str, list[SpanRecord]] = defaultdict(list)
        for s in self.spans.values():
            out[s.trace_id].append(s)
        return out

    def step_traces(self) -> dict[int, str]:
        return {
            int(s.attributes[semconv.ATTR_STEP]): s.trace_id for s in self.spans.values() if s.name == semconv.SPAN_STEP
        }


class _Pump:
    """The ``ray job submit`` client's output, kept and fed to a StepWatcher."""

    def __init__(self, proc: subprocess.Popen, watcher: Any, log: Path) -> None:
        self.lines: list[str] = []
        self.done = threading.Event()

        def pump() -> None:
            assert proc.stdout is not None
            with open(log, "w") as f:
                for line in proc.stdout:
                    self.lines.append(line)
                    f.write(line)
                    watcher.write(line)
            proc.wait()
            self.done.set()
            with watcher.changed:
                watcher.changed.notify_all()

        self.thread = threading.Thread(target=pump, daemon=True)
        self.thread.start()


def _until(what: str, probe: Callable[[], Any], timeout_s: float = POLL_S, every_s: float = 1.0) -> Any:
    return poll_until(what, probe, timeout_s, every_s, retry_on=(OSError, ValueError, KeyError, AssertionError))


def _agent_metrics(net: Network, host: str, port: int) -> dict[str, list[float]]:
    """An agent's own metrics (name -> the values of its samples), read from inside its host."""
    url = f"http://127.0.0.1:{port}/metrics"
    res = subprocess.run(net.on(host, ["curl", "-sf", "--max-time", "5", url]), capture_output=True, text=True)
    out: dict[str, list[float]] = defaultdict(list)
    if res.returncode == 0:
        for family in text_string_to_metric_families(res.stdout):
            for sample in family.samples:
                out[sample.name].append(sample.value)
    return out


def _accepted(port: int) -> float:
    """Spans, metric points and log records a gateway's receivers took (its own metrics, this host)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as res:
        text = res.read().decode()
    names = ("otelcol_receiver_accepted_spans", "otelcol_receiver_accepted_metric_points")
    names += ("otelcol_receiver_accepted_log_records",)
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.removesuffix("_total") in names
    )


def _jaeger_spans(api: StackAPI) -> tuple[dict[str, dict], int]:
    params = urllib.parse.urlencode({"service": SERVICE, "lookback": "2h", "limit": 100000})
    out: dict[str, dict] = {}
    entries = 0
    for trace in get_json(f"{api.url('jaeger')}/api/traces?{params}", timeout=60)["data"]:
        procs = {pid: {t["key"]: t["value"] for t in p["tags"]} for pid, p in trace["processes"].items()}
        for s in trace["spans"]:
            entries += 1
            tags = {t["key"]: t["value"] for t in s["tags"]}
            out[s["spanID"]] = {
                "name": s["operationName"],
                "trace": s["traceID"],
                "tags": tags,
                "process": procs[s["processID"]],
            }
    return out, entries


def _prom_collections(api: StackAPI, run_id: str) -> dict[str, list[tuple[int, int]]]:
    """instance -> [(timestamp ms, how many of its series have a sample then)], target_info aside."""
    selector = f'{{verl_run_id="{run_id}", __name__!="target_info"}}[3h]'
    per: dict[str, Counter[int]] = defaultdict(Counter)
    for series in api.prom("query", query=selector, time=time.time())["result"]:
        instance = series["metric"].get("instance", "")
        for ts, _ in series["values"]:
            per[instance][round(float(ts) * 1000)] += 1
    return {inst: sorted(c.items()) for inst, c in per.items()}


def _file_collections(points: list[MetricPoint], run_id: str) -> dict[str, list[tuple[int, int]]]:
    """instance -> [(collection time ns, the Prometheus series its points make)] of the files: a gauge or
    sum point is one series, a histogram point its buckets (+Inf included), _sum and _count."""
    per: dict[str, Counter[int]] = defaultdict(Counter)
    for p in points:
        if p.resource.get(semconv.RES_RUN_ID) != run_id:
            continue
        n = len(p.bounds or []) + 3 if p.kind == "histogram" else 1
        per[str(p.resource.get(semconv.RES_SERVICE_INSTANCE_ID, ""))][p.time_ns] += n
    return {inst: sorted(c.items()) for inst, c in per.items()}


def _debug_lines(log: Path) -> list[tuple[int, str, str]]:
    out = []
    for i, line in enumerate(log.read_text(errors="replace").splitlines()):
        m = DEBUG_SPAN_LINE.search(line)
        if m:
            out.append((i, m.group(1), m.group(2)))
    return out


def _line_count(path: Path) -> int:
    return len(path.read_text(errors="replace").splitlines()) if path.exists() else 0


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def _raylet_pids(netns: str) -> list[int]:
    from support.netns_hosts import netns_pids

    out = []
    for pid in netns_pids(netns):
        try:
            exe = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if exe.endswith(b"/raylet"):
            out.append(pid)
    return out


def _files_holding(folder: Path, needle: str, max_bytes: int = 50 << 20) -> list[str]:
    """Files under ``folder`` (at most ``max_bytes`` each read) whose bytes hold ``needle``."""
    hits = []
    for path in folder.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and path.stat().st_size:
                with open(path, "rb") as f:
                    if needle.encode() in f.read(max_bytes):
                        hits.append(str(path))
        except OSError:
            continue
    return hits


# ---------------------------------------------------------------------------------------------
# The run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiHostRun]:
    bin_dir = _require_everything()
    import verl_cpu_harness
    from verl_cpu_harness.assets import make_assets
    from verl_cpu_harness.command import verl_args

    tag = str(os.getpid())
    root = tmp_path_factory.mktemp("multihost")
    wall: dict[str, float] = {}
    started = time.monotonic()
    net = Network(tag, HOSTS, root_addresses=2)
    gateways: list[Gateway] = []
    agents: dict[str, Path] = {}
    ray_procs: list[subprocess.Popen] = []
    temp_dirs = {h: Path(f"/tmp/{net.bridge[:-2]}{h[-1]}") for h in HOSTS}  # short: Ray's socket paths
    try:
        node_env = clean_node_env()
        net.up()
        head, worker = net.host("hosta"), net.host("hostb")
        tls = tls_files(root, net.root, TOKEN)
        with running_stack(tmp_path_factory, "multihost-backends") as (_, backends_dir, ports):
            backends = StackAPI(ports, backends_dir)
            # -- the gateway tier: two gateways on two addresses of this host, one port
            gw_port = free_ports(["otlp"])["otlp"]
            for i, address in enumerate(net.root):
                own = free_ports(["otlp-http", "otelcol-health", "otelcol-metrics"])
                gw_ports = {**ports, "otlp-grpc": gw_port, **own}
                gw = Gateway(f"gw{i + 1}", address, root / f"gw{i + 1}", gw_ports)
                gateways.append(gw)
            setups = {
                gw.name: stack.roles.CollectorSetup(
                    role="gateway",
                    bind=gw.address,
                    tls_cert=tls["cert"],
                    tls_key=tls["key"],
                    token_file=tls["token"],
                    extra_configs=(COLLECTOR / "otelcol-debug.yaml",),
                )
                for gw in gateways
            }
            for gw in gateways:
                stack.supervisor.up(bin_dir, gw.data_dir, gw.ports, 90, COLLECTOR, out=print, setup=setups[gw.name])
            net.set_name("gateways", [gw.address for gw in gateways])
            # -- an agent on each host, started there the way an operator would
            otel_verl_cli = str(Path(sys.executable).with_name("otel-verl"))
            for host in HOSTS:
                agents[host] = root / f"agent-{host}"
                argv = [
                    otel_verl_cli, "stack", "up", "--role", "agent", "--data-dir", str(agents[host]),
                    "--config-dir", str(COLLECTOR), "--gateway", f"dns:gateways:{gw_port}",
                    "--gateway-ca", str(tls["ca"]), "--token-file", str(tls["token"]),
                    "--tls-cert", str(tls["cert"]), "--tls-key", str(tls["key"]),
                ]  # fmt: skip
                if bin_dir:
                    argv += ["--bin-dir", str(bin_dir)]
                res = subprocess.run(net.on(host, argv), env=node_env, capture_output=True, text=True, timeout=120)
                assert res.returncode == 0, f"agent on {host}: {res.stdout}{res.stderr}"
            wall["stack, gateways, agents"] = time.monotonic() - started

            # -- Ray: head on hosta, a worker node on hostb, clean environments
            workdir = root / "job"
            assets = make_assets(workdir)
            ray = str(Path(sys.executable).with_name("ray"))
            common = ["--block", "--num-cpus=8", "--num-gpus=1", "--disable-usage-stats"]
            starts = {
                "hosta": [ray, "start", "--head", f"--node-ip-address={head.address}", "--port=6379",
                          "--dashboard-host=0.0.0.0", "--dashboard-port=8265", f"--temp-dir={temp_dirs['hosta']}",
                          *common],
                "hostb": [ray, "start", f"--address={head.address}:6379", f"--node-ip-address={worker.address}",
                          f"--temp-dir={temp_dirs['hostb']}", *common],
            }  # fmt: skip
            dashboard = f"http://{head.address}:8265"
            for host in HOSTS:
                log = open(root / f"ray-{host}.log", "w")  # noqa: SIM115 - closed with the process
                ray_procs.append(
                    subprocess.Popen(net.on(host, starts[host]), env=node_env, cwd=workdir, stdout=log, stderr=log)
                )
                if host == "hosta":
                    _until(
                        "the Ray head's dashboard", lambda: get_json(f"{dashboard}/api/version", timeout=5), RAY_UP_S
                    )

            def alive_nodes() -> int:
                nodes = get_json(f"{dashboard}/nodes?view=summary", timeout=10)["data"]["summary"]
                return sum(1 for n in nodes if n.get("raylet", {}).get("state") == "ALIVE") == 2

            _until("both Ray nodes alive", alive_nodes, RAY_UP_S, 2.0)
            wall["ray cluster"] = time.monotonic() - started - sum(wall.values())
            raylet_env = {h: _environ(_raylet_pids(net.host(h).netns)[0]) for h in HOSTS}

            # -- the job, as users submit it to a running cluster
            run_id = f"multihost-{uuid.uuid4().hex[:8]}"
            telemetry = root / "telemetry"
            hold_dir = root / "hold"  # the harness's hold: the driver waits after these steps
            hold_dir.mkdir()
            for step in (STOP_AFTER, KILL_AFTER, RESTART_AFTER):
                (hold_dir / f"hold-{step}").write_text("")
            job_env = {
                "VERL_CPU_HARNESS_HOLD_DIR": str(hold_dir),
                "OTEL_EXPORTER_OTLP_ENDPOINT": "https://localhost:4317",  # each node's own agent
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_CERTIFICATE": str(tls["ca"]),
                "OTEL_VERL_OTLP_HEADERS_FILE": str(tls["headers"]),
                "OTEL_TRACES_EXPORTER": "otlp,otlp_json_file",
                "OTEL_METRICS_EXPORTER": "otlp,otlp_json_file",
                "OTEL_LOGS_EXPORTER": "otlp,otlp_json_file",
                "OTEL_VERL_FILE_DIR": str(telemetry),
                "OTEL_METRIC_EXPORT_INTERVAL": "600000",  # collections at step boundaries and exit only
                "OTEL_SERVICE_NAME": SERVICE,
                "OTEL_VERL_RUN_ID": run_id,
                "OTEL_VERL_SAMPLES": "true",  # log records with the steps' trace ids
                "OTEL_VERL_SAMPLES_EVERY_N_STEPS": "1",
                "OTEL_VERL_SAMPLES_PER_STEP": "2",
            }
            args = verl_args(
                assets,
                driver="v0",
                algo="grpo",
                steps=STEPS,
                n_gpus=1,
                val_before_train=False,
                extra=["trainer.nnodes=2", "ray_kwargs.ray_init.num_cpus=null", "++ray_kwargs.ray_init.num_gpus=null"],
            )
            # the launcher's own pipeline (opentelemetry-instrument's, built before otel-verl loads)
            # reads OTEL_EXPORTER_OTLP_HEADERS only: from the same file, at the entrypoint
            launcher = (
                'OTEL_EXPORTER_OTLP_HEADERS="$(cat "$OTEL_VERL_OTLP_HEADERS_FILE")" '
                'exec opentelemetry-instrument python -m verl.trainer.main_ppo "$@"'
            )
            submit = [
                ray, "job", "submit", "--address", dashboard, "--submission-id", run_id,
                "--runtime-env-json", json.dumps({"env_vars": job_env}),
                "--", "sh", "-c", launcher, "sh", *args,
            ]  # fmt: skip
            print("submit:", shlex.join(submit[:8]), "...")
            watcher = verl_cpu_harness.StepWatcher(time.time)
            client_env = {**node_env, "PYTHONUNBUFFERED": "1"}
            job_started = time.monotonic()
            proc = subprocess.Popen(
                submit, env=client_env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            pump = _Pump(proc, watcher, root / "job.log")
            t_stop = t_moved = t_kill = t_up = float("nan")

            def held(step: int) -> None:  # the driver waits after logging `step` (the harness's hold)
                def at() -> bool:
                    assert not pump.done.is_set(), f"the job ended before step {step}: {''.join(pump.lines)[-3000:]}"
                    assert (hold_dir / f"at-{step}").exists(), f"not at step {step} yet"
                    return True

                _until(f"the driver held after step {step}", at, JOB_TIMEOUT_S)

            def release(step: int) -> None:
                (hold_dir / f"hold-{step}").unlink()

            stop_offsets: dict[str, int] = {}
            accepted: dict[str, float] = {}
            queue_max = 0.0
            agent_metrics_port = stack.ports.DEFAULT_PORTS["otelcol-metrics"]
            try:
                # 1. the first gateway stops and leaves the name: its share moves to the other
                held(STOP_AFTER)

                def sent_so_far_through_the_gateways() -> bool:  # the steps before the fault, complete
                    sent = [s for s in read_spans(telemetry) if s.resource.get(semconv.RES_RUN_ID) == run_id]
                    steps = {int(s.attributes[semconv.ATTR_STEP]) for s in sent if s.name == semconv.SPAN_STEP}
                    assert STOP_AFTER in steps, f"step {STOP_AFTER}'s span not exported yet"
                    seen = {span_id for gw in gateways for _, _, span_id in _debug_lines(gw.log())}
                    missing = {s.span_id for s in sent} - seen
                    assert not missing, f"{len(missing)} of {len(sent)} spans not through a gateway yet"
                    return True

                _until("the spans sent so far through the gateways", sent_so_far_through_the_gateways)
                stop_offsets = {gw.name: _line_count(gw.log()) for gw in gateways}
                accepted = {gw.name: _accepted(gw.ports["otelcol-metrics"]) for gw in gateways}
                stack.supervisor.down(gateways[0].data_dir, out=print)
                net.set_name("gateways", [gateways[1].address])
                t_stop = time.time()

                def one_gateway_left() -> bool:  # every load_balancing exporter of both agents
                    counts = [
                        _agent_metrics(net, h, agent_metrics_port)["otelcol_loadbalancer_num_backends"] for h in HOSTS
                    ]
                    return all(c and max(c) == 1.0 for c in counts)

                _until("the agents resolving one gateway", one_gateway_left, 60.0)
                t_moved = time.time()
                release(STOP_AFTER)
                # 2. the second, now the only one, SIGKILLed; a step without any gateway; started again
                held(KILL_AFTER)
                killed = gateways[1].pid()
                os.killpg(killed, signal.SIGKILL)
                t_kill = time.time()
                os.waitpid(killed, 0)  # our child (`up` started it here): reaped, so `up` sees it gone
                release(KILL_AFTER)
                held(RESTART_AFTER)

                def queued() -> float:  # the step's data, waiting in the agents' persistent queues
                    size = sum(
                        sum(_agent_metrics(net, h, agent_metrics_port).get("otelcol_exporter_queue_size", []))
                        for h in HOSTS
                    )
                    assert size > 0, "nothing queued in the agents yet"
                    return size

                queue_max = _until("the outage's data in the agents' queues", queued)
                stack.supervisor.up(
                    bin_dir, gateways[1].data_dir, gateways[1].ports, 90, COLLECTOR, out=print, setup=setups["gw2"]
                )
                t_up = time.time()
                release(RESTART_AFTER)
                proc.wait(timeout=JOB_TIMEOUT_S)
            finally:
                if proc.poll() is None:
                    proc.kill()
                pump.thread.join(timeout=30)
            wall["job"] = time.monotonic() - job_started
            job_info = get_json(f"{dashboard}/api/jobs/{run_id}", timeout=30)

            # -- what the processes sent, and what arrived
            spans = {s.span_id: s for s in read_spans(telemetry) if s.resource.get(semconv.RES_RUN_ID) == run_id}
            points = read_metric_points(telemetry)
            file_logs = [
                int(r.get("timeUnixNano") or r.get("observedTimeUnixNano") or 0)
                for rl, r in file_log_records(telemetry)
                if any(a["key"] == semconv.RES_RUN_ID for a in rl["resource"].get("attributes", []))
            ]
            collected = time.monotonic()
            jaeger: dict[str, dict] = {}
            entries = 0

            def all_spans_in_jaeger() -> bool:
                nonlocal jaeger, entries
                jaeger, entries = _jaeger_spans(backends)
                missing = set(spans) - set(jaeger)
                assert not missing, f"{len(missing)} of {len(spans)} spans not in Jaeger yet"
                return True

            def all_collections_in_prometheus() -> dict:
                prom = _prom_collections(backends, run_id)
                files = _file_collections(points, run_id)
                short = {i: (len(c), len(prom.get(i, []))) for i, c in files.items() if len(prom.get(i, [])) < len(c)}
                assert not short, f"collections (sent, in Prometheus) per process: {short}"
                return prom

            def all_logs_in_victorialogs() -> list[dict]:
                got = backends.logsql(f'"{semconv.RES_RUN_ID}":="{run_id}"')
                assert len(got) >= len(file_logs), f"{len(got)} of {len(file_logs)} log records"
                return got

            _until("every span the processes sent in Jaeger", all_spans_in_jaeger)
            prom = _until("every metric collection in Prometheus", all_collections_in_prometheus)
            vl_logs = _until("every log record in VictoriaLogs", all_logs_in_victorialogs)
            wall["backends complete after the job"] = time.monotonic() - collected
            token_hits = [p for d in temp_dirs.values() for p in _files_holding(d, TOKEN)]
            yield MultiHostRun(
                run_id=run_id,
                returncode=proc.returncode,
                output="".join(pump.lines),
                job_status=str(job_info.get("status")),
                job_info=job_info,
                steps=dict(watcher.seen),
                t_stop=t_stop,
                t_moved=t_moved,
                t_kill=t_kill,
                t_up=t_up,
                spans=spans,
                points=points,
                file_logs=file_logs,
                jaeger=jaeger,
                jaeger_entries=entries,
                prom_collections=prom,
                vl_logs=vl_logs,
                debug={gw.name: _debug_lines(gw.log()) for gw in gateways},
                stop_offsets=stop_offsets,
                accepted_before_stop=accepted,
                agent_queue_max=queue_max,
                raylet_env=raylet_env,
                token_in_ray_files=token_hits,
                backends=backends,
                wall={**wall, "fixture": time.monotonic() - started},
            )
            for gw in gateways:
                stack.supervisor.down(gw.data_dir, out=print)
    finally:
        for p in ray_procs:  # `ray start --block` ends its node's processes on SIGTERM
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in ray_procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        for gw in gateways:
            stack.supervisor.down(gw.data_dir, out=print)
        net.down()  # every process left in the hosts (agents, Ray workers), then the namespaces
        for d in temp_dirs.values():
            subprocess.run(["rm", "-rf", str(d)], check=False)
        print(f"\nmultihost wall times (s): { {k: round(v, 1) for k, v in wall.items()} }")


# ---------------------------------------------------------------------------------------------
# The job


def _worker_spans(run: MultiHostRun) -> list[SpanRecord]:
    return [s for s in run.spans.values() if s.name.startswith(semconv.SPAN_WORKER_PREFIX)]


def test_the_submitted_job_trained_with_one_rank_on_each_host(run: MultiHostRun) -> None:
    assert run.returncode == 0 and run.job_status == "SUCCEEDED", run.output[-4000:]
    assert set(range(1, STEPS + 1)) <= set(run.steps), sorted(run.steps)
    hosts_of_rank: dict[int, set[str]] = defaultdict(set)
    for s in _worker_spans(run):
        hosts_of_rank[int(s.resource[semconv.RES_RANK])].add(s.resource[semconv.RES_HOST_NAME])
    assert sorted(hosts_of_rank) == [0, 1], dict(hosts_of_rank)
    assert all(len(h) == 1 for h in hosts_of_rank.values()), dict(hosts_of_rank)
    assert hosts_of_rank[0] | hosts_of_rank[1] == set(HOSTS), dict(hosts_of_rank)
    print(
        f"\nranks: { {r: sorted(h) for r, h in hosts_of_rank.items()} }; wall (s): "
        f"{ {k: round(v, 1) for k, v in run.wall.items()} }; steps printed (s from the stop): "
        + ", ".join(f"{n}:{t - run.t_stop:+.1f}" for n, t in sorted(run.steps.items()))
        + f"; kill at {run.t_kill - run.t_stop:+.1f}, up at {run.t_up - run.t_stop:+.1f}"
    )


def test_every_steps_trace_holds_both_hosts_one_run_the_drivers_stages_and_each_ranks_work(run: MultiHostRun) -> None:
    by_trace: dict[str, list[dict]] = defaultdict(list)
    for s in run.jaeger.values():
        by_trace[s["trace"]].append(s)
    steps = run.step_traces()
    assert sorted(steps) == list(range(1, STEPS + 1)), sorted(steps)
    for n, trace_id in sorted(steps.items()):
        spans = by_trace[trace_id]
        hosts = {s["process"].get(semconv.RES_HOST_NAME) for s in spans}
        assert hosts == set(HOSTS), (n, hosts)
        assert {s["process"].get(semconv.RES_RUN_ID) for s in spans} == {run.run_id}, n
        names = {s["name"] for s in spans}
        assert {semconv.SPAN_STEP, "verl.gen", "verl.old_log_prob", "verl.adv", "verl.update_actor"} <= names, (
            n,
            names,
        )
        worker_ranks = {
            (int(s["process"][semconv.RES_RANK]), s["process"][semconv.RES_HOST_NAME])
            for s in spans
            if s["name"].startswith(semconv.SPAN_WORKER_PREFIX)
        }
        assert {rank for rank, _ in worker_ranks} == {0, 1}, (n, worker_ranks)
        # the agents' resourcedetection ran on the way (the processes do not set os.type)
        assert {s["process"].get("os.type") for s in spans} == {"linux"}, n


def test_prometheus_has_each_ranks_series_with_its_host_and_rank(run: MultiHostRun) -> None:
    hosts_of_rank = {int(s.resource[semconv.RES_RANK]): s.resource[semconv.RES_HOST_NAME] for s in _worker_spans(run)}
    worker_instances = {
        str(s.resource.get(semconv.RES_SERVICE_INSTANCE_ID)): (
            int(s.resource[semconv.RES_RANK]),
            s.resource[semconv.RES_HOST_NAME],
        )
        for s in _worker_spans(run)
    }
    assert set(worker_instances) <= set(run.prom_collections), "a rank's process has no series in Prometheus"
    # each rank's labels, as Prometheus has them
    result = run.backends.prom(
        "query",
        query=f'count by (verl_rank, host_name) (last_over_time({{verl_run_id="{run.run_id}", '
        f'verl_process_role="{semconv.ROLE_WORKER}"}}[3h]))',
        time=time.time(),
    )["result"]
    labels = {(int(r["metric"]["verl_rank"]), r["metric"]["host_name"]) for r in result}
    assert labels == set(hosts_of_rank.items()), (labels, hosts_of_rank)
    assert all(float(r["value"][1]) >= 10 for r in result), result  # process.*, overhead, ... per rank


def test_the_worker_node_was_instrumented_only_through_what_the_job_carried(run: MultiHostRun) -> None:
    for host, env in run.raylet_env.items():
        assert not [k for k in env if k.startswith("OTEL_")], (host, sorted(env))
        path = env.get("PYTHONPATH", "")
        assert "auto_instrumentation" not in path and "_worker_site" not in path, (host, path)
    hostb = {
        s.resource.get(semconv.RES_ROLE) for s in run.spans.values() if s.resource.get(semconv.RES_HOST_NAME) == "hostb"
    }
    assert semconv.ROLE_WORKER in hostb, hostb  # instrumented there, by the job's runtime_env alone
    # the credential: its file's path travelled, the token did not
    assert run.job_info["runtime_env"]["env_vars"]["OTEL_VERL_OTLP_HEADERS_FILE"].endswith("otlp-headers")
    assert TOKEN not in json.dumps(run.job_info)
    assert run.token_in_ray_files == [], run.token_in_ray_files


# ---------------------------------------------------------------------------------------------
# The gateway tier


def _gateways_of_trace(run: MultiHostRun, upto: dict[str, int] | None = None) -> dict[str, set[str]]:
    """trace id -> the gateways whose output has a span of it (only their first ``upto`` lines)."""
    out: dict[str, set[str]] = defaultdict(set)
    for gw, lines in run.debug.items():
        for offset, trace_id, _ in lines:
            if upto is None or offset < upto[gw]:
                out[trace_id].add(gw)
    return out


def test_every_span_of_a_trace_went_through_one_gateway(run: MultiHostRun) -> None:
    """Traces complete in the gateways' output before the first fault: each in one gateway only."""
    before = defaultdict(set)
    for gw, lines in run.debug.items():
        for offset, _, span_id in lines:
            if offset < run.stop_offsets[gw]:
                before[gw].add(span_id)
    seen_before = before["gw1"] | before["gw2"]
    complete = [t for t, spans in run.trace_spans().items() if {s.span_id for s in spans} <= seen_before]
    where = _gateways_of_trace(run, run.stop_offsets)
    assert len(complete) >= 3, len(complete)  # init and the first steps' traces at least
    split = {t: where[t] for t in complete if len(where[t]) != 1}
    assert not split, split
    # both gateways had a share: traces by trace id, each process's metrics by its resource (the
    # gateways' own counters; a few traces alone could all hash to one)
    assert all(n > 0 for n in run.accepted_before_stop.values()), run.accepted_before_stop
    print(f"\ncomplete traces before the stop: {len(complete)}, each in one gateway; taken: {run.accepted_before_stop}")


def test_the_stopped_gateways_share_moved_to_the_other(run: MultiHostRun) -> None:
    """What the gateways had not put out when the first one stopped all went through the second."""
    gw1_after_stop = [line for line in run.debug["gw1"] if line[0] >= run.stop_offsets["gw1"]]
    assert gw1_after_stop == [], gw1_after_stop[:3]  # it is gone
    before = {span_id for gw, lines in run.debug.items() for off, _, span_id in lines if off < run.stop_offsets[gw]}
    after = set(run.spans) - before
    gw2_after = {span_id for off, _, span_id in run.debug["gw2"] if off >= run.stop_offsets["gw2"]}
    later_steps = {t for n, t in run.step_traces().items() if n > STOP_AFTER}
    later = {s.span_id for t in later_steps for s in run.trace_spans()[t]}
    assert later and later <= after, len(later - after)  # the steps after the stop, whole
    assert after <= gw2_after, f"{len(after - gw2_after)} of {len(after)} spans not through the other gateway"
    print(
        f"\nspans through the gateways before the stop: {len(before)} "
        f"(gw1 {sum(1 for off, _, _ in run.debug['gw1'] if off < run.stop_offsets['gw1'])}), after: {len(after)}, "
        f"all through gw2; the agents resolved one gateway {run.t_moved - run.t_stop:.1f} s after the stop"
    )


def test_nothing_was_lost_between_the_processes_and_the_backends(run: MultiHostRun) -> None:
    """Across the stop and the SIGKILL: every span by id, every collection of every process, every log record."""
    lost = set(run.spans) - set(run.jaeger)
    foreign = set(run.jaeger) - set(run.spans)
    assert not lost and not foreign, (len(lost), len(foreign))
    files = _file_collections(run.points, run.run_id)
    for instance, collections in files.items():
        prom = run.prom_collections.get(instance, [])
        assert [n for _, n in prom] == [n for _, n in collections], (instance, collections, prom)
    assert Counter(run.file_logs) - Counter(_vl_time_ns(r["_time"]) for r in run.vl_logs) == Counter()
    during = [s for s in run.spans.values() if run.t_kill <= s.end_ns / 1e9 < run.t_up]
    print(
        f"\nspans sent {len(run.spans)}, in Jaeger {len(run.jaeger)} ({run.jaeger_entries - len(run.jaeger)} twice); "
        f"{sum(len(c) for c in files.values())} collections of {len(files)} processes; logs sent "
        f"{len(run.file_logs)}, in VictoriaLogs {len(run.vl_logs)}; {len(during)} spans ended during the "
        f"{run.t_up - run.t_kill:.1f} s outage; agents' queue at most {run.agent_queue_max:.0f} batches; "
        f"steps printed (s from the stop): "
        + ", ".join(f"{n}:{t - run.t_stop:+.1f}" for n, t in sorted(run.steps.items()))
    )


def test_the_killed_gateways_outage_waited_in_the_agents_queues(run: MultiHostRun) -> None:
    assert run.agent_queue_max > 0, "the agents never queued: the gateway was not down while data came"
    during = {s.span_id for s in run.spans.values() if run.t_kill <= s.end_ns / 1e9 < run.t_up}
    assert during, "no span ended during the outage"
    through_gw2 = {span_id for _, _, span_id in run.debug["gw2"]}  # its output before the kill and after
    assert during <= set(run.jaeger) and during <= through_gw2, (
        len(during - set(run.jaeger)),
        len(during - through_gw2),
    )


def _vl_time_ns(value: str) -> int:
    """VictoriaLogs' ``_time`` (RFC 3339, nanoseconds) as unix ns."""
    head, _, frac = value.rstrip("Z").partition(".")
    secs = int(datetime.datetime.fromisoformat(head + "+00:00").timestamp())
    return secs * 1_000_000_000 + int((frac or "0").ljust(9, "0")[:9])
