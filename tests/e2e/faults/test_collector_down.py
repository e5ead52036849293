"""The real verl trainer (CPU harness) with a Collector that is down or hung for the whole run.

Training must not notice: rc=0, verl's own console metrics have the same keys as an
instrumented run with the file exporters (same config), and the job's exit is not held up by an
export. The exit bound is derived from the timeouts configured for the run, not from another run
taken at another moment (the machine's load may change in between; Ray's own teardown, 15-30 s
here, stretches with it):

* the run's exporters get ``OTEL_EXPORTER_OTLP_TIMEOUT`` = ``EXPORT_TIMEOUT_S`` (60 s). Without
  otel-verl's bound (``OTEL_VERL_SHUTDOWN_TIMEOUT``, 2 s), the TaskRunner's flush at the end of
  training would wait for its exports to give up: on a hung endpoint each attempt takes the whole
  timeout; on a refused one an export retries with backoff 1, 2, 4, 8, 16 s (+-20 %), so it gives
  up after at least ``MIN_RETRY_BUDGET_S`` (24.8 s), and the flush waits for the span export and
  the metric export in turn. So the job's exit tail (verl's last step line to the job's end) stays
  below ``UNBOUNDED_FLUSH_S`` = 2 x 24.8 s, whatever Ray's teardown takes, if and only if the bound
  held (an unbounded flush adds at least that much to Ray's teardown);
* a send at the end that would take much of that budget is spooled instead (the endpoint is not
  answering in time: ``otel_verl.spool.exporters``), so the TaskRunner's flush ends within
  it, or says that it stopped waiting after exactly its budget (``telemetry flush did not finish
  within 2.0 s``, printed).

How much slower the exit is than the file-exporter run's is printed, not asserted (speed belongs
in the benchmarks: bench/README.md).

With the Collector refusing connections, every process spools what it cannot send
(``otel_verl.spool.store``) into a spool kept tiny here (``OTEL_VERL_SPOOL_MAX_MB``, 82 KiB for
the whole spool folder, every process together) so that it fills: training is unaffected all the
same (the checks above), what sits on disk in the folder (blocks) stays within the bound (give or
take what the processes wrote in the second within which they measure each other), the batches
each process kept are its newest (the oldest went first: what is left is the end of its
sequence), and the drops are counted where the endpoint will see them once it is back
(``otel_verl.spool.batches{outcome="dropped"}`` in the newest spooled metric batch).
"""

from __future__ import annotations

import re
import socket
import threading
from collections import Counter
from pathlib import Path

import pytest

from otel_verl import semconv
from otel_verl.spool import store as spool
from otel_verl.spool.resend import parse

pytestmark = pytest.mark.e2e

STEPS = 2
# What telemetry may add to a process's exit: the TaskRunner's end-of-training flush and its exit
# shutdown share OTEL_VERL_SHUTDOWN_TIMEOUT.
SHUTDOWN_TIMEOUT_S = 2.0
EXPORT_TIMEOUT_S = 60.0  # OTEL_EXPORTER_OTLP_TIMEOUT: longer than an export's whole retry schedule
MIN_RETRY_BUDGET_S = (1 + 2 + 4 + 8 + 16) * 0.8  # a refused export's backoff before its last attempt, -20 %
UNBOUNDED_FLUSH_S = 2 * MIN_RETRY_BUDGET_S  # the least an unbounded flush waits: spans, then metrics
SPOOL_MAX_MB = 0.08  # the whole spool folder: a 2-step run spools about twice that (the TaskRunner)
# Each process measures the others' spools at most once a second (spool.ROOT_SCAN_S): what they
# write meanwhile may pass the bound by that much.
SPOOL_SLACK_BYTES = 64 * 1024


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: connections are refused


class HungCollector:
    """Accepts TCP connections on 127.0.0.1 and never answers (reads and discards)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._conns: list[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self._conns.append(conn)
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    @staticmethod
    def _drain(conn: socket.socket) -> None:
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass

    def close(self) -> None:
        self._stop = True
        self.sock.close()
        for c in self._conns:
            c.close()


def _otlp_env(port: int) -> dict[str, str]:
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_METRIC_EXPORT_INTERVAL": "5000",
        "OTEL_VERL_SHUTDOWN_TIMEOUT": str(SHUTDOWN_TIMEOUT_S),
        "OTEL_EXPORTER_OTLP_TIMEOUT": str(int(EXPORT_TIMEOUT_S)),
    }


@pytest.fixture(scope="module")
def reference(verl_runs):
    """The same config with the file exporters (shared with tests/e2e: no extra run)."""
    run = verl_runs.get("v0", "grpo", steps=STEPS)
    assert run.returncode == 0, run.output[-4000:]
    return run


def _assert_unaffected(run, reference, what: str) -> None:
    assert run.returncode == 0, run.output[-4000:]
    steps = set(range(1, STEPS + 1))
    assert steps <= set(run.console) and steps <= set(reference.console)
    # step 0 (val_before_train) is compared when both consoles have it: Ray's log forwarding
    # sometimes loses that line next to the progress bar, with or without telemetry.
    for n in sorted(steps | (set(run.console) & set(reference.console) & {0})):
        assert set(run.console[n]) == set(reference.console[n]), (n, set(run.console[n]) ^ set(reference.console[n]))
    print(
        f"\n{what}: exit tail {run.exit_tail_s:.1f} s vs file-exporter run {reference.exit_tail_s:.1f} s; "
        f"job {run.wall_s:.1f} s vs {reference.wall_s:.1f} s; step time "
        + ", ".join(
            f"{run.console[n]['timing_s/step']:.2f}/{reference.console[n]['timing_s/step']:.2f} s"
            for n in sorted(steps)
        )
    )
    assert run.spans == [] and run.points == []  # nothing went to files: the OTLP exporters were used
    # The TaskRunner's end-of-training flush either finished within its budget (a send that takes
    # part of it is spooled instead: otel_verl.spool.exporters.closing) or said, on its own
    # clock, that it stopped waiting after exactly that budget ...
    stopped = [line for line in run.output.splitlines() if _FLUSH_CUT.search(line)]
    print(f"  flush cut at the budget in: {sorted({line.split(')')[0] + ')' for line in stopped})}")
    # ... and nothing held the exit for an export: an unbounded wait adds UNBOUNDED_FLUSH_S.
    assert run.exit_tail_s is not None
    assert run.exit_tail_s < UNBOUNDED_FLUSH_S, (run.exit_tail_s, reference.exit_tail_s)


_FLUSH_CUT = re.compile(rf"telemetry flush did not finish within {SHUTDOWN_TIMEOUT_S:.1f} s; continuing")


# A console line of the OTLP exporter's about a failed attempt, as Ray forwards it.
_EXPORT_FAILURE = re.compile(r"\((\w+) pid=(\d+)\).*?(Transient error|Failed to export)")


def test_collector_refusing_connections_for_the_whole_run(verl_runs, reference):
    env = {**_otlp_env(_closed_port()), "OTEL_VERL_SPOOL_MAX_MB": str(SPOOL_MAX_MB)}
    run = verl_runs.get("v0", "grpo", steps=STEPS, env=env)
    _assert_unaffected(run, reference, "collector down, spool full")
    _assert_spool_full_of_the_newest(run.telemetry_dir / "spool")
    # The user is told, once per process and kind: every export's retries alternate "Transient
    # error ..." and "Failed to export ...", which the SDK's DuplicateFilter lets through, one line
    # a second per process over the whole outage (otel_verl.process.sdk_log_throttle).
    lines = [line for line in run.output.splitlines() if _EXPORT_FAILURE.search(line)]
    assert lines, run.output[-4000:]
    # Lines with "[otel-verl: N more like this ...]" come 5 minutes after a process's first, if ever.
    # Ray may fold one process's line into another's "[repeated Nx across cluster]": never more.
    matches = [_EXPORT_FAILURE.search(line) for line in lines if "more like this" not in line]
    first = Counter(m.groups() for m in matches if m is not None)  # (role, pid, kind)
    assert max(first.values()) == 1, lines  # before the throttle: up to 4 in a 2-step run, 7 in 30 steps


def test_collector_hung_for_the_whole_run(verl_runs, reference):
    server = HungCollector()
    try:
        run = verl_runs.get("v0", "grpo", steps=STEPS, env=_otlp_env(server.port))
    finally:
        server.close()
    assert server.accepted > 0  # the exporters did reach it and were left hanging
    _assert_unaffected(run, reference, "collector hung")


def _assert_spool_full_of_the_newest(root: Path) -> None:
    """The spool folder within its bound; each process's spool the end of its sequence, its drops counted."""
    bound = int(SPOOL_MAX_MB * spool.MIB)
    on_disk = sum(p.lstat().st_blocks * 512 for p in root.rglob("*"))
    folders = [p for p in root.iterdir() if spool.is_process_folder(p.name)]
    assert folders, f"nothing was spooled in {root}"
    full = 0
    counted: list[int | None] = []  # each full process's drops, as its newest spooled metric batch says
    for proc in folders:
        files = sorted(proc.glob("*/*.pb"), key=lambda p: p.name)
        kept = {int(p.name[:16]) for p in files}
        # the oldest of each signal may have been on its way to the endpoint when room was made: kept
        heads = {
            min(int(p.name[:16]) for p in folder.glob("*.pb")) for folder in proc.iterdir() if list(folder.glob("*.pb"))
        }
        dropped = set(range(1, max(kept, default=0) + 1)) - kept
        assert not dropped or not kept - heads or max(dropped) < min(kept - heads), (proc.name, sorted(kept))
        if dropped:
            full += 1
            metrics = [p for p in files if p.parent.name.startswith("metrics")]
            counted.append(_dropped_counted(metrics[-1]) if metrics else None)
    print(
        f"  spool full: {full} of {len(folders)} processes dropped their oldest batches; {on_disk} bytes on disk "
        f"(bound {bound} for the folder); drops counted in their newest spooled metric batch: {counted}"
    )
    assert on_disk <= bound + SPOOL_SLACK_BYTES, (on_disk, bound)
    assert full > 0, "no process filled its spool: a larger run or a smaller OTEL_VERL_SPOOL_MAX_MB"
    assert any(c for c in counted), counted  # the drops travel with the metrics, for the endpoint to see


def _dropped_counted(path: Path) -> int | None:
    """``otel_verl.spool.batches{outcome=dropped}`` in a spooled metric batch (None: not in it yet)."""
    request = parse("metrics", path.read_bytes())
    assert request is not None, path
    found = None
    for rm in request.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name != semconv.M_SPOOL_BATCHES:
                    continue
                for p in m.sum.data_points:
                    attrs = {a.key: a.value.string_value for a in p.attributes}
                    if attrs.get(semconv.ATTR_SPOOL_OUTCOME) == semconv.SPOOL_DROPPED:
                        found = (found or 0) + p.as_int
    return found
