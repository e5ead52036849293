"""The on-disk spool's store (``otel_verl.spool.store``): files, order, bound, adoption, hostile folders.

Real files and real processes: a process that "dies with a spool" is a child that spools and ends
with ``os._exit`` (no atexit, what a SIGKILL or an OOM kill leaves); one that is "alive" holds its
locks until the test lets it go.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from otel_verl import semconv
from otel_verl.instruments import drops
from otel_verl.spool import stats as spool_stats
from otel_verl.spool import store as spool

HOST = "testhost"
BLOCK = 4096
# Where the test's "jobs" send: an endpoint and the headers they send (canonical form, as a sender makes it).
DEST = spool.Destination("http", "http://127.0.0.1:4318/v1/traces", b'[["authorization", "Bearer a"]]')

# A child process that spools three traces batches into ROOT and then dies (``die``) or waits
# for a line on stdin (``live``): prints its process folder's name first.
CHILD = textwrap.dedent(
    """
    import os, sys
    from otel_verl.spool import store as spool
    s = spool.Spool(sys.argv[1], 10 * spool.MIB, host=sys.argv[2])
    s.folder_name("traces", spool.Destination("http", sys.argv[4], sys.argv[5].encode()))
    for i in range(3):
        assert s.put("traces", "traces", b"batch-%d" % i)
    print(s.name, flush=True)
    if sys.argv[3] == "die":
        os._exit(0)
    sys.stdin.readline()
    """
)


def _child(root: Path, mode: str, host: str = HOST, dest: spool.Destination = DEST) -> subprocess.Popen:
    return subprocess.Popen(  # noqa: S603 - this interpreter, our script
        [sys.executable, "-c", CHILD, str(root), host, mode, dest.endpoint, dest.credentials.decode()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def _dead_spool(root: Path, host: str = HOST, dest: spool.Destination = DEST) -> str:
    """The process folder a child that died with three spooled batches left."""
    proc = _child(root, "die", host, dest)
    name = proc.stdout.readline().strip()
    assert proc.wait(60) == 0
    return name


def _drain(s: spool.Spool, signal: str = "traces", folder: str = "traces") -> list[bytes]:
    out = []
    while (entry := s.head(signal, folder)) is not None:
        body = s.read(entry)
        assert body is not None
        out.append(body)
        s.done(entry, semconv.SPOOL_RESENT, len(body))
    return out


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _spool(root: Path, max_bytes: int = spool.MIB, dest: spool.Destination | None = DEST) -> spool.Spool:
    """A process's spool with one traces exporter sending to ``dest``."""
    s = spool.Spool(str(root), max_bytes, host=HOST)
    assert s.folder_name("traces", dest) == "traces"
    return s


def _script(source: str, *args: str) -> object:
    """Run ``source`` in a fresh interpreter of this one with ``args``; what its last line printed (JSON)."""
    got = subprocess.run(  # noqa: S603 - this interpreter, our script
        [sys.executable, "-c", source, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=True,
    )
    return json.loads(got.stdout.splitlines()[-1])


def _du(root: Path) -> int:
    """What sits on disk under ``root`` (blocks), as ``du`` counts it."""
    return sum(p.lstat().st_blocks * 512 for p in root.rglob("*"))


def _blocks(n: int, fill: int) -> bytes:
    return bytes([fill]) * (n * BLOCK)


def test_nothing_is_written_before_a_batch_must_wait(tmp_path):
    root = tmp_path / "spool"
    s = spool.Spool(str(root), spool.MIB, host=HOST)
    assert s.adopt("traces") == 0 and s.pending("traces") == 0 and s.head("traces", "traces") is None
    s.close()
    assert not root.exists()


def test_each_batch_is_one_file_written_atomically_and_sent_oldest_first(tmp_path):
    root = tmp_path / "spool"
    s = spool.Spool(str(root), spool.MIB, host=HOST)
    bodies = [f"batch {i}".encode() for i in range(5)]
    for body in bodies[:3]:
        assert s.put("traces", "traces", body)
    assert s.put("metrics", "metrics", b"points")
    assert s.put("traces", "traces", bodies[3])
    folder = root / s.name / "traces"
    assert sorted(p.name for p in folder.iterdir()) == [
        "0000000000000001.pb",
        "0000000000000002.pb",
        "0000000000000003.pb",
        "0000000000000005.pb",
        "lock",
    ]  # no temporary file left, one sequence for the whole process
    assert stat.S_IMODE(root.stat().st_mode) == 0o700 and stat.S_IMODE((root / s.name).stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "0000000000000001.pb").stat().st_mode) == 0o600
    assert s.pending("traces") == 4 and s.own_bytes == sum(map(len, bodies[:4])) + len(b"points")
    assert _drain(s) == bodies[:4]
    assert _drain(s, "metrics", "metrics") == [b"points"]
    assert s.pending("traces") == 0 and s.own_bytes == 0
    counts = spool_stats.counts()
    assert counts[("traces", semconv.SPOOL_SPOOLED)] == (4, sum(map(len, bodies[:4])))
    assert counts[("traces", semconv.SPOOL_RESENT)] == counts[("traces", semconv.SPOOL_SPOOLED)]
    s.close()
    assert _tree(root) == []  # emptied folders are removed


def test_a_full_spool_drops_the_oldest_first_whatever_the_signal_counted_and_said_once(tmp_path, caplog):
    root = tmp_path / "spool"
    s = spool.Spool(str(root), spool.MIB, host=HOST)
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        assert s.put("metrics", "metrics", _blocks(2, 0))  # the oldest
        for i in range(1, 4):
            assert s.put("traces", "traces", _blocks(2, i))
        s.max_bytes = _du(root)  # full now: each new batch makes room first
        for i in range(4, 6):
            assert s.put("traces", "traces", _blocks(2, i))
            assert _du(root) <= s.max_bytes
    # the metrics batch went first, then the first traces batch
    assert _drain(s, "metrics", "metrics") == []
    assert _drain(s) == [_blocks(2, i) for i in range(2, 6)]
    counts = spool_stats.counts()
    assert counts[("metrics", semconv.SPOOL_DROPPED)] == (1, 2 * BLOCK)
    assert counts[("traces", semconv.SPOOL_DROPPED)] == (1, 2 * BLOCK)
    assert drops.counts()[semconv.DROPPED_SPOOL] >= 2
    said = [r.getMessage() for r in caplog.records if "OTEL_VERL_SPOOL_MAX_MB, oldest first" in r.getMessage()]
    assert len(said) == 1, said


def test_a_batch_larger_than_the_bound_is_dropped_and_nothing_else(tmp_path):
    s = spool.Spool(str(tmp_path / "spool"), 12 * BLOCK, host=HOST)
    assert s.put("traces", "traces", b"a" * 100)
    assert not s.put("traces", "traces", b"b" * (12 * BLOCK + 1))
    assert _drain(s) == [b"a" * 100]
    assert spool_stats.counts()[("traces", semconv.SPOOL_DROPPED)] == (1, 12 * BLOCK + 1)


def test_the_batch_on_its_way_to_the_endpoint_is_not_dropped_for_room(tmp_path):
    root = tmp_path / "spool"
    s = spool.Spool(str(root), spool.MIB, host=HOST)
    assert s.put("traces", "traces", _blocks(1, 1))
    sending = s.head("traces", "traces")
    assert s.put("traces", "traces", _blocks(1, 2))
    s.max_bytes = _du(root)
    assert s.put("traces", "traces", _blocks(1, 3))  # no room: "2" goes, not "1" which is being sent
    assert s.read(sending) == _blocks(1, 1)
    s.done(sending, semconv.SPOOL_RESENT, BLOCK)
    assert _drain(s) == [_blocks(1, 3)]


def test_the_bound_holds_for_the_whole_root_across_processes(tmp_path, monkeypatch):
    """Six processes spool into one root: what sits on disk there, blocks counted, stays within the
    bound (not six bounds); each makes room from its own oldest batches; one with nothing of its own
    to remove drops its new batch instead of writing it."""
    monkeypatch.setattr(spool, "ROOT_SCAN_S", 0.0)  # every put measures the others (the test's worst case)
    root = tmp_path / "spool"
    bound = 40 * BLOCK
    procs = [_spool(root, bound) for _ in range(6)]
    for i in range(8):
        for p in procs:
            p.put("traces", "traces", _blocks(1, i))
            assert _du(root) <= bound, (i, _du(root))
    assert _du(root) > bound - 8 * BLOCK  # full, not empty: each kept its newest
    late = _spool(root, bound)  # nothing of its own to remove, and the others' are theirs
    dropped = spool_stats.counts()[("traces", semconv.SPOOL_DROPPED)][0]
    assert not late.put("traces", "traces", _blocks(1, 9))
    assert spool_stats.counts()[("traces", semconv.SPOOL_DROPPED)][0] == dropped + 1
    assert _du(root) <= bound
    for p in procs:
        left = _drain(p)
        assert left and left == sorted(left), left  # the newest of each stayed, in order


def test_dead_folders_the_process_adopted_make_room_oldest_first_others_never(tmp_path):
    root = tmp_path / "spool"
    mine = _dead_spool(root)  # adoptable: same destination
    other = _dead_spool(root, dest=spool.Destination("http", "http://elsewhere:4318/v1/traces", b"[]"))
    s = _spool(root)
    assert s.adopt("traces") == 3
    s.max_bytes = _du(root) + 3 * BLOCK  # room for its own new folders and one block of the three batches
    assert s.put("traces", "traces", b"new")  # the oldest it may touch: the adopted folder's first
    left = sorted(p.name for p in (root / mine / "traces").glob("*.pb"))
    assert left == ["0000000000000002.pb", "0000000000000003.pb"]
    assert len(list((root / other / "traces").glob("*.pb"))) == 3  # another job's: never touched
    assert _drain(s) == [b"new", b"batch-1", b"batch-2"]


def test_a_dead_processs_spool_is_taken_by_the_next_process_of_the_host(tmp_path):
    root = tmp_path / "spool"
    dead = _dead_spool(root)
    other_host = _dead_spool(root, host="otherhost")
    s = _spool(root)
    assert s.adopt("metrics") == 0  # only what it has an exporter for
    assert s.adopt("traces") == 3
    assert s.adopt("traces") == 0  # taken once
    assert _drain(s) == [b"batch-0", b"batch-1", b"batch-2"]
    assert not (root / dead).exists()  # sent: removed, its process folder with it
    assert (root / other_host / "traces").is_dir()  # another host's process may be alive: not ours to judge
    assert spool_stats.counts()[("traces", semconv.SPOOL_RESENT)] == (3, len(b"batch-0") * 3)


def test_a_live_processs_spool_is_left_alone_and_taken_once_it_ended(tmp_path):
    root = tmp_path / "spool"
    proc = _child(root, "live")
    try:
        name = proc.stdout.readline().strip()
        s = _spool(root)
        assert s.adopt("traces") == 0
        assert s.head("traces", "traces") is None
    finally:
        proc.communicate("\n", timeout=60)
    assert s.adopt("traces") == 3
    assert _drain(s) == [b"batch-0", b"batch-1", b"batch-2"]
    assert not (root / name).exists()


def test_two_processes_never_take_the_same_spool(tmp_path):
    root = tmp_path / "spool"
    _dead_spool(root)
    first = _spool(root)
    second = _spool(root)  # its own lock descriptors, as another process
    assert first.adopt("traces") == 3
    assert second.adopt("traces") == 0
    first.close()  # handed back unsent (its process ended): the next one takes it
    assert second.adopt("traces") == 3


def test_a_symlinked_spool_root_turns_spooling_off_and_writes_nothing_there(tmp_path, caplog):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "spool").symlink_to(target)
    s = spool.Spool(str(tmp_path / "spool"), spool.MIB, host=HOST)
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        assert not s.put("traces", "traces", b"x")
        assert not s.put("traces", "traces", b"y")
    assert list(target.iterdir()) == []
    said = [r.getMessage() for r in caplog.records if "symlink" in r.getMessage()]
    assert len(said) == 1 and "spooling is off" in said[0], said
    assert spool_stats.counts()[("traces", semconv.SPOOL_DROPPED)] == (2, 2)


def test_planted_entries_in_a_dead_spool_are_never_followed_or_opened(tmp_path):
    root = tmp_path / "spool"
    dead = root / _dead_spool(root)
    secret = tmp_path / "secret"
    secret.write_bytes(b"not telemetry")
    folder = dead / "traces"
    (folder / "0000000000000000.pb").symlink_to(secret)  # oldest: would be read first
    os.mkfifo(folder / "0000000000000010.pb")  # a reader would wait for ever
    (folder / "0000000000000011.pb").write_bytes(b"x" * 2048)  # above this reader's limit
    (folder / "notes.txt").write_text("someone's file")  # not a spool name: never touched
    (folder / ".0000000000000012.pb.tmp").write_bytes(b"half a batch")  # a writer died mid-write
    s = _spool(root)
    assert s.adopt("traces") == 6  # the three batches and the three planted spool names
    assert not (folder / ".0000000000000012.pb.tmp").exists()
    got = []
    while (entry := s.head("traces", "traces")) is not None:
        body = spool.read_batch(entry.folder.dir_fd, entry.name, limit=1024)
        got.append(body)
        s.done(entry, semconv.SPOOL_RESENT if body else semconv.SPOOL_DROPPED, len(body or b""))
    assert got == [None, b"batch-0", b"batch-1", b"batch-2", None, None]
    assert secret.read_bytes() == b"not telemetry"  # the link was removed, never its target
    assert (folder / "notes.txt").read_text() == "someone's file"
    assert spool_stats.counts()[("traces", semconv.SPOOL_DROPPED)][0] == 3


def test_another_users_folders_are_not_taken(tmp_path, monkeypatch):
    root = tmp_path / "spool"
    _dead_spool(root)
    real = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: real + 1)  # every folder there now belongs to someone else
    s = _spool(root)
    assert s.adopt("traces") == 0
    assert not s.put("traces", "traces", b"x")  # nor is that root used


def test_a_forked_child_spools_into_its_own_folder_and_leaves_the_parents_alone(tmp_path):
    root = tmp_path / "spool"
    s = _spool(root)
    spool.use(s)
    assert s.put("traces", "traces", b"parent")
    parent_folder = s.name
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the fork hook gave it a spool of its own
        try:
            ok = s.put("traces", "traces", b"child") and s.name != parent_folder
            os.write(w, s.name.encode() if ok else b"-")
        finally:
            os._exit(0)
    os.close(w)
    child_folder = os.read(r, 200).decode()
    os.close(r)
    os.waitpid(pid, 0)
    assert child_folder not in ("", "-", parent_folder)
    assert (root / parent_folder / "traces" / "0000000000000001.pb").read_bytes() == b"parent"
    assert (root / child_folder / "traces" / "0000000000000001.pb").read_bytes() == b"child"
    # the parent still holds its lock (the child closed its copies): nobody takes the parent's
    other = _spool(root)
    assert other.adopt("traces") == 1  # the child's only (it ended)
    assert _drain(s) == [b"parent"]


def test_host_labels_are_folder_names(monkeypatch):
    assert spool.host_label("node-1.cluster.local") == "node-1.cluster.local"
    assert spool.host_label("../../etc") == "_.._etc"
    assert spool.host_label("a b/c\x00") == "a_b_c_"
    assert spool.host_label("") == "host"
    assert len(spool.host_label("x" * 300)) == 64


# A process with few descriptors (RLIMIT_NOFILE 64) that takes ROOT's dead folders and sends them:
# prints the most descriptors it ever held open, whether it could still open files while it held
# what it adopted, and how many batches it sent.
FEW_FDS = textwrap.dedent(
    """
    import json, os, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    from otel_verl import semconv
    from otel_verl.spool import store as spool
    s = spool.Spool(sys.argv[1], 64 * spool.MIB, host=sys.argv[2])
    s.folder_name("traces", spool.Destination("http", sys.argv[3], sys.argv[4].encode()))
    most, could_open, sent = 0, True, 0
    while True:
        s.adopt("traces")
        most = max(most, len(os.listdir("/proc/self/fd")))
        try:
            spare = [os.open("/dev/null", os.O_RDONLY) for _ in range(16)]  # the process's own work
            for fd in spare:
                os.close(fd)
        except OSError:
            could_open = False
        entry = s.head("traces", "traces")
        if entry is None:
            break
        while entry is not None:
            s.done(entry, semconv.SPOOL_RESENT, 1)
            sent += 1
            entry = s.head("traces", "traces")
    print(json.dumps({"most": most, "could_open": could_open, "sent": sent}))
    """
)


def test_hundreds_of_dead_folders_are_taken_a_few_at_a_time_within_few_descriptors(tmp_path):
    root = tmp_path / "spool"
    for i in range(150):  # 150 processes that ended with one batch each
        s = _spool(root, 64 * spool.MIB)
        assert s.put("traces", "traces", b"batch %d" % i)
        s.close()
    result = _script(FEW_FDS, str(root), HOST, DEST.endpoint, DEST.credentials.decode())
    assert result["sent"] == 150 and result["could_open"], result
    assert result["most"] <= 64 - 16, result
    assert not list(root.glob("*/traces"))


# A process that makes its spool folders while its descriptors run out (EMFILE at each step of
# making them, in turn), then has descriptors again: prints whether each later batch was written.
EMFILE = textwrap.dedent(
    """
    import errno, json, os, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    from otel_verl.spool import store as spool
    results = []
    for free in range(0, 6):
        s = spool.Spool(os.path.join(sys.argv[1], str(free)), spool.MIB, host="h")
        s.folder_name("traces", spool.Destination("http", "http://c:4318/v1/traces", b"[]"))
        held = []
        try:
            while True:
                held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as exc:
            assert exc.errno == errno.EMFILE
        for fd in held[len(held) - free:]:
            os.close(fd)
        held = held[: len(held) - free]
        first = s.put("traces", "traces", b"while out of descriptors")
        for fd in held:
            os.close(fd)
        later = [s.put("traces", "traces", b"later %d" % i) for i in range(2)]
        results.append([free, first, later])
    print(json.dumps(results))
    """
)


def test_running_out_of_descriptors_while_a_folder_is_made_does_not_turn_the_spool_off(tmp_path):
    results = _script(EMFILE, str(tmp_path))
    assert [r[0] for r in results] == [0, 1, 2, 3, 4, 5]
    assert any(not first for _, first, _ in results)  # some step of making the folders did fail
    assert all(later == [True, True] for _, _, later in results), results


def test_a_folder_records_its_destination_without_a_secret_and_only_that_destination_takes_it(tmp_path, caplog):
    root = tmp_path / "spool"
    url = "https://user:hunter2@collector:4318/v1/traces?api_key=k3y"
    dest = spool.Destination("http", url, b'[["authorization", "Bearer s3cret"]]')
    s = _spool(root, dest=dest)
    assert s.put("traces", "traces", b"batch")
    folder = root / s.name / "traces"
    record = folder / spool.RECORD
    text = record.read_text()
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert not any(secret in text for secret in ("hunter2", "k3y", "s3cret", "Bearer")), text
    s.close()  # ended
    others = [
        spool.Destination("http", url.replace("hunter2", "other"), dest.credentials),  # another user's URL
        spool.Destination("http", url, b'[["authorization", "Bearer other"]]'),  # another token
        spool.Destination("grpc", url, dest.credentials),  # another protocol
    ]
    with caplog.at_level(logging.INFO, logger="otel_verl"):
        for other in others:
            assert _spool(root, dest=other).adopt("traces") == 0
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "collector:4318" in said and not any(x in said for x in ("hunter2", "k3y", "s3cret")), said
    assert (folder / "0000000000000001.pb").exists()  # untouched
    same = _spool(root, dest=spool.Destination("http", url, dest.credentials))
    assert same.adopt("traces") == 1 and _drain(same) == [b"batch"]


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs (root only: CI and the developers' machines run as root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_loses_only_what_did_not_fit_and_the_spool_goes_on_once_there_is_room(small_disk):
    s = _spool(small_disk / "spool", max_bytes=spool.MIB)  # the bound is above the disk: the disk fills first
    dropped_before = spool_stats.counts().get(("traces", semconv.SPOOL_DROPPED), (0, 0))[0]
    written = [s.put("traces", "traces", _blocks(2, i)) for i in range(12)]  # 8 KiB each, 96 KiB in all
    assert written[0] and not all(written)  # ENOSPC stopped some
    kept = [_blocks(2, i) for i, ok in enumerate(written) if ok]
    assert not [p for p in _tree(small_disk / "spool") if p.endswith(".tmp")]  # no half batch left
    dropped = spool_stats.counts().get(("traces", semconv.SPOOL_DROPPED), (0, 0))[0] - dropped_before
    assert dropped == written.count(False)  # each batch that did not fit counted
    assert _drain(s) == kept  # what was written is whole, in order
    after = [_blocks(1, 0xA0 + i) for i in range(3)]
    assert [s.put("traces", "traces", body) for body in after] == [True, True, True]  # room again: spooling goes on
    assert _drain(s) == after
    s.close()


def test_the_walk_of_left_folders_takes_only_dead_ones_and_closes_what_it_hands_out(tmp_path):
    """``left_folders``, the walk adoption and ``otel-verl replay --spool`` share: a live process's
    folder cannot be taken, a dead one's can, and no descriptor outlives the walk but a kept one's."""
    dead = _dead_spool(tmp_path)
    live = _child(tmp_path, "live")
    live_name = live.stdout.readline().strip()
    try:
        root_fd = spool.open_dir(str(tmp_path))
        fds_before = len(os.listdir("/proc/self/fd"))
        taken, kept = {}, None
        for left in spool.left_folders(root_fd, sorted([dead, live_name])):
            taken[left.process] = (left.take(), left.record is not None and DEST.matches(left.record))
            if left.process == dead:
                assert left.batch_names() == sorted(left.batch_names()) and len(left.batch_names()) == 3
                kept = left.keep()
        assert taken == {dead: (True, True), live_name: (False, True)}
        assert len(os.listdir("/proc/self/fd")) == fds_before + 2  # the kept folder and its lock
        assert spool.try_lock(kept[0]) is None  # still held here: no other taker
        for fd in kept:
            spool.close_fd(fd)
        assert len(os.listdir("/proc/self/fd")) == fds_before
        spool.close_fd(root_fd)
    finally:
        live.stdin.write("\n")
        live.stdin.close()
        assert live.wait(60) == 0
