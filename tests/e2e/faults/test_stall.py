"""The stall doctor on the real CPU trainer, two hung runs, ``OTEL_VERL_STALL_AFTER=30``:

* v1, hung in a step's rollout: one of step 2's four prompt groups never finishes, the other three do
  (``VERL_CPU_HARNESS_HANG_GROUP_AFTER``: step 1 takes 8 sampled requests; the prompt of the next one
  blocks forever in the rollout server, every request of it);
* v0, hung in a validation: every validation is slower than the limit (no stall), step 2's hangs.

On each, within the limit plus a bounded delay every verl process has reported its threads' stacks,
the rollout server's naming the function it is stuck in; the test then kills the job, as a user
would: once those reports are on disk (plus a few seconds for the console and the stalled gauge),
or at the latest after ``KILL_AFTER_S``. The shipped stall alerts fire on the series the hung run
exported (``promreplay``). On v1 the TaskRunner is stalled in the replay buffer's wait for step 2's
last prompt group: its record names it, with the replica its LLM calls went to
(``hooks/waiting_for.py``, ``hooks/poll_lag.py``). (v0 hung in a rollout had a run
of its own until the validation run showed every check on v0 too: ~110 s of CI.) The two runs
are made side by side (``hung_runs``): most of the v0 run is waiting."""

from __future__ import annotations

import json
import re
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest
from support.opskit import require_tool
from support.promreplay import Replay, run_series

from otel_verl import semconv
from otel_verl.offline.otlp_files import read_spans

pytestmark = pytest.mark.e2e

# 30 s: step 1 (the first, with its warm-up) took more than 15 s on a machine running two other
# verl jobs, and the stall was then reported during step 1.
STALL_AFTER = 30
# start-up ~40 s + step 1 + 30 s + a 5 s poll + flush, with room for a loaded machine (180 s was
# reached once, at a load average of ~10): the run ends once every process has reported
KILL_AFTER_S = 240
ROLES = {"taskrunner", "worker", "agent_loop_worker", "rollout_server", "ray_actor", "launcher"}
CLASSES = ("TaskRunner", "AgentLoopWorker", "HFCPUServer", "RewardLoopWorker")  # v1: TaskRunnerV1, ...TQ
GRACE_S = 8.0  # after the last report: verl's console lines (Ray forwards them late), the stalled gauge


# Every validation takes 16 x SLOW_VALIDATION_S longer than usual (32 s: longer than the limit),
# the validation before training and step 1's are slow but finish; step 2's hangs
# (VERL_CPU_HARNESS_HANG_VALIDATION_AFTER: two validations of 16 prompts each). The first
# validation may count up to the limit as its due, so a loaded machine has 2 x STALL_AFTER - 32 s of room
# for start-up and the validation's own work before the old rule's false stall would show.
SLOW_VALIDATION_S = 2.0
VAL_PROMPTS = 16  # the harness's validation set, one greedy response each


class _AllReported:
    """``kill_when`` for the run: true ``GRACE_S`` after every process has written its stacks and
    the TaskRunner its training-stalled record (the job would otherwise hang until the timeout)."""

    def __init__(self, telemetry_dir) -> None:
        self._dir = telemetry_dir
        self._since: float | None = None

    def __call__(self) -> bool:
        if self._since is None:
            try:
                records = _records_in(self._dir)
            except (OSError, ValueError):  # a file being written: next second
                return False
            if _all_reported(records):
                self._since = time.monotonic()
        return self._since is not None and time.monotonic() - self._since >= GRACE_S


def _all_reported(records: list[tuple[dict, dict]]) -> bool:
    stalls = [(res, r) for res, r in records if r.get("eventName") == semconv.EVENT_STALL_STACKS]
    classes = {_attrs(r).get(semconv.ATTR_RAY_ACTOR_CLASS) or "" for _, r in stalls}
    said = any(r.get("eventName") == semconv.EVENT_TRAINING_STALLED for _, r in records)
    roles = {res.get(semconv.RES_ROLE) for res, _ in stalls}
    return said and ROLES <= roles and all(any(c.startswith(w) for c in classes) for w in CLASSES)


class _Training:
    """Sets ``event`` once the run's TaskRunner exported its ``verl.init`` span: its workers are up
    and ``fit`` (the first, slow validation) begins within the span processor's delay."""

    def __init__(self, telemetry_dir, event: threading.Event) -> None:
        self._dir = telemetry_dir
        self._event = event

    def __call__(self) -> bool:
        if not self._event.is_set():
            try:
                if any(s.name == semconv.SPAN_INIT for s in read_spans(self._dir)):
                    self._event.set()
            except Exception:  # noqa: BLE001 - a file being written: next second (a raise would leave the job running)
                pass
        return False


def _hung_in_rollout(tmp_path_factory, run_verl_instrumented):
    """v1: one of step 2's prompt groups hangs in the rollout server's generation."""
    workdir = tmp_path_factory.mktemp("stall-v1")
    env = {"VERL_CPU_HARNESS_HANG_GROUP_AFTER": "8", "OTEL_VERL_STALL_AFTER": str(STALL_AFTER)}
    run = run_verl_instrumented(
        workdir,
        "v1",
        "grpo",
        steps=3,
        val_before_train=False,
        env=env,
        timeout_s=KILL_AFTER_S,
        kill_when=_AllReported(workdir / "telemetry"),
    )
    print(f"stall-v1: killed after {run.wall_s:.0f} s (at the latest {KILL_AFTER_S} s)")
    return run


def _hung_in_validation(tmp_path_factory, run_verl_instrumented, training: threading.Event):
    """v0: every validation slow, step 2's hung (above); ``training`` set once its ``fit`` begins."""
    workdir = tmp_path_factory.mktemp("stall-validation")
    env = {
        "VERL_CPU_HARNESS_SLOW_VALIDATION": str(SLOW_VALIDATION_S),
        "VERL_CPU_HARNESS_HANG_VALIDATION_AFTER": str(2 * VAL_PROMPTS),
        "OTEL_VERL_STALL_AFTER": str(STALL_AFTER),
    }
    began, reported = _Training(workdir / "telemetry", training), _AllReported(workdir / "telemetry")
    run = run_verl_instrumented(
        workdir,
        "v0",
        "grpo",
        steps=2,
        test_freq=1,
        env=env,
        timeout_s=KILL_AFTER_S + 180,  # three 32 s validations and the hung one's 30 s beyond its usual
        kill_when=lambda: began() or reported(),
    )
    print(f"stall-validation: killed after {run.wall_s:.0f} s")
    return run


# The v0 run waits ~130 s of its ~200 s (its validations sleep, then the hang and the limit): the v1
# run starts once the v0 one trains, so that its start-up (~55 s of CPU) and its own hang overlap
# those waits (~100 s of CI). The stall clocks start at ``fit``, after each start-up: v1's step 1
# comes while v0 sleeps or hangs; v0's step 1 (a few seconds) may run beside v1's start-up, with
# 2 x STALL_AFTER - 32 s of room (above). Without that signal, v1 starts after ``V1_START_AFTER_S``.
V1_START_AFTER_S = 240


@pytest.fixture(scope="module")
def hung_runs(tmp_path_factory, run_verl_instrumented) -> dict[str, Any]:
    """driver -> its hung run (or what its making raised), the two made side by side (above)."""
    training = threading.Event()
    runs: dict[str, Any] = {}

    def v0() -> None:
        try:
            runs["v0"] = _hung_in_validation(tmp_path_factory, run_verl_instrumented, training)
        except BaseException as exc:  # noqa: BLE001 - raised again where the run is read
            runs["v0"] = exc
        finally:
            training.set()

    thread = threading.Thread(target=v0, name="stall-v0", daemon=True)
    thread.start()
    training.wait(V1_START_AFTER_S)
    try:
        runs["v1"] = _hung_in_rollout(tmp_path_factory, run_verl_instrumented)
    finally:
        thread.join()
    return runs


def _made(runs: dict[str, Any], driver: str) -> Any:
    if isinstance(runs[driver], BaseException):
        raise runs[driver]
    return runs[driver]


@pytest.fixture(scope="module")
def hung_in_validation(hung_runs):
    return _made(hung_runs, "v0")


@dataclass
class Hung:
    run: Any
    stuck_in: str  # the harness's function the rollout server hangs in
    logged: list[int]  # the steps verl's console logged (0: the validation before training)
    ended: list[int]  # the steps whose verl.step span ended


@pytest.fixture(scope="module", params=["v1-rollout", "v0-validation"])
def hung(request, hung_runs) -> Hung:
    """Every check of a hang, on both hung runs: v1 stuck in a step's rollout, v0 in its validation."""
    if request.param == "v1-rollout":
        return Hung(_made(hung_runs, "v1"), "_stuck_in_generate", [1], [1])
    return Hung(_made(hung_runs, "v0"), "_stuck_in_validation", [0, 1], [1, 2])


def _records(run) -> list[tuple[dict, dict]]:
    """(resource attributes, record) of every log record the run wrote."""
    return _records_in(run.telemetry_dir)


def _records_in(folder) -> list[tuple[dict, dict]]:
    out = []
    for path in folder.glob("logs-*.jsonl"):
        for line in path.read_text().splitlines():
            for rl in json.loads(line).get("resourceLogs", []):
                res = {a["key"]: next(iter(a["value"].values())) for a in rl["resource"]["attributes"]}
                out += [(res, r) for sl in rl["scopeLogs"] for r in sl["logRecords"]]
    return out


def _attrs(record: dict) -> dict:
    return {a["key"]: next(iter(a["value"].values())) for a in record.get("attributes", [])}


def test_the_job_hung_and_was_killed(hung):
    assert hung.run.returncode == 124, hung.run.output[-3000:]  # killed by the test, as a user would
    assert sorted(hung.run.console) == hung.logged
    assert f"(limit {STALL_AFTER} s, step 2 in progress)" in hung.run.output


def test_every_verl_process_reported_its_stacks(hung):
    stalls = [(res, r) for res, r in _records(hung.run) if r.get("eventName") == semconv.EVENT_STALL_STACKS]
    roles = {res.get(semconv.RES_ROLE) for res, _ in stalls}
    assert ROLES <= roles, roles
    classes = {_attrs(r).get(semconv.ATTR_RAY_ACTOR_CLASS) for _, r in stalls}
    for wanted in CLASSES:
        assert any(c and c.startswith(wanted) for c in classes), (wanted, classes)
    ended = {s.attributes[semconv.ATTR_STEP]: s for s in hung.run.spans if s.name == semconv.SPAN_STEP}
    assert sorted(ended) == hung.ended  # v0's validation comes after its step's span
    for _, r in stalls:
        attrs = _attrs(r)
        assert int(attrs[semconv.ATTR_STEP]) == 2 and int(attrs[semconv.ATTR_STALL_EPISODE]) == 1
        assert r["traceId"] and r["traceId"] != ended[1].trace_id  # the trace of step 2's work, in progress
        assert 'Thread "MainThread"' in r["body"]["stringValue"]
    assert len({r["traceId"] for _, r in stalls}) == 1


def test_the_rollout_servers_stack_names_where_it_is_stuck(hung):
    servers = [
        r
        for _, r in _records(hung.run)
        if r.get("eventName") == semconv.EVENT_STALL_STACKS
        and _attrs(r).get(semconv.ATTR_RAY_ACTOR_CLASS) == "HFCPUServer"
    ]
    assert servers and all(hung.stuck_in in r["body"]["stringValue"] for r in servers)


def test_summary_shows_where_the_rollout_server_is_stuck(hung):
    from otel_verl.offline.report import build
    from otel_verl.offline.run.text import lines

    text = "\n".join(lines(build(hung.run.telemetry_dir)))
    assert "STALLED at step 2" in text
    server = re.search(r"\n  HFCPUServer \(rollout_server\)[^\n]*\n((?:    [^\n]*\n)+)", text)
    assert server and f"in {hung.stuck_in}" in server.group(1), text


def test_the_taskrunner_said_the_run_stalled(hung):
    (res, rec), *_ = [(res, r) for res, r in _records(hung.run) if r.get("eventName") == semconv.EVENT_TRAINING_STALLED]
    assert res[semconv.RES_ROLE] == "taskrunner" and int(_attrs(rec)[semconv.ATTR_STEP]) == 2
    stalled = [p for p in hung.run.points if p.name == semconv.M_TRAINING_STALLED]
    assert stalled and stalled[-1].value == 1


UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # verl's prompt uids (uuid4)
GROUPS = 4  # the harness's train_batch_size: step 2's prompt groups, of which one never finishes
REPLICA = "hfcpu_server_0_0"  # the harness's one rollout server (its load balancer's server id)


def test_the_stalled_record_names_the_groups_the_v1_wait_waits_for(hung):
    """v1: the trainer is stalled in the replay buffer's wait; its record and console line say how
    many groups it needs and has (3 of 4), and name the one still running (step 2's stuck group),
    with its age and the replica its calls were sent to. v0 has no such wait: nothing of it in the
    record."""
    rec, *_ = [r for _, r in _records(hung.run) if r.get("eventName") == semconv.EVENT_TRAINING_STALLED]
    attrs = _attrs(rec)
    if hung.run.driver == "v0":
        assert semconv.ATTR_WAIT_FOR not in attrs and "waiting for rollouts" not in hung.run.output
        return
    assert attrs[semconv.ATTR_WAIT_FOR] == "rollouts" and attrs[semconv.ATTR_WAIT_PARTITION] == "train"
    assert int(attrs[semconv.ATTR_WAIT_NEEDED]) == GROUPS and int(attrs[semconv.ATTR_WAIT_FINISHED]) == GROUPS - 1
    running, pending = int(attrs[semconv.ATTR_WAIT_RUNNING]), int(attrs[semconv.ATTR_WAIT_PENDING])
    assert running == 1, attrs  # the stuck group
    values = {a["key"]: a["value"] for a in rec["attributes"]}

    def array(key):
        return [next(iter(v.values())) for v in values[key]["arrayValue"]["values"]]

    uids, states = array(semconv.ATTR_WAIT_OLDEST_UIDS), array(semconv.ATTR_WAIT_OLDEST_STATES)
    assert len(uids) == min(running + pending, 8) and all(UID.fullmatch(u) for u in uids), uids
    assert states[:running] == ["running"] * min(running, 8)  # the stuck ones, named first
    assert {int(s) for s in array(semconv.ATTR_WAIT_OLDEST_STEPS)[:running]} == {2}
    assert array(semconv.ATTR_WAIT_OLDEST_REPLICAS)[:running] == [REPLICA]  # where its calls went
    ages = [float(a) for a in array(semconv.ATTR_WAIT_OLDEST_AGES)[:running]]  # the agent-loop workers' stamps
    stalled = float(attrs[semconv.ATTR_STALL_SECONDS])  # since step 1 ended, before step 2's groups started
    assert all(0 < a <= stalled + 2 for a in ages), (ages, stalled)  # (two processes' clocks: a margin)
    assert 0 < float(attrs[semconv.ATTR_WAIT_ELAPSED]) <= stalled
    line = re.search(r"waiting for rollouts \(train\) for \d+ s: 3 of 4 needed groups finished[^\n]*", hung.run.output)
    assert line and re.search(f"oldest: {uids[0]} running for \\d+ s on {REPLICA} ", line.group(0)), hung.run.output[
        -3000:
    ]
    from otel_verl.offline.report import build
    from otel_verl.offline.run.text import lines

    text = "\n".join(lines(build(hung.run.telemetry_dir)))
    assert "the trainer was waiting for rollouts (train)" in text
    assert re.search(f"in flight: {uids[0]} \\(running \\d+ s on {REPLICA}, step 2\\)", text), text


# The hung run replayed 300 times slower: its stall of at least STALL_AFTER s lasts 2.5 h and more.
SLOWER = 300


def test_the_stall_alerts_fire_on_the_series_this_run_exported(hung, tmp_path):
    """The stall doctor's alert once its gauge says so, and the heartbeat's fixed-threshold alert (30 min
    warning, 2 h critical) on the same series slowed down; neither at step 1."""
    require_tool("promtool")
    replay = Replay(run_series(hung.run.telemetry_dir), slower=SLOWER, step_s=60)
    run_id = {s.labels["verl_run_id"] for s in replay.find("verl_training_step")}.pop()
    step1 = replay.after("verl_training_step")
    stalled = replay.after("verl_training_stalled")
    assert stalled - step1 >= STALL_AFTER * SLOWER * 0.9  # the stall doctor waited its limit
    names = ("VerlStallDoctorStalled", "VerlTrainingStalled")
    got = replay.alerts(tmp_path, [(a, t) for a in names for t in (step1, stalled)])
    for alert in names:
        assert not got[(alert, step1)], (alert, got[(alert, step1)])
        assert {a["verl_run_id"] for a in got[(alert, stalled)]} == {run_id}, (alert, got[(alert, stalled)])
    assert {a["severity"] for a in got[("VerlTrainingStalled", stalled)]} == {"warning", "critical"}


def test_slow_validations_are_no_stall_and_a_hung_one_is(hung_in_validation):
    run = hung_in_validation
    assert run.returncode == 124, run.output[-3000:]  # hung in step 2's validation, killed by the test
    assert sorted(run.console) == [0, 1]  # the validation before training and step 1 were logged
    # both finished validations took longer than the stall limit: the old rule called each a stall
    (initial,) = [s for s in run.spans if s.name == semconv.SPAN_VALIDATION]
    (testing,) = [s for s in run.spans if s.name == "verl.testing"]
    assert min(initial.seconds, testing.seconds) > STALL_AFTER, (initial.seconds, testing.seconds)
    stalled = [r for _, r in _records(run) if r.get("eventName") == semconv.EVENT_TRAINING_STALLED]
    assert len(stalled) == 1, [_attrs(r) for r in stalled]  # only the hang
    attrs = _attrs(stalled[0])
    assert int(attrs[semconv.ATTR_STEP]) == 2 and attrs[semconv.ATTR_STAGE] == "testing"
    # reported once the hung validation had run its usual time plus the limit, not before
    usual = statistics.median([initial.seconds, testing.seconds])
    assert float(attrs[semconv.ATTR_STALL_SECONDS]) > STALL_AFTER + usual - 5
    assert f"(limit {STALL_AFTER} s, step 2 in progress) in its validation" in run.output
