"""End-to-end: the real trainer on a simulated next verl release, logging to tensorboard too.

One real run (v1 driver, GRPO, 2 steps) serves both questions, to keep CI time flat:

* **an untested verl degrades, never vanishes**: the installed verl with the moves of verl's main
  applied (the harness's ``VERL_CPU_HARNESS_NEXT_VERL``: ``LLMServerClient._vllm_request_id``
  gone, ``PPOTrainer._compute_metrics``'s ``batch`` renamed) and a ``verl-0.10.0.dist-info`` first
  on ``PYTHONPATH`` (what ``opentelemetry-instrument``'s check and otel-verl read). Training
  completes; the generic telemetry is there (every value ``Tracking.log`` saw, one trace per step);
  each process that made telemetry says once, in one table with the versions, that the moved hooks
  were skipped (a missing name, another shape) and the rest applied.
* **coexistence with verl's own loggers and monitors** (``trainer.logger=[console,tensorboard,
  wandb,mlflow,rl_insight]``; wandb offline: ``WANDB_MODE=offline``; mlflow in a file store under
  the run's folder; RL-Insight's real server API in this process, with an OTLP receiver as its
  trace store): verl's event files hold the values it printed, for the same steps; wandb's offline
  run and mlflow's run hold every key verl logged; RL-Insight's hub gets verl's values and stage
  lanes and exports its spans to its own endpoint only; otel-verl's telemetry is intact, one SDK
  pipeline (one resource) per process, none of either's spans in the other's store.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import compat
from support.components import require_module
from support.points import step_values
from verl_cpu_harness.otlp_receiver import OtlpReceiver

from otel_verl import semconv

pytestmark = pytest.mark.e2e

NEXT = "0.10.0"
STEPS = 2
TABLE = re.compile(r"otel-verl \S+ on verl (\S+) \(untested; tested: ([^)]*)\): hooks (.*)$")


@pytest.fixture(scope="module")
def tensorboard_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tensorboard")


@pytest.fixture(scope="module")
def wandb_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("wandb")


@pytest.fixture(scope="module")
def mlflow_dir(tmp_path_factory) -> Path:
    require_module("mlflow", "pip install -e '.[test]' (mlflow-skinny)")
    return tmp_path_factory.mktemp("mlflow")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Headers for the user's own OTLP backend, as a user sets them for every exporter in the job. The
# run exports to files: only an exporter built with an endpoint of its own (RL-Insight's) sends them.
OTLP_HEADERS_SECRET = "otlp-SECRET-7d2b0e"


@dataclass
class RLInsight:
    url: str  # the server's API (RL_INSIGHT_SERVER_URL)
    traces: OtlpReceiver  # in Tempo's place: RL-Insight's trace store
    targets_file: Path  # the Prometheus file_sd targets the server keeps
    metrics_port: int  # the hub actor's /metrics (trainer.rl_insight.prometheus.metrics_report_port)
    scraped: str = ""  # the hub's /metrics as last read while the run went on


@pytest.fixture(scope="module")
def rl_insight(tmp_path_factory):
    """RL-Insight's own server API (``rl_insight.server.http_api``: what ``rl-insight server start``
    runs beside the Prometheus, Tempo and Grafana it downloads, none of which runs offline here),
    with an OTLP/HTTP receiver as its Tempo and no Prometheus (its reload fails with a warning; the
    scrape targets are still written). While the run goes on, a thread reads the hub actor's
    ``/metrics`` as RL-Insight's Prometheus would (the hub dies with the job)."""
    require_module("rl_insight", "pip install -e '.[test]' (rl-insight)")
    import uvicorn
    from omegaconf import OmegaConf
    from rl_insight.server.http_api import create_app
    from rl_insight.utils.monitor_config_loader import load_server_config_file

    folder = tmp_path_factory.mktemp("rl-insight")
    with OtlpReceiver() as traces:
        conf = OmegaConf.merge(
            load_server_config_file(),
            {
                "server": {"runtime_dir": str(folder / "runtime"), "data_dir": str(folder / "data")},
                "prometheus": {"prometheus_port": _free_port()},  # none there: reload refused
                "otel": {"otel_port": int(traces.url.rsplit(":", 1)[1])},
                "grafana": {"enable": False},
            },
        )
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(create_app(conf), host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.started, "RL-Insight's server did not start"
        targets = folder / "data/targets/prometheus-targets.yml"
        info = RLInsight(f"http://127.0.0.1:{port}", traces, targets, _free_port())
        stop = threading.Event()
        scraper = threading.Thread(target=_scrape_hub, args=(info, stop), daemon=True)
        scraper.start()
        try:
            yield info
        finally:
            stop.set()
            scraper.join(timeout=10)
            server.should_exit = True
            thread.join(timeout=10)


def _hub_target(info: RLInsight) -> str | None:
    """The hub's scrape target as the hub registered it (its node's address, the port it was given)."""
    import yaml

    try:
        groups = yaml.safe_load(info.targets_file.read_text()) or []
    except (OSError, yaml.YAMLError):
        return None
    for group in groups:
        for target in group.get("targets") or []:
            if target.endswith(f":{info.metrics_port}"):
                return target
    return None


def _scrape_hub(info: RLInsight, stop: threading.Event) -> None:
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # a node address: never a proxy
    while not stop.wait(0.5):  # the hub lives from Tracking's start to the job's end, the last step's seconds
        target = _hub_target(info)
        if target is None:
            continue
        try:
            with direct.open(f"http://{target}/metrics", timeout=5) as answer:
                info.scraped = answer.read(4 << 20).decode()
        except OSError:
            pass


@pytest.fixture(scope="module")
def run(verl_runs, tmp_path_factory, tensorboard_dir, wandb_dir, mlflow_dir, rl_insight):
    site = tmp_path_factory.mktemp("next-verl")
    info = site / f"verl-{NEXT}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: verl\nVersion: {NEXT}\n")
    path = os.pathsep.join([str(site), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    env = {
        "PYTHONPATH": path,
        "VERL_CPU_HARNESS_NEXT_VERL": "1",
        "TENSORBOARD_DIR": str(tensorboard_dir),
        "WANDB_MODE": "offline",  # as on a cluster without internet; `wandb sync` later
        "WANDB_DIR": str(wandb_dir),
        # mlflow-skinny has no SQL store (verl's default URI is sqlite): a file store, opted in
        "MLFLOW_TRACKING_URI": mlflow_dir.as_uri(),
        "MLFLOW_ALLOW_FILE_STORE": "true",
        "RL_INSIGHT_SERVER_URL": rl_insight.url,
        "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{OTLP_HEADERS_SECRET}",
    }
    extra = [
        "trainer.logger=[console,tensorboard,wandb,mlflow,rl_insight]",
        f"+trainer.rl_insight.prometheus.metrics_report_port={rl_insight.metrics_port}",
        # verl 0.9.1 refuses rl_insight with its default disable_log_stats=True (LLMServerManager)
        "actor_rollout_ref.rollout.disable_log_stats=False",
    ]
    result = verl_runs.get("v1", "grpo", steps=STEPS, env=env, extra=extra)
    errors = [line[:300] for line in result.output.splitlines() if "Error" in line or "Traceback" in line]
    assert result.returncode == 0, "\n".join(errors[-30:])
    return result


def test_training_completes_with_every_logged_value_exported(run):
    assert set(range(1, STEPS + 1)) <= set(run.console)  # (and step 0: validation before training)
    assert f"verl {NEXT} is outside the range it was tested with" in run.output
    for n in range(1, STEPS + 1):
        exported, names = step_values(run, n)
        same = [name for name, value in names.items() if exported.get(name) == pytest.approx(value, rel=1e-6)]
        assert len(same) >= 50, sorted(set(names) - set(same))[:20]


def test_one_trace_per_step(run):
    steps = {s.attributes[semconv.ATTR_STEP]: s for s in run.spans if s.name == semconv.SPAN_STEP}
    assert sorted(steps) == list(range(1, STEPS + 1))
    assert len({s.trace_id for s in steps.values()}) == STEPS
    for step in steps.values():
        inside = [s for s in run.spans if s.trace_id == step.trace_id and semconv.ATTR_STAGE in s.attributes]
        assert {"gen", "update_actor"} <= {s.attributes[semconv.ATTR_STAGE] for s in inside}


RAY_PREFIX = re.compile(r"^(?:\x1b\[[0-9;]*m)?\(([^)]*)\)(?:\x1b\[[0-9;]*m)? ?")


def _tables(run) -> list[tuple[str, str, str]]:
    """(process, the table's first line, the lines that follow it) for each table printed: Ray
    prefixes each line of an actor's output with "(Actor pid=N)"; the launcher's lines have none."""
    lines = []
    for line in run.output.splitlines():
        match = RAY_PREFIX.match(line)
        lines.append((match.group(1), line[match.end() :]) if match else ("launcher", line))
    found = []
    for i, (source, body) in enumerate(lines):
        if TABLE.search(body):
            rest = []
            for other, follow in lines[i + 1 :]:
                if other != source:
                    continue  # another process's line in between
                if not follow.startswith("  "):
                    break
                rest.append(follow)
            found.append((source, body, "\n".join(rest)))
    return found


def test_each_process_says_once_which_hooks_applied_and_which_were_skipped(run):
    tables = _tables(run)
    assert tables, run.output[-3000:]
    sources = [source for source, _, _ in tables]
    assert len(set(sources)) == len(sources)  # once per process
    assert {"launcher", "TaskRunnerV1"} <= {s.split(" pid=")[0] for s in sources}
    for _, head, _ in tables:
        version, tested, counts = TABLE.search(head).groups()
        assert version == NEXT and tested == "verl >= 0.9.1, < 0.10"
        assert "applied" in counts
    everything = "\n".join(body for _, _, body in tables)
    assert re.search(
        r"skipped +verl\.trainer\.ppo\.v1\.trainer_base\.PPOTrainer\._compute_metrics +\[patch, private name, "
        r"since verl 0\.9\.0\] +shape: PPOTrainer\._compute_metrics has no parameter 'batch'",
        everything,
    )
    assert re.search(
        r"skipped +verl\.workers\.rollout\.llm_server\.LLMServerClient\._vllm_request_id +\[patch, private name, "
        r"since verl 0\.9\.0\] +LLMServerClient\._vllm_request_id missing",
        everything,
    )
    # the rest applied: the driver's trainer, the timer and Tracking.log; the rollout's client
    assert re.search(r"applied +verl\.utils\.tracking: Tracking\.log", everything)
    assert re.search(r"applied +verl\.utils\.profiler\.performance: _timer", everything)
    assert re.search(r"applied +verl\.trainer\.ppo\.v1\.trainer_base: PPOTrainer\.__init__", everything)
    assert re.search(r"applied +verl\.workers\.rollout\.llm_server: LLMServerClient\._acquire_server", everything)
    skipped = re.findall(r"^ *skipped +(\S+)", everything, re.M)
    assert set(skipped) == {
        "verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_metrics",
        "verl.workers.rollout.llm_server.LLMServerClient._vllm_request_id",
    }


def test_tensorboard_gets_what_verl_logged_beside_otel_verl(run, tensorboard_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = list(tensorboard_dir.rglob("events.out.tfevents.*"))
    assert files, "verl wrote no tensorboard event file"
    scalars: dict[str, dict[int, float]] = defaultdict(dict)
    for folder in {f.parent for f in files}:
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            for event in acc.Scalars(tag):
                scalars[tag][event.step] = event.value
    for key in ("critic/score/mean", "actor/pg_loss", "perf/throughput"):
        assert sorted(scalars[key]) == list(range(1, STEPS + 1)), key
        for n in range(1, STEPS + 1):
            assert scalars[key][n] == pytest.approx(run.console[n][key], rel=1e-5), (key, n)


def test_wandb_offline_gets_every_key_verl_logged_beside_otel_verl(run, wandb_dir):
    """wandb 0.31 keeps an offline run in a ``run-<id>.wandb`` record log (protobuf records, read by
    ``wandb sync``; its Python reader is gone): each key verl logged is in it as written. (verl's
    ``Tracking`` finishes the wandb run in ``__del__``, which does not run when Ray ends the
    TaskRunner actor: no ``wandb-summary.json``; ``wandb sync`` reads the record log.)"""
    (record_log,) = wandb_dir.glob("wandb/offline-run-*/run-*.wandb")
    raw = record_log.read_bytes()
    keys = set(run.console[STEPS]) - {semconv.STEP_KEY}
    assert len(keys) >= 50
    missing = sorted(k for k in keys if k.encode() not in raw)
    assert not missing, missing[:20]


def test_one_pipeline_per_process(run):
    """Every span and point of a process carries one resource: one SDK TracerProvider and
    MeterProvider per process, none added beside otel-verl's by verl's loggers."""
    resources: dict[int, set] = defaultdict(set)
    for record in (*run.spans, *run.points):
        pid = record.resource.get("process.pid")
        assert pid is not None, record.resource
        resources[pid].add(tuple(sorted((k, str(v)) for k, v in record.resource.items())))
    assert len(resources) >= 3  # the TaskRunner, a worker, the agent loop at least
    assert all(len(r) == 1 for r in resources.values()), {p: len(r) for p, r in resources.items()}


def _mlflow_key(key: str) -> str:
    """verl's ``_MlflowLoggingAdapter._sanitize_key``: the name a key gets in mlflow."""
    key = re.sub(r"/+", "/", key.replace("@", "_at_"))
    return re.sub(r"[^/\w.\- :]", "_", key)


def test_mlflow_gets_every_key_verl_logged_beside_otel_verl(run, mlflow_dir, monkeypatch):
    """mlflow's own client reads verl's run back from the file store: every key verl printed, at
    every step, with the value it printed."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=mlflow_dir.as_uri())
    experiment = client.get_experiment_by_name("verl_cpu_harness")  # verl: project name = experiment
    (mlrun,) = client.search_runs([experiment.experiment_id])
    assert mlrun.info.run_name == "v1_grpo"
    assert mlrun.info.status == "FINISHED"  # mlflow's own exit handler ends it (verl's Tracking.__del__ does not run)
    keys = set(run.console[STEPS]) - {semconv.STEP_KEY}
    assert len(keys) >= 50
    assert not sorted(k for k in keys if _mlflow_key(k) not in mlrun.data.metrics)[:20]
    for key in ("critic/score/mean", "actor/pg_loss", "perf/throughput", "timing_s/gen"):
        history = {m.step: m.value for m in client.get_metric_history(mlrun.info.run_id, _mlflow_key(key))}
        assert sorted(history) == list(range(1, STEPS + 1)), key
        for n in range(1, STEPS + 1):
            assert history[n] == pytest.approx(run.console[n][key], rel=1e-6), (key, n)


RL_INSIGHT_SERVICE = "rl_insight_monitor"  # rl-insight 0.3's namespace: its spans' service.name


def _rl_insight_spans(rl_insight) -> list[tuple[dict, dict]]:
    """(resource attributes, span) for each span RL-Insight's hub exported to its endpoint."""

    def attrs(items) -> dict:
        return {a["key"]: next(iter(a["value"].values()), None) for a in items or []}

    return [
        (attrs(rs.get("resource", {}).get("attributes")), {**span, "attributes": attrs(span.get("attributes"))})
        for body in rl_insight.traces.bodies("/v1/traces")
        for rs in body.get("resourceSpans", [])
        for ss in rs.get("scopeSpans", [])
        for span in ss.get("spans", [])
    ]


def test_rl_insight_gets_verl_values_stage_lanes_and_engine_targets(run, rl_insight):
    """RL-Insight really ran beside otel-verl: its hub actor registered its ``/metrics`` with the
    server and served verl's logged values there, verl registered the rollout servers as scrape
    targets, and the hub exported verl's stage lanes as spans to RL-Insight's own endpoint."""
    import yaml

    groups = yaml.safe_load(rl_insight.targets_file.read_text())
    jobs = {group["labels"]["rl_insight_job"] for group in groups}
    assert {"trainer_metrics", "hfcpu"} <= jobs, groups  # the hub; the rollout servers (rollout.name)
    assert _hub_target(rl_insight) is not None, groups
    assert rl_insight.scraped, "the hub's /metrics never answered"
    last = rl_insight.scraped
    for key in ("critic/score/mean", "actor/pg_loss"):
        name = f"{RL_INSIGHT_SERVICE}_{key.replace('/', '_')}"
        values = [float(v) for v in re.findall(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)$", last, re.M)]
        assert values, (name, last[:2000])
        logged = [run.console[n][key] for n in range(1, STEPS + 1)]
        assert any(v == pytest.approx(x, rel=1e-6) for v in values for x in logged), (key, values, logged)
    spans = _rl_insight_spans(rl_insight)
    assert spans, "RL-Insight's hub exported no span"
    assert {r.get("service.name") for r, _ in spans} == {RL_INSIGHT_SERVICE}
    assert {s["attributes"].get("monitor.trace_segment") for _, s in spans} == {"state_interval"}


def test_rl_insight_and_otel_verl_keep_their_spans_apart(run, rl_insight):
    """Two pipelines that never meet: RL-Insight's hub exports with a tracer provider of its own
    (private, never the global one) to its own endpoint; otel-verl's global providers stay otel-verl's
    in every process (it never says another one was set first), and neither's spans reach the other."""
    ours = {s.name for s in run.spans}
    theirs = _rl_insight_spans(rl_insight)
    assert theirs and ours
    assert not ours & {s["name"] for _, s in theirs}
    assert not [s for s in run.spans if "monitor.trace_segment" in s.attributes or "state_lane_id" in s.attributes]
    assert not [s for s in run.spans if s.resource.get("service.name") == RL_INSIGHT_SERVICE]
    assert "a global OpenTelemetry provider was already set" not in run.output


def test_rl_insight_gets_the_shared_otlp_headers_and_otel_verl_says_so(run, rl_insight):
    """RL-Insight's exporter adds ``OTEL_EXPORTER_OTLP_HEADERS`` (meant for the user's own backend) to
    its requests to the RL-Insight server; the launcher says so once, never with the value."""
    sent = {h.get("authorization") for path, h, _ in rl_insight.traces.requests if path == "/v1/traces"}
    assert sent == {f"Bearer {OTLP_HEADERS_SECRET}"}
    warning = "rl_insight logger is on and OTEL_EXPORTER_OTLP_HEADERS is set"
    said = [line for line in run.output.splitlines() if warning in line]
    assert len(said) == 1 and not RAY_PREFIX.match(said[0]), said  # once, by the launcher
    assert OTLP_HEADERS_SECRET not in run.output


def test_compatibility_cell(run):
    """This run is its cell of the compatibility matrix (docs/generated/compatibility.md)."""
    compat.check(run, "0.10.0-sim-v1-hf")
