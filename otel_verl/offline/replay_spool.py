"""``otel-verl replay --spool DIR``: send what verl processes left in their on-disk spools.

A verl process keeps the OTLP batches its endpoint did not take in a spool folder
(``otel_verl.spool.store``) and re-sends them itself; what a process that died left there is sent
by the next verl process of the same host. This command does it by hand, from any machine that
sees the folder: ``DIR`` is a spool root (``OTEL_VERL_SPOOL_DIR``, default
``/var/tmp/otel-verl-spool-<uid>``) or one process folder in it.

Each signal folder is taken as a verl process would take it: only when its lock can be taken (its
process has ended, and no other process is sending it); one still in use is left alone and named.
**Only to its own endpoint:** a folder records where its process sent (``spool.Destination``); its
batches go only when the endpoint of ``--endpoint`` / ``OTEL_EXPORTER_OTLP_*ENDPOINT`` is exactly
that one (an OTLP/HTTP endpoint: a folder of an OTLP/gRPC exporter needs the next option).
Any other folder, and one with no record, is kept and named with the endpoint it waits for,
unless ``--ignore-recorded-endpoint`` says to send everything to the endpoint given. The headers
are the ones given (``--headers`` / ``OTEL_EXPORTER_OTLP_*HEADERS``), not compared with the record.
Each batch file (a regular file of this user, the spool's names only, at most 64 MiB: read as the
spool reads it) is checked to be its signal's OTLP request and POSTed unchanged to ``<URL>/v1/<signal>``
with ``Content-Type: application/x-protobuf`` through ``otel_verl.offline.http_post`` (deadline,
bounded answer, no redirect followed, throttling answers retried); endpoint and headers as for
``otel-verl replay``. A file is removed only once the endpoint accepted it, and an emptied folder
with it; whatever was not accepted stays for a later try. No answer at all stops that signal.
Exit 0 only when every batch found was accepted and none of its items rejected (a folder kept for
another endpoint is not).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from google.protobuf.message import DecodeError

from otel_verl import endpoints
from otel_verl.exits import USAGE, CommandError, warn
from otel_verl.offline.http_post import Answer, NoAnswer, Poster, printable
from otel_verl.offline.replay import (
    ITEMS,
    REJECTED_FIELDS,
    RESPONSES,
    RETRIES,
    RETRY_STATUS,
    partial_success,
    print_errors,
    signal_headers,
    signal_url,
)
from otel_verl.spool import store
from otel_verl.spool.resend import parse

SIGNALS = ("traces", "metrics", "logs")
_ITEM_LISTS = {  # signal -> (resource list, scope list, item list) of the request message
    "traces": ("resource_spans", "scope_spans", "spans"),
    "metrics": ("resource_metrics", "scope_metrics", "metrics"),
    "logs": ("resource_logs", "scope_logs", "log_records"),
}


@dataclass
class SpoolResult:
    signal: str
    url: str
    folders: int = 0  # signal folders taken
    busy: list[str] = field(default_factory=list)  # folders whose lock a live process holds
    elsewhere: list[str] = field(default_factory=list)  # folders recorded for another endpoint (kept)
    batches: int = 0  # accepted (and removed)
    items: int = 0  # spans / metrics / log records in them
    bytes: int = 0
    failed: int = 0  # not accepted, or not sent after the endpoint stopped answering (kept)
    unreadable: int = 0  # not a regular file of this user, too large, or not an OTLP request (kept)
    rejected: int = 0  # partialSuccess rejected items
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.failed or self.unreadable or self.rejected or self.elsewhere)


def _items(signal: str, message: object) -> int:
    rkey, skey, ikey = _ITEM_LISTS[signal]
    return sum(len(getattr(s, ikey)) for r in getattr(message, rkey) for s in getattr(r, skey))


def _rejected(signal: str, answer: Answer) -> int:
    """Items the endpoint's answer says it rejected: its ``partialSuccess``, in JSON or (what a
    Collector answers a protobuf request with) protobuf."""
    if answer.body.lstrip()[:1] in (b"{", b""):
        try:
            return partial_success(signal, answer)[0]
        except ValueError:
            return 0
    try:
        message = RESPONSES[signal].FromString(answer.body)
    except (DecodeError, RuntimeWarning, ValueError):
        return 0  # a proxy's text: nothing it says is a rejection
    return max(0, getattr(message.partial_success, REJECTED_FIELDS[signal]))


def _process_folders(root: Path) -> tuple[int, list[str]]:
    """(descriptor of the folder holding process folders, their names): ``root`` is a spool root,
    or one process folder (then its parent and it)."""
    try:
        if store.is_process_folder(root.name) and not any(store.is_process_folder(n) for n in os.listdir(root)):
            return store.open_dir(str(root.parent)), [root.name]
        fd = store.open_dir(str(root))
    except store.Unusable as exc:
        raise CommandError(f"{root}: {exc.strerror} (not read)", USAGE) from None
    except OSError as exc:
        raise CommandError(f"{root}: not a spool folder ({exc.strerror})", USAGE) from None
    return fd, list(store.process_folders(fd))


def replay_spool(
    root: str | Path,
    endpoint: str | None = None,
    headers: str | None = None,
    timeout: float = 10.0,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    ignore_recorded_endpoint: bool = False,
) -> int:
    """The ``otel-verl replay --spool`` command: 0 when every batch was accepted, else a ``CommandError``.
    ``ignore_recorded_endpoint``: send every folder to the endpoint given, whatever it recorded."""
    out = sys.stdout if out is None else out
    env = os.environ if env is None else env
    root = Path(root)
    plan = {sig: (signal_url(sig, endpoint, env), signal_headers(sig, headers, env)) for sig in SIGNALS}
    root_fd, names = _process_folders(root)
    results = {sig: SpoolResult(sig, plan[sig][0]) for sig in SIGNALS}
    dead: set[str] = set()  # signals whose endpoint gave no answer
    try:
        with Poster(RETRIES, RETRY_STATUS) as poster:
            for left in store.left_folders(root_fd, names):
                _replay_signal_folder(
                    poster, left, plan[left.signal], results[left.signal], dead, timeout, ignore_recorded_endpoint
                )
    finally:
        store.close_fd(root_fd)
    for r in results.values():
        _print(r, out)
    out.flush()
    busy = sum(len(r.busy) for r in results.values())
    if busy:
        warn("replay", f"{busy} spool folders are in use by a running process and were left alone", err)
    batches = sum(r.batches for r in results.values())
    problems = [r for r in results.values() if not r.ok]
    if problems:
        what = []
        for label, n in (
            ("batches not accepted", sum(r.failed for r in problems)),
            ("files unreadable", sum(r.unreadable for r in problems)),
            ("items rejected", sum(r.rejected for r in problems)),
            ("spool folders kept for another endpoint", sum(len(r.elsewhere) for r in problems)),
        ):
            what += [f"{n} {label}"] if n else []
        raise CommandError(f"{' and '.join(what)} ({batches} batches replayed from {root}; details above)")
    print(f"ok: {batches} spooled batches replayed from {root}", file=out)
    return 0


def _destination_problem(left: store.LeftFolder, url: str) -> str | None:
    """Why a signal folder is not sent to ``url`` (the endpoint it waits for), or None."""
    record = left.record
    if record is None:
        return "no recorded endpoint (kept; --ignore-recorded-endpoint sends it to the endpoint given)"
    if record.kind == "http" and record.goes_to(url):
        return None
    return (
        f"recorded for {record.endpoint} ({record.kind}), not {endpoints.shown(url)} "
        "(kept; --ignore-recorded-endpoint sends it to the endpoint given)"
    )


def _replay_signal_folder(
    poster: Poster,
    left: store.LeftFolder,
    target: tuple[str, dict[str, str]],
    r: SpoolResult,
    dead: set[str],
    timeout: float,
    ignore_recorded_endpoint: bool,
) -> None:
    """Send one signal folder of an ended process, when it may go to ``target``."""
    where = f"{left.process}/{left.name}"
    if not left.take():
        r.busy.append(where)
        return
    problem = None if ignore_recorded_endpoint else _destination_problem(left, target[0])
    if problem is not None:
        r.elsewhere.append(f"{where}: {problem}")
        return
    r.folders += 1
    if not _replay_folder(poster, left, r.signal, target, r, dead, timeout):
        left.remove()


def _replay_folder(
    poster: Poster,
    folder: store.LeftFolder,
    sig: str,
    target: tuple[str, dict[str, str]],
    r: SpoolResult,
    dead: set[str],
    timeout: float,
) -> int:
    """Send one signal folder's batches, oldest first; the number left in it."""
    url, hdrs = target
    hdrs = {k: v for k, v in hdrs.items() if k.lower() != "content-type"} | {"Content-Type": "application/x-protobuf"}
    left = 0
    dir_fd = folder.dir_fd
    for name in folder.batch_names():
        body = store.read_batch(dir_fd, name)
        message = parse(sig, body) if body is not None else None
        if message is None or body is None:
            r.unreadable += 1
            r.errors.append(f"{name}: not a readable {sig} request (kept)")
            left += 1
            continue
        if sig in dead:
            r.failed += 1
            left += 1
            continue
        try:
            answer = poster.post(url, body, hdrs, timeout)
        except NoAnswer as exc:
            r.failed += 1
            r.errors.append(f"{endpoints.shown(url)}: {exc}")
            dead.add(sig)
            left += 1
            continue
        if not answer.ok:
            r.failed += 1
            r.errors.append(f"{name}: HTTP {answer.status} {printable(answer.reason, 80)}".rstrip())
            left += 1
            continue
        r.rejected += _rejected(sig, answer)
        r.batches += 1
        r.items += _items(sig, message)
        r.bytes += len(body)
        store.unlink(name, dir_fd)
    return left


def _print(r: SpoolResult, out: TextIO) -> None:
    if not (r.folders or r.busy or r.elsewhere):
        print(f"{r.signal:8s} nothing spooled", file=out)
        return
    line = (
        f"{r.signal:8s} -> {endpoints.shown(r.url)}: {r.items} {ITEMS[r.signal]} in {r.batches} batches "
        f"({spool_size(r.bytes)}) from {r.folders} spool folders"
    )
    if r.failed:
        line += f"; {r.failed} batches not accepted (kept)"
    if r.unreadable:
        line += f"; {r.unreadable} files unreadable (kept)"
    if r.rejected:
        line += f"; {r.rejected} {ITEMS[r.signal]} rejected by the endpoint"
    if r.busy:
        line += f"; {len(r.busy)} folders in use by a running process (left alone)"
    if r.elsewhere:
        line += f"; {len(r.elsewhere)} folders recorded for another endpoint (kept)"
    print(line, file=out)
    print_errors(r.errors + r.elsewhere, out)


def spool_size(n: int) -> str:
    return f"{n / store.MIB:.1f} MiB" if n >= store.MIB else f"{n / 1024:.1f} KiB"
