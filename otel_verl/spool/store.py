"""The on-disk spool: OTLP export batches the endpoint did not take, kept until it takes them.

A spooling exporter (``exporters``) hands this store the OTLP protobuf request of each batch it
could not send; a background thread re-sends them, oldest first, and removes each one only once
the endpoint accepted it. Layout under the spool root (``config.spool_root``:
``OTEL_VERL_SPOOL_DIR``, default ``/var/tmp/otel-verl-<uid>/spool``), nothing of it created before a
first batch must wait (a healthy process writes nothing):

    <root>/                                  0700, owned by the user
        <host>.<pid>.<start ns>/             one folder per process (0700)
            traces/  metrics/  logs/         one per exporter of a signal (``traces-2``: a second one)
                lock                         flock()ed by its process as long as it lives
                destination                  where these batches may go (``Destination``), 0600
                0000000000000001.pb ...      one Export*ServiceRequest per file, oldest first
                0000000000000002.1.pb        ... sent once already without an answer in time

* **Atomic, durable.** A batch is written to a temporary name, fsync()ed, renamed into place, and
  the folder fsync()ed: a reader never sees half a batch, and a batch survives a reboot. A signal
  folder is made under a temporary name, locked and given its ``destination`` before it is
  renamed into place.
* **Only where its own process would have sent it.** ``destination`` records the exporter's kind
  (``http``, ``grpc``), its endpoint as the exporter resolved it, and a salted HMAC of the headers
  it sends (never the headers). A folder is adopted only by a handle whose own destination is
  exactly that one; any other folder is left as it is and said once (which folder, which endpoint
  it waits for); one with no readable ``destination`` is never sent by a live process
  (``otel-verl replay --spool`` sends it only when told to, ``offline.replay_spool``).
* **Bounded, for the whole root.** What sits on disk under the root (``st_blocks``: every process
  folder of this user there, live, dead or of another job) stays within ``OTEL_VERL_SPOOL_MAX_MB``:
  the oldest batches this process may touch (its own and those it adopted) go first; when only
  batches it may not touch are left, a new batch is dropped instead of written (counted, said
  once: ``instruments.drops``; ``stats``). Other processes' folders are counted at most
  ``ROOT_SCAN_S`` late. At most ``MAX_OPEN_ADOPTED`` adopted folders are held open at once (three
  descriptors each); more are taken as those empty.
* **Adopted when its process dies.** A process holds the lock of each of its signal folders until
  it exits. Another verl process of the same host (``adopt``: when its pipeline starts, and while
  it re-sends a spool of its own) takes a folder whose lock it can take (its process is gone:
  flock() locks end with the process, pid reuse cannot fool it, and two processes never take the
  same folder) and whose destination is its own, sends what is in it and removes it.
  ``otel-verl replay --spool`` walks the same folders, taken the same way (``left_folders``).
* **Bounded copies.** A batch whose send ended without an answer in time (it may have arrived) is
  renamed with that count (``late``); after ``MAX_LATE`` such sends it is dropped, counted.
* **Self-healing.** An ``OSError`` while a folder is made (EMFILE, ENOSPC, EIO) loses that batch
  only: the next one tries again. Only an unusable root (``Unusable``) turns spooling off.
* **Hostile input.** The root is on a machine other users share: it must be a real folder owned by
  this user (a planted symlink or someone else's folder turns the spool off, said once). Every
  folder is opened relative to its parent's descriptor without following symlinks
  (``O_NOFOLLOW``), folders and files of another user are skipped, only regular files whose names
  are spool names are read, each up to ``MAX_FILE_BYTES`` (a ``destination`` up to
  ``MAX_RECORD_BYTES``); what cannot be read is removed (counted as dropped). Names of unknown
  files are never touched.

Every method is safe to call from any thread; nothing here raises into an exporter (``OSError``
ends as a warning and a count), and nothing here blocks on the network.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import hmac
import json
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

from otel_verl import per_process, semconv
from otel_verl._safe import warn_once
from otel_verl.config import settings, spool_root
from otel_verl.instruments import drops
from otel_verl.spool import stats

_log = logging.getLogger(__name__)

MIB = 1024 * 1024
# One OTLP request: the SDK's OTLP/HTTP exporters refuse to send more than 64 MiB (max_request_size).
MAX_FILE_BYTES = 64 * MIB
MAX_RECORD_BYTES = 16 * 1024  # a ``destination`` file
MAX_FOLDERS = 10_000  # process folders looked at per scan of the root
MAX_FILES = 1_000_000  # batch files listed per adopted folder
MAX_OPEN_ADOPTED = 8  # adopted signal folders held open at once (three descriptors each)
MAX_LATE = 3  # sends of one batch that ended without an answer in time; then it is dropped
ROOT_SCAN_S = 1.0  # other processes' spools are measured at most this often
LOCK = "lock"
RECORD = "destination"
# An empty process folder this much older than its name says is one whose process is gone (a live
# one has its first signal folder in it microseconds after making it).
EMPTY_FOLDER_AGE_S = 60.0
_FILE = re.compile(r"(?P<seq>[0-9]{16})(?:\.(?P<late>[0-9]{1,2}))?\.pb")
_TMP = re.compile(r"\.[0-9]{16}\.pb\.tmp")
_SIGNAL_DIR = re.compile(r"(traces|metrics|logs)(-[0-9]{1,4})?")
_PROCESS_DIR = re.compile(r"(?P<host>[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63})\.(?P<pid>[0-9]{1,10})\.(?P<ns>[0-9]{1,20})")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_LOCK = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Unusable(OSError):
    """The spool root cannot be used safely (a symlink, another user's folder)."""


def _mac(salt: bytes, credentials: bytes) -> str:
    return hmac.new(salt, credentials, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Destination:
    """Where the batches of one exporter go: its kind (``http``, ``grpc``), its endpoint as the
    exporter resolved it, and what it sends to be let in (headers, in a canonical form). Held in
    memory only: a folder records the endpoint with any credentials in the URL redacted, and salted
    HMACs of the whole endpoint and of the headers (``record``)."""

    kind: str
    endpoint: str
    credentials: bytes = field(repr=False)

    def record(self) -> bytes:
        """The ``destination`` file of a signal folder of this exporter."""
        salt = os.urandom(16)
        return json.dumps(
            {
                "version": 1,
                "kind": self.kind,
                "endpoint": shown_endpoint(self.endpoint),
                "salt": salt.hex(),
                "endpoint_mac": _mac(salt, self.endpoint.encode()),
                "credentials": _mac(salt, self.credentials),
            },
            sort_keys=True,
        ).encode()

    def matches(self, record: Record | None) -> bool:
        """Whether a folder's ``record`` names exactly this destination (credentials included)."""
        return (
            record is not None
            and record.kind == self.kind
            and record.goes_to(self.endpoint)
            and hmac.compare_digest(record.credentials, _mac(record.salt, self.credentials))
        )


@dataclass(frozen=True)
class Record:
    """A signal folder's ``destination`` file, as read."""

    kind: str
    endpoint: str  # as shown: credentials in the URL redacted
    salt: bytes
    endpoint_mac: str
    credentials: str

    def goes_to(self, endpoint: str) -> bool:
        """Whether this folder's batches go to ``endpoint`` (exactly, credentials of the URL included)."""
        return self.endpoint == shown_endpoint(endpoint) and hmac.compare_digest(
            self.endpoint_mac, _mac(self.salt, endpoint.encode())
        )


def shown_endpoint(url: str) -> str:
    """``url`` with the credentials it may hold (``user:pass@``, a query) redacted."""
    from otel_verl.endpoints import shown

    return shown(url)


def read_record(dir_fd: int) -> Record | None:
    """The ``destination`` of a signal folder; None when it has none, or not one this reads."""
    raw = read_batch(dir_fd, RECORD, MAX_RECORD_BYTES)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        keys = ("kind", "endpoint", "salt", "endpoint_mac", "credentials")
        if data.get("version") != 1 or not all(isinstance(data.get(k), str) for k in keys):
            return None
        return Record(
            data["kind"], data["endpoint"], bytes.fromhex(data["salt"]), data["endpoint_mac"], data["credentials"]
        )
    except (ValueError, TypeError, AttributeError):
        return None


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


def late_sends(name: str) -> int:
    """How many sends of batch file ``name`` ended without an answer in time."""
    m = _FILE.fullmatch(name)
    return int(m.group("late") or 0) if m else 0


def _late_name(name: str, n: int) -> str:
    return f"{name[:16]}.{n}.pb"


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


def is_dead(dir_fd: int) -> bool:
    """Whether no process holds the lock of a signal folder (it is not taken: the lock is let go at once)."""
    lock_fd = try_lock(dir_fd)
    if lock_fd is None:
        return False
    close_fd(lock_fd)
    return True


def remove_folder(parent_fd: int, name: str, dir_fd: int, lock_fd: int | None) -> bool:
    """Remove an emptied signal folder (its lock last), then its process folder if that is empty too."""
    unlink(RECORD, dir_fd)
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


def _signal_folders(
    root_fd: int, processes: list[str], signal: str | None = None, remove_empty_after_s: float | None = None
) -> Iterator[tuple[str, int, str, str]]:
    """(process folder, its descriptor, signal folder, signal) for each signal folder of
    ``processes`` (of ``signal`` only, when given), in name order. The descriptor is valid until the
    next item; a process folder left empty is removed (only one older than ``remove_empty_after_s``,
    when given)."""
    for proc in processes:
        try:
            proc_fd = open_dir(proc, root_fd)
        except OSError:
            continue
        try:
            for sub in sorted(os.listdir(proc_fd)):
                sig = signal_of(sub)
                if sig is not None and (signal is None or sig == signal):
                    yield proc, proc_fd, sub, sig
            if not os.listdir(proc_fd) and (remove_empty_after_s is None or _age_s(proc) > remove_empty_after_s):
                os.rmdir(proc, dir_fd=root_fd)
        except OSError:
            pass
        finally:
            close_fd(proc_fd)


class LeftFolder:
    """A signal folder of another process, opened (never through a symlink); taken under its lock
    only when asked (``take``: then no other process can take it, and its own is gone).

    ``left_folders`` hands these out and closes each one when it moves on, unless the holder
    removed it (``remove``) or kept its descriptors (``keep``)."""

    __slots__ = ("process", "parent_fd", "name", "signal", "dir_fd", "lock_fd", "_record", "_read", "_open")

    def __init__(self, process: str, parent_fd: int, name: str, signal: str, dir_fd: int) -> None:
        self.process = process  # the process folder's name
        self.parent_fd = parent_fd  # the process folder: valid while the walk is on this folder
        self.name = name  # traces, traces-2
        self.signal = signal
        self.dir_fd = dir_fd
        self.lock_fd: int | None = None
        self._record: Record | None = None
        self._read = False
        self._open = True

    @property
    def record(self) -> Record | None:
        """Where its batches may go (``destination``), read once; None when unreadable or absent."""
        if not self._read:
            self._record, self._read = read_record(self.dir_fd), True
        return self._record

    def is_dead(self) -> bool:
        """Whether no process holds its lock (not taken: the lock is let go at once)."""
        return self.lock_fd is not None or is_dead(self.dir_fd)

    def take(self) -> bool:
        """Take its lock; False when its process is alive (or the folder is being removed)."""
        if self.lock_fd is None:
            self.lock_fd = try_lock(self.dir_fd)
        return self.lock_fd is not None

    def batch_names(self) -> list[str]:
        """Its batch files, oldest first (``batch_names``)."""
        return batch_names(self.dir_fd)

    def keep(self) -> tuple[int, int | None]:
        """Its descriptors (folder, lock), handed to the caller, who closes them."""
        self._open = False
        return self.dir_fd, self.lock_fd

    def remove(self) -> bool:
        """Remove it, emptied (``remove_folder``); closes its descriptors."""
        self._open = False
        return remove_folder(self.parent_fd, self.name, self.dir_fd, self.lock_fd)

    def close(self) -> None:
        """Close its descriptors (its lock, if taken, ends with them), unless kept or removed."""
        if self._open:
            self._open = False
            close_fd(self.dir_fd)
            if self.lock_fd is not None:
                close_fd(self.lock_fd)


def left_folders(
    root_fd: int, processes: list[str], signal: str | None = None, remove_empty_after_s: float | None = None
) -> Iterator[LeftFolder]:
    """The one walk of other processes' spools (adoption and ``otel-verl replay --spool``): each
    signal folder of ``processes`` (of ``signal`` only, when given), opened, in name order
    (``_signal_folders``); closed when the walk moves on unless removed or kept."""
    for proc, proc_fd, sub, sig in _signal_folders(root_fd, processes, signal, remove_empty_after_s):
        try:
            dir_fd = open_dir(sub, proc_fd)
        except OSError:
            continue
        folder = LeftFolder(proc, proc_fd, sub, sig, dir_fd)
        try:
            yield folder
        finally:
            folder.close()


def is_process_folder(name: str) -> bool:
    """Whether ``name`` is a process folder's name (``<host>.<pid>.<start ns>``)."""
    return _PROCESS_DIR.fullmatch(name) is not None


def _age_s(process_folder: str) -> float:
    """Seconds since the process of a folder called ``<host>.<pid>.<start ns>`` made it."""
    return (time.time_ns() - _started_ns(process_folder)) / 1e9


def _started_ns(process_folder: str) -> int:
    return int(process_folder.rpartition(".")[2])


def _on_disk(st: os.stat_result) -> int:
    return st.st_blocks * 512


def disk_usage(root_fd: int, skip: str | None = None) -> int:
    """Bytes on disk (blocks) of every process folder of this user in the root but ``skip``:
    folders, batches, locks, records, whatever else is in them."""
    total = 0
    for proc in process_folders(root_fd):
        if proc == skip:
            continue
        try:
            proc_fd = open_dir(proc, root_fd)
        except OSError:
            continue
        try:
            total += _on_disk(os.fstat(proc_fd))
            total += _usage_of(proc_fd, depth=1)
        except OSError:
            pass
        finally:
            close_fd(proc_fd)
    return total


def _usage_of(dir_fd: int, depth: int) -> int:
    total = 0
    for name in os.listdir(dir_fd)[:MAX_FILES]:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            continue
        if st.st_uid != os.geteuid():
            continue
        total += _on_disk(st)
        if depth > 0 and stat.S_ISDIR(st.st_mode):
            try:
                sub_fd = open_dir(name, dir_fd)
            except OSError:
                continue
            try:
                total += _usage_of(sub_fd, depth - 1)
            finally:
                close_fd(sub_fd)
    return total


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
    destination: Destination | None  # where its batches may go (adopted: the adopter's, which matched)
    # (file name, batch bytes, bytes on disk); bytes -1: not known yet
    files: deque[tuple[str, int, int]] = field(default_factory=deque)


@dataclass(frozen=True, eq=False)
class Entry:
    """One spooled batch, handed to a re-sender (``Spool.head``) until it says what became of it."""

    folder: Folder
    name: str
    size: int


def _key(folder: Folder, name: str) -> tuple[int, str]:
    return id(folder), name[:16]  # the sequence number: a file keeps it when renamed (``late``)


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
        self._destinations: dict[str, Destination | None] = {}  # folder name -> where it sends
        self._adopted: dict[str, list[Folder]] = {s: [] for s in semconv.SIGNALS}
        self._adopted_names: set[tuple[str, str]] = set()  # (process folder, signal folder)
        self._told: set[tuple[str, str]] = set()  # folders said to be left for another destination
        self._capped: set[str] = set()  # signals with dead folders left for when adopted ones empty
        self._busy: set[tuple[int, str]] = set()  # ``_key`` of batches being re-sent
        self._strikes: dict[tuple[int, str], int] = {}  # ``_key`` -> re-sends in a row the endpoint did not take
        self._deferred: set[tuple[int, str]] = set()  # ``_key`` of batches sent after the others
        self._late: dict[tuple[int, str], int] = {}  # ``_key`` -> late sends (``late``)
        self._bytes = 0  # of this process's own batches
        self._own_disk = 0  # what this process's own folder takes on disk
        self._others = (-1e18, 0)  # (time.monotonic(), bytes on disk) of every other process folder
        self._seq = 0
        self._keys: dict[str, int] = {}  # signal -> handles made
        self._broken: str | None = None
        self._new_name()

    def _new_name(self) -> None:
        self.name = f"{self.host}.{os.getpid()}.{time.time_ns()}"

    # ------------------------------------------------------------------ handles
    def folder_name(self, signal: str, destination: Destination | None = None) -> str:
        """A signal folder name of this process not handed out yet (``traces``, then ``traces-2``),
        for an exporter that sends to ``destination`` (None: its batches are never adopted)."""
        with self._lock:
            n = self._keys[signal] = self._keys.get(signal, 0) + 1
            name = signal if n == 1 else f"{signal}-{n}"
            self._destinations[name] = destination
            return name

    def set_destination(self, folder_name: str, destination: Destination | None) -> None:
        """Where the batches of folder ``folder_name`` go (before its first batch)."""
        with self._lock:
            self._destinations[folder_name] = destination

    @property
    def own_bytes(self) -> int:
        return self._bytes

    def pending(self, folder_name: str) -> int:
        """This process's batches waiting in folder ``folder_name``."""
        with self._lock:
            own = self._own.get(folder_name)
            return len(own.files) if own is not None else 0

    def _sendable(self, signal: str, folder_name: str) -> list[Folder]:
        """The folders a handle sends from: its own, then what was adopted for its destination."""
        own = [self._own[folder_name]] if folder_name in self._own else []
        destination = self._destinations.get(folder_name)
        if destination is None:
            return own
        return own + [f for f in self._adopted.get(signal, []) if f.destination == destination]

    def waiting(self, signal: str, folder_name: str) -> int:
        """Batches a handle could re-send now: its own, then what this process adopted for it."""
        with self._lock:
            return sum(len(f.files) for f in self._sendable(signal, folder_name))

    def wants_adoption(self, signal: str) -> bool:
        """Dead folders of ``signal`` were left for later (``MAX_OPEN_ADOPTED``) and there is room now."""
        with self._lock:
            return signal in self._capped and self._open_adopted() < MAX_OPEN_ADOPTED

    def _open_adopted(self) -> int:
        return sum(len(fs) for fs in self._adopted.values())

    # ------------------------------------------------------------------ writing
    def put(self, signal: str, folder_name: str, body: bytes) -> bool:
        """Spool one batch (``body``: the OTLP request) of ``signal``; False when it could not be
        written (said once; counted as dropped). Makes room first: the oldest batches this process
        may touch go, whatever their signal, until the new one fits the bound of the whole root;
        when they are not enough, the new one is not written."""
        size = len(body)
        victims: list[tuple[str, int]] = []
        full = False
        with self._lock:
            written = False
            if size <= self.max_bytes:
                need = self._estimate(size, folder_name)
                total = self._own_usage() + self._others_usage()
                while total + need > self.max_bytes:
                    victim = self._oldest_evictable()
                    if victim is None:
                        break  # only batches on their way, or that this process may not touch
                    folder, item = victim
                    total -= self._evict(folder, item)
                    victims.append((folder.signal, item[1]))
                full = total + need > self.max_bytes
                written = not full and self._write(signal, folder_name, body)
            queued = sum(len(f.files) for f in self._own.values())
        if not written:
            victims.append((signal, size))  # too large for the bound, no room, or not writable
        for victim_signal, nbytes in victims:
            stats.count(victim_signal, semconv.SPOOL_DROPPED, max(0, nbytes))
            drops.dropped(semconv.DROPPED_SPOOL, queued)
        if full:
            warn_once(
                "spool full",
                "the telemetry spool %s is full (%.3g MiB for every process there, OTEL_VERL_SPOOL_MAX_MB) with "
                "batches this process may not remove (of running processes or other jobs): a batch of %s is dropped",
                self.root,
                self.max_bytes / MIB,
                signal,
            )
        if written:
            stats.count(signal, semconv.SPOOL_SPOOLED, size)
            warn_once(
                "spooling",
                "the OTLP endpoint did not take a batch of %s; spooling to %s until it answers again "
                "(at most %.3g MiB for every process there; OTEL_VERL_SPOOL_MAX_MB)",
                signal,
                self.root,
                self.max_bytes / MIB,
            )
        return written

    def _estimate(self, size: int, folder_name: str) -> int:
        """Bytes on disk of a new batch of ``size`` bytes: whole blocks, and the folders (and
        destination record) it makes."""
        block = 4096
        made = (0 if folder_name in self._own else 2) + (1 if self._proc_fd is None else 0)
        return (-(-size // block) + made) * block

    def _own_usage(self) -> int:
        """Bytes on disk of this process's folder: its batches and records, and its folders as they are now."""
        usage = self._own_disk
        for fd in [self._proc_fd, *(f.dir_fd for f in self._own.values())]:
            if fd is not None:
                try:
                    usage += _on_disk(os.fstat(fd))
                except OSError:
                    pass
        return usage

    def _others_usage(self) -> int:
        """Bytes on disk of every other process folder in the root, measured at most ``ROOT_SCAN_S`` ago."""
        now = time.monotonic()
        at, usage = self._others
        if now - at < ROOT_SCAN_S:
            return usage
        try:
            root_fd = open_dir(self.root)
        except OSError:
            usage = 0  # no root yet
        else:
            try:
                usage = disk_usage(root_fd, skip=self.name)
            except OSError:
                pass
            finally:
                close_fd(root_fd)
        self._others = (now, usage)
        return usage

    def _oldest_evictable(self) -> tuple[Folder, tuple[str, int, int]] | None:
        """The oldest batch this process may remove (its own or adopted; not one on its way)."""
        best: tuple[tuple[int, str], Folder, tuple[str, int, int]] | None = None
        for folder in [*self._own.values(), *(f for fs in self._adopted.values() for f in fs)]:
            for item in folder.files:
                if _key(folder, item[0]) in self._busy:
                    continue
                order = (_started_ns(folder.process), item[0][:16])
                if best is None or order < best[0]:
                    best = (order, folder, item)
                break
        return None if best is None else (best[1], best[2])

    def _evict(self, folder: Folder, item: tuple[str, int, int]) -> int:
        """Remove one batch for room; the bytes on disk it took."""
        disk = item[2]
        if disk < 0:
            try:
                disk = _on_disk(os.stat(item[0], dir_fd=folder.dir_fd, follow_symlinks=False))
            except OSError:
                disk = 0
        folder.files.remove(item)
        unlink(item[0], folder.dir_fd)
        self._forget_key(_key(folder, item[0]))
        if folder.own:
            self._bytes -= item[1]
            self._own_disk -= disk
        else:
            at, usage = self._others
            self._others = (at, max(0, usage - disk))
            if not folder.files:
                self._forget_adopted(folder)
        return disk

    def _forget_key(self, key: tuple[int, str]) -> None:
        self._busy.discard(key)
        self._strikes.pop(key, None)
        self._deferred.discard(key)
        self._late.pop(key, None)

    def _write(self, signal: str, folder_name: str, body: bytes) -> bool:
        try:
            folder = self._own_folder(signal, folder_name)
            self._seq += 1
            name = f"{self._seq:016d}.pb"
            tmp = f".{name}.tmp"
            fd = os.open(tmp, _NEW_FILE, 0o600, dir_fd=folder.dir_fd)
            try:
                view = memoryview(body)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
                disk = _on_disk(os.fstat(fd))
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
                "could not write to the telemetry spool %s (%s); a batch the endpoint did not take is lost "
                "(the next one tries again)",
                self.root,
                exc,
            )
            return False
        folder.files.append((name, len(body), disk))
        self._bytes += len(body)
        self._own_disk += disk
        return True

    def _own_folder(self, signal: str, folder_name: str) -> Folder:
        folder = self._own.get(folder_name)
        if folder is not None:
            return folder
        if self._broken:
            raise Unusable(errno.EPERM, self._broken)
        if self._proc_fd is None:
            root_fd = self._open_root(create=True)
            try:
                os.mkdir(self.name, 0o700, dir_fd=root_fd)
            except FileExistsError:
                pass  # made by an earlier try of this process that failed after it (EMFILE, ENOSPC)
            self._proc_fd = open_dir(self.name, root_fd)
        # Made under a temporary name, locked and given its destination before it is renamed into
        # place: no other process can ever take a signal folder of a live one, nor one half made.
        tmp = f".{folder_name}.new"
        try:
            os.mkdir(tmp, 0o700, dir_fd=self._proc_fd)
        except FileNotFoundError:  # our process folder is gone (removed by hand): a new one
            close_fd(self._proc_fd)
            self._proc_fd = None
            self._new_name()
            return self._own_folder(signal, folder_name)
        except FileExistsError:  # left by an earlier try of ours that failed half-way
            self._remove_tmp(tmp)
            os.mkdir(tmp, 0o700, dir_fd=self._proc_fd)
        dir_fd = lock_fd = None
        try:
            dir_fd = open_dir(tmp, self._proc_fd)
            lock_fd = os.open(
                LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
            )
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            destination = self._destinations.get(folder_name)
            if destination is not None:
                self._write_record(dir_fd, destination)
            os.rename(tmp, folder_name, src_dir_fd=self._proc_fd, dst_dir_fd=self._proc_fd)
            os.fsync(self._proc_fd)
            self._own_disk += _usage_of(dir_fd, depth=0)  # its lock and record (the folder: ``_own_usage``)
        except BaseException:
            for fd in (dir_fd, lock_fd):
                if fd is not None:
                    close_fd(fd)
            self._remove_tmp(tmp)
            raise
        folder = Folder(
            signal, folder_name, self.name, dir_fd, lock_fd, self._proc_fd, own=True, destination=destination
        )
        self._own[folder_name] = folder
        return folder

    @staticmethod
    def _write_record(dir_fd: int, destination: Destination) -> None:
        fd = os.open(RECORD, _NEW_FILE, 0o600, dir_fd=dir_fd)
        try:
            view = memoryview(destination.record())
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    def _remove_tmp(self, tmp: str) -> None:
        """Remove a half-made signal folder of this process (what an ``OSError`` left of it)."""
        if self._proc_fd is None:
            return
        try:
            fd = open_dir(tmp, self._proc_fd)
        except OSError:
            return
        try:
            for name in (LOCK, RECORD):
                unlink(name, fd)
        finally:
            close_fd(fd)
        try:
            os.rmdir(tmp, dir_fd=self._proc_fd)
        except OSError:
            pass

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
    def head(self, signal: str, folder_name: str, skip: Entry | None = None) -> Entry | None:
        """The oldest batch to re-send for this handle: its own first, then what this process
        adopted for its destination; a deferred one (``defer``) only when no other waits; None
        when nothing waits. It stays where it is (and is not dropped for room) until ``done``,
        ``release``, ``strike`` or ``late``. ``skip``: not that one (a probe past it)."""
        with self._lock:
            skipped = None if skip is None else _key(skip.folder, skip.name)
            later: Entry | None = None
            for folder in self._sendable(signal, folder_name):
                for name, size, _ in folder.files:
                    key = _key(folder, name)
                    if key in self._busy or key == skipped:
                        continue  # a second handle of this signal sends the head: take the next
                    if key in self._deferred:
                        if later is None:
                            later = Entry(folder, name, size)
                        continue
                    self._busy.add(key)
                    return Entry(folder, name, size)
            if later is not None:
                self._busy.add(_key(later.folder, later.name))
            return later

    def read(self, entry: Entry) -> bytes | None:
        return read_batch(entry.folder.dir_fd, entry.name)

    def release(self, entry: Entry, reset: bool = False) -> None:
        """``entry`` could not be sent now: it stays, oldest first (``reset``: its row of ``strike`` ends)."""
        with self._lock:
            key = _key(entry.folder, entry.name)
            self._busy.discard(key)
            if reset:
                self._strikes.pop(key, None)

    def strike(self, entry: Entry) -> int:
        """``entry`` was not taken again (released); how many times in a row now."""
        with self._lock:
            key = _key(entry.folder, entry.name)
            self._busy.discard(key)
            n = self._strikes[key] = self._strikes.get(key, 0) + 1
            return n

    def defer(self, entry: Entry) -> None:
        """``entry`` keeps failing while later batches are taken: it goes after every other one."""
        with self._lock:
            key = _key(entry.folder, entry.name)
            self._deferred.add(key)
            self._strikes.pop(key, None)

    def late(self, entry: Entry) -> int:
        """A send of ``entry`` ended without an answer in time (it may have arrived): counted in its
        file name, durably (in memory when it cannot be renamed), and released; the number of such
        sends so far."""
        with self._lock:
            folder = entry.folder
            key = _key(folder, entry.name)
            self._busy.discard(key)
            index = next((i for i, item in enumerate(folder.files) if item[0][:16] == key[1]), None)
            if index is None:
                return 0
            name, size, disk = folder.files[index]
            n = max(late_sends(name), self._late.get(key, 0)) + 1
            self._late[key] = n
            new = _late_name(name, min(n, 99))
            try:
                os.rename(name, new, src_dir_fd=folder.dir_fd, dst_dir_fd=folder.dir_fd)
                os.fsync(folder.dir_fd)
            except OSError:
                return n
            folder.files[index] = (new, size, disk)
            return n

    def done(self, entry: Entry, outcome: str, nbytes: int) -> None:
        """``entry`` is finished with (``outcome``: resent, rejected, dropped): remove it, count it."""
        folder = entry.folder
        with self._lock:
            key = _key(folder, entry.name)
            self._forget_key(key)
            for item in folder.files:
                if item[0][:16] == key[1]:
                    folder.files.remove(item)
                    if folder.own:
                        self._bytes -= item[1]
                        self._own_disk -= max(0, item[2])
                    break
            else:
                return  # gone already (dropped for room, or the spool was handed back)
            unlink(item[0], folder.dir_fd)
            if not folder.own and not folder.files:
                self._forget_adopted(folder)
        stats.count(folder.signal, outcome, nbytes)
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
    def adopt(self, signal: str, folder_name: str | None = None) -> int:
        """Take the ``signal`` folders of dead processes of this host whose destination is exactly
        that of handle ``folder_name`` (default: ``signal``), at most ``MAX_OPEN_ADOPTED`` open in
        all; the number of batches taken. Folders for another destination, or with none, are left
        as they are (said once each)."""
        taken = 0
        with self._lock:
            destination = self._destinations.get(folder_name or signal)
            if self._broken or destination is None:
                return 0
            try:
                root_fd = self._open_root(create=False)
                names = [n for n in process_folders(root_fd, self.host) if n != self.name]
            except OSError:
                return 0  # no spool root (nothing ever waited here), or an unusable one
            self._capped.discard(signal)
            walk = left_folders(root_fd, names, signal, remove_empty_after_s=EMPTY_FOLDER_AGE_S)
            try:
                for left in walk:
                    if (left.process, left.name) in self._adopted_names:
                        continue
                    if self._open_adopted() >= MAX_OPEN_ADOPTED:
                        self._capped.add(signal)  # taken once the adopted ones are sent
                        break
                    folder = self._take(left, destination)
                    if folder is None:
                        continue
                    if not folder.files:
                        left.remove()
                        close_fd(folder.parent_fd)
                        continue
                    self._adopted[signal].append(folder)
                    self._adopted_names.add((left.process, left.name))
                    taken += len(folder.files)
            finally:
                walk.close()
        if taken:
            _log.info("otel-verl: %d %s batches of an ended process found in the spool %s", taken, signal, self.root)
        return taken

    def _take(self, left: LeftFolder, destination: Destination) -> Folder | None:
        """A dead process's folder for ``destination``, under its lock; None when it is for another
        destination (said once, when its process is gone), its process is alive, or it cannot be read."""
        if not destination.matches(left.record):
            if (left.process, left.name) not in self._told and left.is_dead():
                self._told.add((left.process, left.name))
                self._tell_left(left.process, left.name, left.record, destination)
            return None
        if not left.take():
            return None  # its process is alive (or the folder is being removed)
        try:
            files = deque(self._listed(left.dir_fd))
            parent_fd = os.dup(left.parent_fd)
        except OSError:
            return None
        dir_fd, lock_fd = left.keep()
        return Folder(
            left.signal,
            left.name,
            left.process,
            dir_fd,
            lock_fd,
            parent_fd,
            own=False,
            destination=destination,
            files=files,
        )

    @staticmethod
    def _listed(dir_fd: int) -> Iterator[tuple[str, int, int]]:
        for name in batch_names(dir_fd):
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                yield name, st.st_size, _on_disk(st)
            except OSError:
                yield name, -1, -1

    def _tell_left(self, proc: str, sub: str, record: Record | None, mine: Destination) -> None:
        """Say (once per folder, no secret) that a dead process's folder is left for its own destination."""
        shown = shown_endpoint
        where = os.path.join(self.root, proc, sub)
        if record is None:
            _log.info("otel-verl: spool folder %s has no destination record: kept, not sent", where)
            warn_once(
                "spool no destination",
                "spool folders of ended processes in %s have no destination record (an older otel-verl, or "
                "damaged): they are kept and never sent by a running process; `otel-verl replay --spool %s "
                "--endpoint URL --ignore-recorded-endpoint` sends them where you say",
                self.root,
                self.root,
            )
            return
        same_place = record.kind == mine.kind and record.goes_to(mine.endpoint)
        wanted = f"{record.endpoint} ({record.kind}){' with other headers' if same_place else ''}"
        _log.info("otel-verl: spool folder %s waits for %s, not this process's: left for it", where, wanted)
        warn_once(
            f"spool elsewhere {wanted}",
            "spooled batches of ended processes in %s wait for %s, not where this process sends "
            "(%s): they are left for a process of their own job, or `otel-verl replay --spool`",
            self.root,
            wanted,
            shown(mine.endpoint),
        )

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
            self._clear()

    def _clear(self) -> None:
        self._own.clear()
        self._adopted = {s: [] for s in semconv.SIGNALS}
        self._adopted_names.clear()
        self._capped.clear()
        self._busy.clear()
        self._strikes.clear()
        self._deferred.clear()
        self._late.clear()
        self._bytes = self._own_disk = 0
        self._others = (-1e18, 0)
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
        self._seq = 0
        self._told.clear()
        self._clear()


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
    use(None)


def use(spool: Spool | None) -> None:
    """Make ``spool`` this process's (a test's own folder), closing the one before; None: the next
    ``current`` makes one from the settings."""
    global _current
    with _current_lock:
        if _current is not None and _current is not spool:
            _current.close()
        _current = spool


def _after_fork_in_child() -> None:
    global _current_lock
    _current_lock = threading.Lock()
    if _current is not None:
        _current.forget_after_fork()
    stats.reset()


per_process.register(__name__, reset=reset, after_fork=_after_fork_in_child)
