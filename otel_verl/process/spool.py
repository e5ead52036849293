"""The on-disk spool: OTLP export batches the endpoint did not take, kept until it takes them.

A spooling exporter (``spool_export``) hands this store the OTLP protobuf request of each batch it
could not send; a background thread re-sends them, oldest first, and removes each one only once
the endpoint accepted it. Layout under the spool root (``config.spool_root``:
``OTEL_VERL_SPOOL_DIR``, default ``<OTEL_VERL_FILE_DIR>/spool``), nothing of it created before a
first batch must wait (a healthy process writes nothing):

    <root>/                                  0700, owned by the user
        <host>.<pid>.<start ns>/             one folder per process (0700)
            traces/  metrics/  logs/         one per exporter of a signal (``traces-2``: a second one)
                lock                         flock()ed by its process as long as it lives
                0000000000000001.pb ...      one Export*ServiceRequest per file, oldest first

* **Atomic, durable.** A batch is written to a temporary name, fsync()ed, renamed into place, and
  the folder fsync()ed: a reader never sees half a batch, and a batch survives a reboot.
* **Bounded.** At most ``OTEL_VERL_SPOOL_MAX_MB`` per process, all signals together: the oldest
  batches go first (counted, said once: ``drops``; ``spool_stats``).
* **Adopted when its process dies.** A process holds the lock of each of its signal folders until
  it exits. Another verl process of the same host (``adopt``: when its pipeline starts, and while
  it re-sends a spool of its own) takes a folder whose lock it can take (its process is gone:
  flock() locks end with the process, pid reuse cannot fool it, and two processes never take the
  same folder), sends what is in it and removes it. ``otel-verl replay --spool`` does the same
  from the command line.
* **Hostile input.** The root is on a machine other users share: it must be a real folder owned by
  this user (a planted symlink or someone else's folder turns the spool off, said once). Every
  folder is opened relative to its parent's descriptor without following symlinks
  (``O_NOFOLLOW``), folders and files of another user are skipped, only regular files whose names
  are spool names are read, each up to ``MAX_FILE_BYTES``; what cannot be read is removed (counted
  as dropped). Names of unknown files are never touched.

Every method is safe to call from any thread; nothing here raises into an exporter (``OSError``
ends as a warning and a count), and nothing here blocks on the network.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import logging
import os
import re
import socket
import stat
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from otel_verl import semconv
from otel_verl._safe import warn_once
from otel_verl.config import settings, spool_root
from otel_verl.process import drops, spool_stats

_log = logging.getLogger(__name__)

MIB = 1024 * 1024
# One OTLP request: the SDK's OTLP/HTTP exporters refuse to send more than 64 MiB (max_request_size).
MAX_FILE_BYTES = 64 * MIB
MAX_FOLDERS = 10_000  # process folders looked at per scan of the root
MAX_FILES = 1_000_000  # batch files listed per adopted folder
LOCK = "lock"
# An empty process folder this much older than its name says is one whose process is gone (a live
# one has its first signal folder in it microseconds after making it).
EMPTY_FOLDER_AGE_S = 60.0
_FILE = re.compile(r"[0-9]{16}\.pb")
_TMP = re.compile(r"\.[0-9]{16}\.pb\.tmp")
_SIGNAL_DIR = re.compile(r"(traces|metrics|logs)(-[0-9]{1,4})?")
_PROCESS_DIR = re.compile(r"(?P<host>[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63})\.(?P<pid>[0-9]{1,10})\.(?P<ns>[0-9]{1,20})")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Unusable(OSError):
    """The spool root cannot be used safely (a symlink, another user's folder)."""


def host_label(name: str | None = None) -> str:
    """This host's name as a folder name: characters outside ``[A-Za-z0-9_.-]`` become ``_``, at most 64."""
    raw = socket.gethostname() if name is None else name
    label = re.sub(r"[^A-Za-z0-9_.-]", "_", raw)[:64].lstrip(".")
    return label or "host"


def signal_of(folder_name: str) -> str | None:
    """``traces`` for a signal folder called ``traces`` or ``traces-2``; None for any other name."""
    m = _SIGNAL_DIR.fullmatch(folder_name)
    return m.group(1) if m else None


def open_dir(name: str, dir_fd: int | None = None) -> int:
    """A descriptor of folder ``name`` (relative to ``dir_fd``), not following a symlink; ``OSError``
    when it is not a folder of this user."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            raise Unusable(errno.EPERM, "owned by another user", name)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_batch(dir_fd: int, name: str, limit: int = MAX_FILE_BYTES) -> bytes | None:
    """The bytes of spool file ``name`` in ``dir_fd``: a regular file of this user of at most
    ``limit`` bytes, not through a symlink; None for anything else (or when it is gone)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > limit:
            return None
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(MIB, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return None if size > limit else b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def batch_names(dir_fd: int, limit: int = MAX_FILES) -> list[str]:
    """The spool files of a folder, oldest first (at most ``limit``); a writer's leftover temporary
    files (its process died while writing) are removed."""
    names = []
    for name in os.listdir(dir_fd):
        if _FILE.fullmatch(name):
            names.append(name)
        elif _TMP.fullmatch(name):
            unlink(name, dir_fd)
    names.sort()
    return names[:limit]


def try_lock(dir_fd: int) -> int | None:
    """The descriptor of the folder's lock, flock()ed here; None when another process holds it
    (it is alive) or there is no usable lock file."""
    try:
        fd = os.open(LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise OSError(errno.EPERM, "not a lock file of this user")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def remove_folder(parent_fd: int, name: str, dir_fd: int, lock_fd: int | None) -> bool:
    """Remove an emptied signal folder (its lock last), then its process folder if that is empty too."""
    unlink(LOCK, dir_fd)
    try:
        os.rmdir(name, dir_fd=parent_fd)
    except OSError:
        return False
    finally:
        for fd in (dir_fd, lock_fd):
            if fd is not None:
                close_fd(fd)
    return True


def unlink(name: str, dir_fd: int) -> None:
    """Remove ``name`` in ``dir_fd`` (never through a symlink); gone already is fine."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def process_folders(root_fd: int, host: str | None = None) -> Iterator[str]:
    """Names of the process folders in the root (of ``host`` only, when given), oldest name first."""
    names = sorted(n for n in os.listdir(root_fd) if _PROCESS_DIR.fullmatch(n))
    for name in names[:MAX_FOLDERS]:
        if host is None or name.rpartition(".")[0].rpartition(".")[0] == host:
            yield name


def is_process_folder(name: str) -> bool:
    """Whether ``name`` is a process folder's name (``<host>.<pid>.<start ns>``)."""
    return _PROCESS_DIR.fullmatch(name) is not None


def _age_s(process_folder: str) -> float:
    """Seconds since the process of a folder called ``<host>.<pid>.<start ns>`` made it."""
    return (time.time_ns() - int(process_folder.rpartition(".")[2])) / 1e9


@dataclass(eq=False)
class Folder:
    """One signal folder, this process's own or adopted: its descriptors and files, oldest first."""

    signal: str
    name: str  # traces, traces-2
    process: str  # the process folder's name
    dir_fd: int
    lock_fd: int | None
    parent_fd: int  # the process folder
    own: bool
    files: deque[tuple[str, int]] = field(default_factory=deque)  # (name, size); size -1: not known yet


@dataclass(frozen=True, eq=False)
class Entry:
    """One spooled batch, handed to a re-sender (``Spool.head``) until it says what became of it."""

    folder: Folder
    name: str
    size: int


class Spool:
    """This process's spool root: its own signal folders, and those it adopted."""

    def __init__(self, root: str, max_bytes: int, host: str | None = None) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.host = host_label(host)
        self._lock = threading.RLock()
        self._root_fd: int | None = None
        self._proc_fd: int | None = None
        self._own: dict[str, Folder] = {}  # folder name -> folder
        self._adopted: dict[str, list[Folder]] = {s: [] for s in semconv.SIGNALS}
        self._adopted_names: set[tuple[str, str]] = set()  # (process folder, signal folder)
        self._busy: set[tuple[int, str]] = set()  # (id(folder), file) being re-sent
        self._bytes = 0  # of this process's own files
        self._seq = 0
        self._keys: dict[str, int] = {}  # signal -> handles made
        self._broken: str | None = None
        self._new_name()

    def _new_name(self) -> None:
        self.name = f"{self.host}.{os.getpid()}.{time.time_ns()}"

    # ------------------------------------------------------------------ handles
    def folder_name(self, signal: str) -> str:
        """A signal folder name of this process not handed out yet (``traces``, then ``traces-2``)."""
        with self._lock:
            n = self._keys[signal] = self._keys.get(signal, 0) + 1
            return signal if n == 1 else f"{signal}-{n}"

    @property
    def own_bytes(self) -> int:
        return self._bytes

    def pending(self, folder_name: str) -> int:
        """This process's batches waiting in folder ``folder_name``."""
        with self._lock:
            own = self._own.get(folder_name)
            return len(own.files) if own is not None else 0

    def waiting(self, signal: str, folder_name: str) -> int:
        """Batches a handle could re-send now: its own, then what this process adopted of ``signal``."""
        with self._lock:
            own = self._own.get(folder_name)
            return (len(own.files) if own is not None else 0) + sum(len(f.files) for f in self._adopted[signal])

    # ------------------------------------------------------------------ writing
    def put(self, signal: str, folder_name: str, body: bytes) -> bool:
        """Spool one batch (``body``: the OTLP request) of ``signal``; False when it could not be
        written (said once; counted as dropped). Makes room first: the oldest batches of this
        process go, whatever their signal, until the new one fits the bound."""
        size = len(body)
        victims: list[tuple[str, int]] = []
        with self._lock:
            written = False
            if size <= self.max_bytes:
                while self._bytes + size > self.max_bytes:
                    victim = self._oldest_own()
                    if victim is None:
                        break  # only batches on their way to the endpoint are left: this one goes over
                    folder, item = victim
                    folder.files.remove(item)
                    unlink(item[0], folder.dir_fd)
                    self._bytes -= item[1]
                    victims.append((folder.signal, item[1]))
                written = self._write(signal, folder_name, body)
            queued = sum(len(f.files) for f in self._own.values())
        if not written:
            victims.append((signal, size))  # too large for the bound alone, or not writable
        for victim_signal, nbytes in victims:
            spool_stats.count(victim_signal, semconv.SPOOL_DROPPED, nbytes)
            drops.dropped(semconv.DROPPED_SPOOL, queued)
        if written:
            spool_stats.count(signal, semconv.SPOOL_SPOOLED, size)
            warn_once(
                "spooling",
                "the OTLP endpoint did not take a batch of %s; spooling to %s until it answers again "
                "(at most %.0f MiB for this process; OTEL_VERL_SPOOL_MAX_MB)",
                signal,
                self.root,
                self.max_bytes / MIB,
            )
        return written

    def _oldest_own(self) -> tuple[Folder, tuple[str, int]] | None:
        best: tuple[Folder, tuple[str, int]] | None = None
        for folder in self._own.values():
            for item in itertools.islice(folder.files, 2):  # the head may be on its way to the endpoint
                if (id(folder), item[0]) in self._busy:
                    continue
                if best is None or item[0] < best[1][0]:
                    best = (folder, item)
                break
        return best

    def _write(self, signal: str, folder_name: str, body: bytes) -> bool:
        try:
            folder = self._own_folder(signal, folder_name)
            self._seq += 1
            name = f"{self._seq:016d}.pb"
            tmp = f".{name}.tmp"
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder.dir_fd
            )
            try:
                view = memoryview(body)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=folder.dir_fd, dst_dir_fd=folder.dir_fd)
            os.fsync(folder.dir_fd)
        except Unusable:
            return False  # said once already: spooling is off here
        except OSError as exc:
            if "tmp" in locals():
                unlink(tmp, folder.dir_fd)
            warn_once(
                f"spool write {type(exc).__name__}",
                "could not write to the telemetry spool %s (%s); a batch the endpoint did not take is lost",
                self.root,
                exc,
            )
            return False
        folder.files.append((name, len(body)))
        self._bytes += len(body)
        return True

    def _own_folder(self, signal: str, folder_name: str) -> Folder:
        folder = self._own.get(folder_name)
        if folder is not None:
            return folder
        if self._broken:
            raise Unusable(errno.EPERM, self._broken)
        if self._proc_fd is None:
            root_fd = self._open_root(create=True)
            os.mkdir(self.name, 0o700, dir_fd=root_fd)
            self._proc_fd = open_dir(self.name, root_fd)
        # Made under a temporary name and locked before it is renamed into place: no other process
        # can ever take a signal folder of a live one for its own.
        tmp = f".{folder_name}.new"
        try:
            os.mkdir(tmp, 0o700, dir_fd=self._proc_fd)
        except FileNotFoundError:  # our process folder is gone (removed by hand): a new one
            close_fd(self._proc_fd)
            self._proc_fd = None
            self._new_name()
            return self._own_folder(signal, folder_name)
        dir_fd = open_dir(tmp, self._proc_fd)
        try:
            lock_fd = os.open(
                LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
            )
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(tmp, folder_name, src_dir_fd=self._proc_fd, dst_dir_fd=self._proc_fd)
        except BaseException:
            os.close(dir_fd)
            raise
        folder = Folder(signal, folder_name, self.name, dir_fd, lock_fd, self._proc_fd, own=True)
        self._own[folder_name] = folder
        return folder

    def _open_root(self, create: bool) -> int:
        if self._root_fd is not None:
            return self._root_fd
        try:
            if create:
                os.makedirs(self.root, mode=0o700, exist_ok=True)
            self._root_fd = open_dir(self.root)
        except Unusable as exc:
            self._broken = f"the spool folder {self.root} is {exc.strerror}"
            warn_once("spool root", "%s: spooling is off in this process", self._broken)
            raise
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(self.root):  # O_NOFOLLOW
                self._broken = f"the spool folder {self.root} is a symlink"
                warn_once("spool root", "%s: spooling is off in this process", self._broken)
                raise Unusable(errno.ELOOP, self._broken) from None
            raise
        return self._root_fd

    # ------------------------------------------------------------------ re-sending
    def head(self, signal: str, folder_name: str) -> Entry | None:
        """The oldest batch to re-send for this handle: its own first, then what this process
        adopted of ``signal``; None when nothing waits. It stays where it is (and is not dropped
        for room) until ``done`` or ``release``."""
        with self._lock:
            folders = [self._own[folder_name]] if folder_name in self._own else []
            for folder in [*folders, *self._adopted.get(signal, [])]:
                for name, size in itertools.islice(folder.files, 2):
                    if (id(folder), name) not in self._busy:
                        self._busy.add((id(folder), name))
                        return Entry(folder, name, size)
                    # a second handle of this signal sends the head: take the next
        return None

    def read(self, entry: Entry) -> bytes | None:
        return read_batch(entry.folder.dir_fd, entry.name)

    def release(self, entry: Entry) -> None:
        """``entry`` could not be sent now: it stays, oldest first."""
        with self._lock:
            self._busy.discard((id(entry.folder), entry.name))

    def done(self, entry: Entry, outcome: str, nbytes: int) -> None:
        """``entry`` is finished with (``outcome``: resent, rejected, dropped): remove it, count it."""
        folder = entry.folder
        with self._lock:
            self._busy.discard((id(folder), entry.name))
            for item in folder.files:
                if item[0] == entry.name:
                    folder.files.remove(item)
                    if folder.own:
                        self._bytes -= item[1]
                    break
            else:
                return  # gone already (dropped for room, or the spool was handed back)
            unlink(entry.name, folder.dir_fd)
            if not folder.own and not folder.files:
                self._forget_adopted(folder)
        spool_stats.count(folder.signal, outcome, nbytes)
        if outcome == semconv.SPOOL_DROPPED:
            drops.dropped(semconv.DROPPED_SPOOL, 0)

    def _forget_adopted(self, folder: Folder) -> None:
        self._adopted[folder.signal].remove(folder)
        remove_folder(folder.parent_fd, folder.name, folder.dir_fd, folder.lock_fd)
        try:
            os.rmdir(folder.process, dir_fd=self._root_fd)
        except OSError:
            pass  # other signals' folders are still in it
        close_fd(folder.parent_fd)

    # ------------------------------------------------------------------ adoption
    def adopt(self, signal: str) -> int:
        """Take the ``signal`` folders of dead processes of this host; the number of batches taken."""
        taken = 0
        with self._lock:
            if self._broken:
                return 0
            try:
                root_fd = self._open_root(create=False)
                names = list(process_folders(root_fd, self.host))
            except OSError:
                return 0  # no spool root (nothing ever waited here), or an unusable one
            for proc in names:
                if proc == self.name:
                    continue
                try:
                    proc_fd = open_dir(proc, root_fd)
                except OSError:
                    continue
                try:
                    subs = sorted(n for n in os.listdir(proc_fd) if signal_of(n) == signal)
                    for sub in subs:
                        if (proc, sub) in self._adopted_names:
                            continue
                        folder = self._take(proc, proc_fd, signal, sub)
                        if folder is None:
                            continue
                        if not folder.files:
                            remove_folder(proc_fd, sub, folder.dir_fd, folder.lock_fd)
                            close_fd(folder.parent_fd)
                            continue
                        self._adopted[signal].append(folder)
                        self._adopted_names.add((proc, sub))
                        taken += len(folder.files)
                    if not os.listdir(proc_fd) and _age_s(proc) > EMPTY_FOLDER_AGE_S:
                        os.rmdir(proc, dir_fd=root_fd)  # every signal of that (long gone) process is sent
                except OSError:
                    pass
                finally:
                    close_fd(proc_fd)
        if taken:
            _log.info("otel-verl: %d %s batches of an ended process found in the spool %s", taken, signal, self.root)
        return taken

    def _take(self, proc: str, proc_fd: int, signal: str, sub: str) -> Folder | None:
        try:
            dir_fd = open_dir(sub, proc_fd)
        except OSError:
            return None
        lock_fd = try_lock(dir_fd)
        if lock_fd is None:
            close_fd(dir_fd)
            return None  # its process is alive (or the folder is being removed)
        try:
            names = batch_names(dir_fd)
            parent_fd = os.dup(proc_fd)
        except OSError:
            close_fd(dir_fd)
            close_fd(lock_fd)
            return None
        return Folder(signal, sub, proc, dir_fd, lock_fd, parent_fd, own=False, files=deque((n, -1) for n in names))

    # ------------------------------------------------------------------ the end
    def close(self) -> None:
        """Hand everything back: emptied folders of this process removed, every lock released (what is
        left is then the next process's to send). A later ``put`` starts a new process folder."""
        with self._lock:
            for folder in self._own.values():
                if not folder.files:
                    remove_folder(folder.parent_fd, folder.name, folder.dir_fd, folder.lock_fd)
                else:
                    close_fd(folder.dir_fd)
                    if folder.lock_fd is not None:
                        close_fd(folder.lock_fd)
            for folders in self._adopted.values():
                for folder in folders:
                    close_fd(folder.dir_fd)
                    if folder.lock_fd is not None:
                        close_fd(folder.lock_fd)
                    close_fd(folder.parent_fd)
            if self._proc_fd is not None:
                if self._root_fd is not None:
                    try:
                        os.rmdir(self.name, dir_fd=self._root_fd)
                    except OSError:
                        pass
                close_fd(self._proc_fd)
            if self._root_fd is not None:
                close_fd(self._root_fd)
            self._own.clear()
            self._adopted = {s: [] for s in semconv.SIGNALS}
            self._adopted_names.clear()
            self._busy.clear()
            self._bytes = 0
            self._root_fd = self._proc_fd = None
            self._new_name()

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's descriptors are closed here (the parent keeps its locks)
        and nothing of the parent's is touched; the child spools into a folder of its own."""
        for folder in [*self._own.values(), *(f for fs in self._adopted.values() for f in fs)]:
            for fd in (folder.dir_fd, folder.lock_fd):
                if fd is not None:
                    close_fd(fd)
            if not folder.own:
                close_fd(folder.parent_fd)
        for fd in (self._proc_fd, self._root_fd):
            if fd is not None:
                close_fd(fd)
        self._lock = threading.RLock()
        self._own.clear()
        self._adopted = {s: [] for s in semconv.SIGNALS}
        self._adopted_names.clear()
        self._busy.clear()
        self._bytes = 0
        self._seq = 0
        self._root_fd = self._proc_fd = None
        self._new_name()


_current: Spool | None = None
_current_lock = threading.Lock()


def current() -> Spool | None:
    """This process's spool (``OTEL_VERL_SPOOL*``), or None when spooling is off."""
    global _current
    s = settings()
    if not s.spool:
        return None
    with _current_lock:
        if _current is None:
            _current = Spool(spool_root(s), int(s.spool_max_mb * MIB))
        return _current


def reset() -> None:
    """Forget this process's spool (tests: a new one follows the settings of the moment)."""
    global _current
    with _current_lock:
        if _current is not None:
            _current.close()
        _current = None


def _after_fork_in_child() -> None:
    global _current_lock
    _current_lock = threading.Lock()
    if _current is not None:
        _current.forget_after_fork()
    spool_stats.reset()


os.register_at_fork(after_in_child=_after_fork_in_child)
