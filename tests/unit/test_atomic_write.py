"""``commands.atomic.write_file``: the file comes out as ``open`` would make it, and the process's
umask is never touched (setting it, even briefly, changes it for every other thread)."""

from __future__ import annotations

import os
import threading

import pytest

from otel_verl import atomic


@pytest.fixture
def umask_027():
    old = os.umask(0o027)  # the test's own, known umask (restored after)
    yield 0o027
    os.umask(old)


def test_the_file_gets_the_umasks_mode_without_the_umask_being_set(umask_027, tmp_path, monkeypatch):
    calls = []
    real = os.umask
    monkeypatch.setattr(os, "umask", lambda mask: calls.append(mask) or real(mask))
    seen = []
    done = threading.Event()

    def other_thread():  # files another thread creates meanwhile keep the process's umask
        n = 0
        while not done.is_set():
            p = tmp_path / "other" / f"f{n % 50}"
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            seen.append(os.fstat(fd).st_mode & 0o777)
            os.close(fd)
            os.unlink(p)
            n += 1

    (tmp_path / "other").mkdir()
    thread = threading.Thread(target=other_thread)
    thread.start()
    try:
        for i in range(200):
            atomic.write_file(tmp_path / "marker.json", f"{i}\n".encode())
    finally:
        done.set()
        thread.join()
    assert calls == []  # never set, not even to read it
    out = tmp_path / "marker.json"
    assert out.read_text() == "199\n"
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~umask_027)  # as open() would have made it
    assert seen and set(seen) == {0o666 & ~umask_027}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["marker.json", "other"]  # no temporary left


def test_a_link_at_the_temporary_names_place_is_never_followed(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_text("the user's file")
    names = iter(["aaaa", "bbbb"])
    monkeypatch.setattr(atomic.secrets, "token_hex", lambda n: next(names))
    (tmp_path / ".out.aaaa.tmp").symlink_to(victim)  # planted at the first name tried
    atomic.write_file(tmp_path / "out", b"new")
    assert victim.read_text() == "the user's file" and (tmp_path / "out").read_bytes() == b"new"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "out"
    out.write_text("old")

    def chunks():
        yield b"half"
        raise OSError("disk full")

    with pytest.raises(OSError):
        atomic.write_file(out, chunks())
    assert out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out"]
