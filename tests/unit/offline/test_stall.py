"""A stalled run's stacks in ``summary`` and ``report``: the latest report of each process, its
threads' innermost frames outside the standard library (one rule: ``stall.stall_reports``)."""

from __future__ import annotations

from support.otlp_json import log_record, write_logs

from otel_verl import semconv
from otel_verl.offline.facts.stall import stall_reports
from otel_verl.offline.report import build, render
from otel_verl.offline.run.text import lines

STUCK = """Thread "asyncio_0" (ident 1):
  File "/usr/lib/python3.11/threading.py", line 1002, in _bootstrap
    self._bootstrap_inner()
  File "/srv/harness/hfcpu.py", line 42, in _stuck_in_generate
    threading.Event().wait()
  File "/usr/lib/python3.11/threading.py", line 629, in wait
    signaled = self._cond.wait(timeout)

Thread "OtelBatchLogRecordProcessor" (ident 2):
  File "/usr/lib/python3.11/threading.py", line 331, in wait
    gotit = waiter.acquire(True, timeout)
"""
WAITING = """Thread "MainThread" (ident 3):
  File "/srv/verl/trainer/ppo/ray_trainer.py", line 1500, in fit
    self.generate()
  File "/srv/verl/utils/ray_utils.py", line 123, in wrapper
    return future.result()
"""


TRACE = "ab" * 8  # log_record writes it twice: a 32-digit trace id


def _stalled_run(folder):
    stacks = semconv.EVENT_STALL_STACKS
    write_logs(
        folder,
        "taskrunner",
        10,
        [
            log_record(semconv.EVENT_TRAINING_STALLED, "no step", 30.0, verl__step=2, verl__stall__seconds=31.0),
            log_record(
                stacks, WAITING, 31.0, TRACE, verl__step=2, verl__stall__episode=1, ray__actor__class="TaskRunner"
            ),
        ],
    )
    old = log_record(stacks, "old", 31.0, TRACE, verl__step=2, verl__stall__episode=1, ray__actor__class="HFCPUServer")
    new = log_record(stacks, STUCK, 46.0, TRACE, verl__step=2, verl__stall__episode=1, ray__actor__class="HFCPUServer")
    write_logs(folder, "ray_actor", 20, [old, new])


def test_the_latest_report_of_each_process_and_where_its_threads_are(tmp_path):
    _stalled_run(tmp_path)
    from otel_verl.offline.otlp_files import read_log_records

    stalled, reports = stall_reports(read_log_records(tmp_path))
    assert len(stalled) == 1 and [r.process for r in reports] == [
        "TaskRunner (taskrunner) pid 10 on node1",
        "HFCPUServer (ray_actor) pid 20 on node1",
    ]
    server = reports[1]
    assert server.stacks == STUCK  # the later of its two reports
    assert server.where() == ['Thread "asyncio_0": "/srv/harness/hfcpu.py", line 42, in _stuck_in_generate']


def test_summary_and_report_show_the_stall(v1_run):
    _stalled_run(v1_run)
    text = "\n".join(lines(build(v1_run)))
    assert "STALLED at step 2: no training step finished for 31 s" in text
    assert "HFCPUServer (ray_actor) pid 20 on node1:" in text and "in _stuck_in_generate" in text
    assert "OtelBatchLogRecordProcessor" not in text  # telemetry's own threads are not the story
    html = render(build(v1_run))
    assert '<section id="stall"><h2>Stalled at step 2</h2>' in html
    assert "_stuck_in_generate" in html and "verl/utils/ray_utils.py" in html


def test_a_healthy_run_has_no_stall_section(v1_run):
    assert "STALLED" not in "\n".join(lines(build(v1_run)))
    assert 'id="stall"' not in render(build(v1_run))


def test_summary_says_what_the_stalled_v1_wait_waited_for(v1_run):
    """The stalled record of a trainer inside v1's wait (``hooks.waiting_for``): its counts and the
    oldest groups in flight, one line under the STALLED line; a uid is printed as text that shows as itself."""
    record = log_record(
        semconv.EVENT_TRAINING_STALLED,
        "no step",
        30.0,
        verl__step=2,
        verl__stall__seconds=31.0,
        verl__wait__for="rollouts",
        verl__wait__partition="train",
        verl__wait__elapsed=29.4,
        verl__wait__needed=4,
        verl__wait__finished=0,
        verl__wait__pending=1,
        verl__wait__running=3,
        verl__wait__failed=0,
        verl__wait__oldest__uids=["u-1", "u-2", "u-\x1b[31m"],
        verl__wait__oldest__states=["running", "running", "pending"],
        verl__wait__oldest__steps=[2, 2, 2],
        verl__wait__oldest__ages=[28.2, 27.0, 0.0],
        verl__wait__oldest__replicas=["10.0.0.4:8000", "", ""],
    )
    write_logs(v1_run, "taskrunner", 10, [record])
    text = lines(build(v1_run))
    at = next(i for i, line in enumerate(text) if line.startswith("STALLED at step 2"))
    assert text[at + 1] == (
        "  the trainer was waiting for rollouts (train) for 29 s: 0 of 4 needed groups finished, 1 pending, "
        "3 running, 0 failed; oldest in flight: u-1 (running 28 s on 10.0.0.4:8000, step 2), "
        "u-2 (running 27 s, step 2), u-\\x1b[31m (pending, step 2)"
    )
