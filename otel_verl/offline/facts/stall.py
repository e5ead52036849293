"""Where each process was when the run stalled: the stall doctor's latest stacks of each."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from otel_verl import semconv
from otel_verl.offline.folds import Fold
from otel_verl.offline.otlp_files import LogEntry
from otel_verl.offline.values import as_number
from otel_verl.printable import printable


@dataclass
class StallReport:
    """The latest ``verl.stall.stacks`` record of one process, as the stall doctor sent it."""

    process: str  # "HFCPUServer (ray_actor) pid 7161 on node1"
    step: int | None
    episode: int | None
    seconds: float | None
    stacks: str
    trace_id: str

    def where(self) -> list[str]:
        """One line per thread but telemetry's own: its innermost frame outside Python's standard
        library (a thread waiting in ``threading.Event.wait`` is stuck where it called it)."""
        out: list[str] = []
        for block in self.stacks.split("\n\n"):
            lines = [line for line in block.splitlines() if line.strip()]
            if not lines or lines[0].startswith(_TELEMETRY_THREADS):
                continue
            frames = [line.strip() for line in lines[1:] if line.strip().startswith("File ")]
            own = [f for f in frames if not _STDLIB.search(f)]
            shown = (own or frames or ["(no Python frames)"])[-1]
            name = lines[0].split(" (ident", 1)[0]
            out.append(f"{name}: {shown.removeprefix('File ')}")
        return out


_TELEMETRY_THREADS = ('Thread "Otel', 'Thread "otel-verl')  # the SDK's and our own export threads


_STDLIB = re.compile(r'File "[^"]*/lib/python3\.\d+/(?!site-packages/)')


def stall_reports(records: Iterable[LogEntry]) -> tuple[list[LogEntry], list[StallReport]]:
    """The run's ``verl.training.stalled`` records, and each process's latest stacks (by process)."""
    stalled = sorted((r for r in records if r.event_name == semconv.EVENT_TRAINING_STALLED), key=lambda r: r.time_ns)
    latest: dict[tuple[Any, Any], LogEntry] = {}
    for r in records:
        if r.event_name != semconv.EVENT_STALL_STACKS:
            continue
        key = (r.resource.get(semconv.RES_HOST_NAME), r.resource.get(semconv.RES_PROCESS_PID))
        if key not in latest or r.time_ns >= latest[key].time_ns:
            latest[key] = r
    reports = []
    for (host, pid), r in sorted(latest.items(), key=lambda kv: str(kv[0])):
        role = r.resource.get(semconv.RES_ROLE, "?")
        rank = r.resource.get(semconv.RES_RANK)
        actor = r.attributes.get(semconv.ATTR_RAY_ACTOR_CLASS)
        who = f"{actor} ({role}{'' if rank is None else f' rank {rank}'})" if actor else str(role)
        step, episode = (
            as_number(r.attributes.get(semconv.ATTR_STEP)),
            as_number(r.attributes.get(semconv.ATTR_STALL_EPISODE)),
        )
        seconds = as_number(r.attributes.get(semconv.ATTR_STALL_SECONDS))
        reports.append(
            StallReport(
                process=f"{who} pid {pid} on {host}",
                step=None if step is None else int(step),
                episode=None if episode is None else int(episode),
                seconds=seconds,
                stacks=r.body,
                trace_id=r.trace_id,
            )
        )
    return stalled, reports


class Stall(Fold):
    """The stall doctor's records: ``stall_reports`` of them."""

    EVENTS = frozenset({semconv.EVENT_TRAINING_STALLED, semconv.EVENT_STALL_STACKS})

    def __init__(self) -> None:
        self.records: list[LogEntry] = []

    def on_log(self, r: LogEntry) -> None:
        self.records.append(r)

    def close(self) -> tuple[list[LogEntry], list[StallReport]]:
        return stall_reports(self.records)


def lines(stalled: list[LogEntry], reports: list[StallReport]) -> list[str]:
    """The summary's lines on the stall: where each process was when the run stalled (the stall
    doctor's latest report of each, ``stall_reports``); none when the run did not stall."""
    if not reports and not stalled:
        return []
    first = stalled[0].attributes if stalled else {}
    step = first.get(semconv.ATTR_STEP, reports[0].step if reports else None)
    seconds = as_number(first.get(semconv.ATTR_STALL_SECONDS))
    waited = "?" if seconds is None else f"{seconds:.0f}"
    out = ["", f"STALLED at step {step}: no training step finished for {waited} s; "]
    waiting = [line for line in (_waiting(first),) if line]
    if not reports:
        out[-1] += "no process's stacks are in these files (the verl.stall.stacks log records)"
        return out + waiting
    out[-1] += f"where each of {len(reports)} processes was (each thread's innermost frame outside the"
    out[-1] += " standard library):"
    out += waiting
    for report in reports:
        out.append(f"  {report.process}:")
        out += [f"    {line}" for line in report.where()]
    out.append("  full stacks: log records verl.stall.stacks in logs-*.jsonl, and in otel-verl report")
    return out


def _waiting(stalled: dict) -> str:
    """The stalled record's v1 wait (``hooks.waiting_for``) in words, or ``""``: ``the trainer was
    waiting for rollouts (train) for 29 s: 0 of 4 needed groups finished, 4 running; oldest in
    flight: <uid> (running 28 s on <replica>, step 2), ...``."""
    if stalled.get(semconv.ATTR_WAIT_FOR) != semconv.WAIT_ROLLOUTS:
        return ""
    elapsed, needed = as_number(stalled.get(semconv.ATTR_WAIT_ELAPSED)), stalled.get(semconv.ATTR_WAIT_NEEDED)
    counts = {
        k: stalled.get(a)
        for k, a in (
            ("finished", semconv.ATTR_WAIT_FINISHED),
            ("pending", semconv.ATTR_WAIT_PENDING),
            ("running", semconv.ATTR_WAIT_RUNNING),
            ("failed", semconv.ATTR_WAIT_FAILED),
        )
    }
    text = f"  the trainer was waiting for rollouts ({printable(stalled.get(semconv.ATTR_WAIT_PARTITION, '?'), 16)})"
    text += "" if elapsed is None else f" for {elapsed:.0f} s"
    text += f": {printable(counts['finished'], 12)}" + ("" if needed is None else f" of {printable(needed, 12)} needed")
    text += " groups finished, " + ", ".join(
        f"{printable(counts[k], 12)} {k}" for k in ("pending", "running", "failed")
    )
    uids = stalled.get(semconv.ATTR_WAIT_OLDEST_UIDS)
    if isinstance(uids, tuple | list) and uids:

        def at(key: str, i: int) -> object:
            values = stalled.get(key)
            return values[i] if isinstance(values, tuple | list) and i < len(values) else None

        named = []
        for i, uid in enumerate(uids[:8]):
            state, age, step, replica = (
                at(k, i)
                for k in (
                    semconv.ATTR_WAIT_OLDEST_STATES,
                    semconv.ATTR_WAIT_OLDEST_AGES,
                    semconv.ATTR_WAIT_OLDEST_STEPS,
                    semconv.ATTR_WAIT_OLDEST_REPLICAS,
                )
            )
            how = printable(state or "?", 12)
            age = as_number(age)
            how += f" {age:.0f} s" if age is not None and state == "running" else ""
            how += f" on {printable(replica, 128)}" if isinstance(replica, str) and replica else ""
            how += f", step {printable(step, 12)}" if step is not None else ""
            named.append(f"{printable(uid, 64)} ({how})")
        text += "; oldest in flight: " + ", ".join(named)
    return text
