"""A stalled run's stacks in ``summary`` and ``report``: the latest report of each process, its
threads' innermost frames outside the standard library (one rule: ``run_facts.stall_reports``)."""

from __future__ import annotations

from offline_otlp_json import log_record, write_logs

from otel_verl import semconv
from otel_verl.offline.report import build, render
from otel_verl.offline.run_facts import stall_reports
from otel_verl.offline.summary import lines

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
