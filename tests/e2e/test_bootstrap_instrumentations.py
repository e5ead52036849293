"""End-to-end: every instrumentation ``opentelemetry-bootstrap -a install`` picks, loaded in every
process of a real run (real trainer on CPU), as many users set up zero-code OpenTelemetry.

The set (``bootstrap_site``: asyncio, grpc, requests, urllib3, httpx, aiohttp, fastapi, jinja2,
logging, threading, system-metrics, ...) is on the job's ``PYTHONPATH``; the job exports to the
OTLP JSON files and over OTLP to local receivers, OTLP/HTTP (protobuf, through ``requests``) and
OTLP/gRPC (through ``grpc``) for different signals, and its reward function POSTs each response to
the HTTP receiver (a reward model behind an API). Two runs (tests/shared_runs.py's
``UserCodeRuns``, shared with test_user_telemetry): v0 with traces over HTTP and metrics over gRPC,
v1 the other way round.

The spool folder exists before the job starts, as it does for every job after the first one of a
launch folder (or a root shared on purpose): the spooler threads then start with the pipeline, not
from inside a first export. This is what the earlier version of this test did not see: started from
an export, a thread inherits the SDK's suppression of instrumentation through the ``threading``
instrumentation of the set, and every export was quiet by luck; started with the pipeline, each
export made a ``POST /v1/traces`` or ``TraceService/Export`` span, exported by the next flush, which
made another (thousands per run). Measured on this harness with the fix: besides otel-verl's and the
user's spans, the instrumentations add one ``jinja2.render`` span per trajectory (the chat template)
one ``jinja2.compile`` per process that renders, and on v1 the ``datasets`` library's two ``HEAD``
probes at start-up; Ray's own traffic adds none (its daemons do not
run the bootstrap, its workers talk through Ray's core), and neither do the exporters' own calls.
"""

from __future__ import annotations

from collections import Counter

import pytest
from support.shared_runs import STEPS, USER_CODE_PROTOCOLS, USER_REWARD_PATH
from verl_cpu_harness import user_telemetry as ut

from otel_verl import semconv

pytestmark = pytest.mark.e2e

TRAJECTORIES = STEPS * 4 * 2 + 16  # 4 prompts x rollout.n 2 per step, 16 validation ones
OWN = ("verl.", "my.")


@pytest.fixture(scope="module", params=sorted(USER_CODE_PROTOCOLS))
def run(request, user_code_runs):
    return user_code_runs.get(request.param)


def _foreign(spans):
    """Spans neither otel-verl's (``verl.*``, and its LLM-call spans named by the GenAI conventions:
    ``semconv.is_llm_call``) nor the user code's (``my.*``)."""
    return [s for s in spans if not s.name.startswith(OWN) and not semconv.is_llm_call(s.name, s.attributes)]


def _url(span) -> str:
    # the HTTP semantic conventions' old and new names (OTEL_SEMCONV_STABILITY_OPT_IN picks)
    return str(span.attributes.get("url.full") or span.attributes.get("http.url") or "")


def test_the_users_http_call_is_a_child_of_its_reward_span_in_the_trajectory_trace(run):
    by_id = {s.span_id: s for s in run.spans}
    posts = [s for s in _foreign(run.spans) if _url(s).endswith(USER_REWARD_PATH)]
    rewards = [s for s in run.spans if s.name == ut.SPAN_REWARD]
    assert rewards and len(posts) == len(rewards)
    received = [r for r in run.received if r[0] == USER_REWARD_PATH]
    assert len(received) >= len(posts)  # the reward worker's last spans may be cut at job end
    for post in posts:
        reward = by_id[post.parent_id]
        assert reward.name == ut.SPAN_REWARD
        trajectory = by_id[by_id[reward.parent_id].parent_id]  # through the reward worker's span
        assert trajectory.name == semconv.SPAN_ROLLOUT_TRAJECTORY
        assert post.trace_id == trajectory.trace_id
        assert post.resource[semconv.RES_RUN_ID] == trajectory.resource[semconv.RES_RUN_ID]
        assert post.resource[semconv.RES_ROLE] == semconv.ROLE_REWARD_WORKER


def _is_export(span) -> bool:
    """An OTLP export's own span: ``POST .../v1/<signal>`` (HTTP) or ``.../TraceService/Export`` (gRPC)."""
    return (
        "/v1/" in _url(span) or "opentelemetry.proto.collector" in f"{span.name} {span.attributes.get('rpc.service')}"
    )


def test_no_export_is_traced_and_the_foreign_spans_are_the_users_and_the_templates(run):
    exports = Counter((s.resource.get(semconv.RES_ROLE), s.name) for s in run.spans if _is_export(s))
    assert not exports, exports  # no export, re-send or flush of otel-verl's is traced, on any thread
    others = [s for s in _foreign(run.spans) if not _url(s).endswith(USER_REWARD_PATH)]
    names = Counter(s.name for s in others)
    assert set(names) <= {"jinja2.render", "jinja2.compile", "HEAD"}, names  # HEAD: datasets' probes at start
    processes = len({s.resource["process.pid"] for s in run.spans})
    assert len(others) <= TRAJECTORIES + processes, names
    assert not [s for s in others if s.attributes.get("rpc.system") == "grpc"]  # no Ray gRPC


def test_every_span_and_point_carries_the_runs_identity(run):
    """(One pipeline per process, otel-verl's, on the same runs: test_user_telemetry.)"""
    run_ids = {s.resource.get(semconv.RES_RUN_ID) for s in run.spans} | {
        p.resource.get(semconv.RES_RUN_ID) for p in run.points
    }
    assert len(run_ids) == 1 and None not in run_ids
    assert all(s.resource.get(semconv.RES_ROLE) not in (None, semconv.ROLE_UNKNOWN) for s in run.spans)


def test_otel_verls_own_telemetry_is_intact(run):
    steps = sorted(s.attributes[semconv.ATTR_STEP] for s in run.spans if s.name == semconv.SPAN_STEP)
    assert steps == list(range(1, STEPS + 1))
    trajectories = [s for s in run.spans if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY]
    assert len(trajectories) == TRAJECTORIES
    over_http = {r[0].rpartition("/")[2] for r in run.received if r[0].startswith("/v1/")}
    over_grpc = {signal for signal, _ in run.received_grpc}
    # what the files got, the OTLP exporters delivered too (v0's processes log nothing at WARNING and up)
    written = {f.name.split("-", 1)[0] for f in run.telemetry_dir.glob("*.jsonl")}
    assert {"traces", "metrics"} <= written
    protocols = USER_CODE_PROTOCOLS[run.driver]
    assert over_http == {s for s, p in protocols.items() if p == "http/protobuf"} & written
    assert over_grpc == {s for s, p in protocols.items() if p == "grpc"} & written
