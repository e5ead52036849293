"""Where each process was when the run stalled: the stall doctor's latest stacks of each."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from otel_verl import semconv
from otel_verl.offline.otlp_files import LogEntry
from otel_verl.offline.values import as_number


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
