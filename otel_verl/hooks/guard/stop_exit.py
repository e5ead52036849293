"""A guard stop that a scheduler can tell from a finished run: a marker file and an exit code.

A guard ``stop`` ends training through verl's own end of training, so the job exits 0 like a run
that finished. Two ways for Slurm, a KubeRay ``RayJob`` or a wrapper script to tell:

* the marker: at the stop, the TaskRunner writes ``OTEL_VERL_GUARD_MARKER`` (default
  ``otel-verl-guard-stop.json`` in ``trainer.default_local_dir``, next to the checkpoint the guard
  saved), whole or not at all (``commands.atomic``): JSON with the run id, the step, the rules
  that fired, the checkpoint, what ``trainer.resume_mode=auto`` resumes from and the exit code
  asked for. A later run that starts training with
  the same marker path removes it (only a file that holds such a marker);
* the exit code (opt-in, ``OTEL_VERL_GUARD_EXIT_CODE``, default 0: rc 0 as before): the
  TaskRunner also puts the stop on the job board (``otel_verl.job_board``, topic ``guard``); in the
  launcher, verl's ``run_ppo`` calls ``ray.init`` and then waits for the TaskRunner with
  ``ray.get``; when that ``ray.get`` returns and the board holds a stop of this run, the launcher
  says so in one line and raises ``SystemExit(code)``, so its ``atexit`` handlers (Ray's shutdown,
  the telemetry flush) still run. Only that ``ray.get`` (from the function that called
  ``ray.init``) is looked at, and ``ray.get`` is wrapped only when a code is asked for.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from types import CodeType
from typing import Any

from otel_verl import config, job_board, patches, private_api
from otel_verl._safe import safe, warn_once
from otel_verl.atomic import write_file
from otel_verl.config import settings
from otel_verl.package import PYTHON

MARKER_KIND = "otel_verl.guard_stop"  # the marker's "kind": what a stale-marker cleanup looks for
MAX_MARKER_BYTES = 64 * 1024

_launcher_caller: CodeType | None = None  # the code of the function that called ray.init
_getframe: Any = None  # sys._getframe, once looked up (a private name of Python's)


def marker_path(trainer: Any) -> str:
    """Where the marker goes: ``OTEL_VERL_GUARD_MARKER``, else next to verl's checkpoints."""
    own = settings().guard_marker
    if own:
        return os.path.abspath(own)
    folder = str(trainer.config.trainer.default_local_dir)
    return os.path.abspath(os.path.join(folder, config.GUARD_MARKER_NAME))


@safe("guard stop marker")
def stopped(trainer: Any, step: int, rules: list[str], reason: str, saved: Any, why: str | None) -> None:
    """The guard stops training after ``step``: write the marker, tell the launcher. ``saved`` is the
    guard's ``checkpoint.Saved``: the checkpoint of that step, and what resuming picks."""
    code = settings().guard_exit_code
    doc = {
        "kind": MARKER_KIND,
        "run_id": settings().run_id,
        "step": step,
        "rules": rules,
        "reason": reason,
        "checkpoint": saved.folder,
        "without_checkpoint": why,
        "resume": settings().guard_resume,
        "resumes_from": saved.resumes_from,
        "exit_code": code,
        "time": time.time(),
    }
    path = None
    try:
        path = marker_path(trainer)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_file(path, (json.dumps(doc, indent=1) + "\n").encode())
        print(f"otel-verl guard: stop marker {path}", file=sys.stdout, flush=True)
    except Exception as exc:  # noqa: BLE001 - no marker: the launcher still learns of the stop
        warn_once("guard marker", "the guard could not write its stop marker %s: %s", path, exc)
        path = None
    if settings().run_id:
        job_board.publish(str(settings().run_id), {**doc, "marker": path}, topic=job_board.GUARD)


@safe("stale guard marker")
def clear_stale_marker(trainer: Any) -> None:
    """A new run starts training: an earlier run's stop marker at the same path is removed (only a
    regular file that holds one, and only that very file: the path may be the user's own, and the
    folder shared, so what is removed is checked to be what was read, never a link's target)."""
    path = marker_path(trainer)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_MARKER_BYTES:
            return
        doc = json.loads(os.read(fd, MAX_MARKER_BYTES))
    except (OSError, ValueError):
        return
    finally:
        os.close(fd)
    if not (isinstance(doc, dict) and doc.get("kind") == MARKER_KIND):
        return
    now = os.lstat(path)
    if (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino):
        os.unlink(path)


# ---------------------------------------------------------------- the launcher
_CALLER_EFFECT = "a guard stop ends the job with rc 0 (OTEL_VERL_GUARD_EXIT_CODE is not applied)"


@safe("guard exit code: launcher")
def launcher_ray_init() -> None:
    """Called by the ``ray.init`` hook in the launcher: with an exit code asked for, watch the
    ``ray.get`` of the function that called ``ray.init`` (verl's ``run_ppo``)."""
    global _launcher_caller
    if not settings().guard_exit_code or _launcher_caller is not None:
        return
    getframe = private_api.attribute(sys, "_getframe", name="sys._getframe", dists=(PYTHON,), effect=_CALLER_EFFECT)
    if getframe is None:
        return
    caller = _caller(getframe)
    if caller is None:
        return
    import ray

    global _getframe
    _getframe, _launcher_caller = getframe, caller
    patches.wrap(ray, "get", _get_then_exit)


def _caller(getframe: Any) -> CodeType | None:
    """The code of the first frame up the stack that is neither otel-verl's nor wrapt's."""
    frame = getframe(1)
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith(("otel_verl.", "wrapt")):
        frame = frame.f_back
    return None if frame is None else frame.f_code


def _get_then_exit(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    code = _exit_code()
    if code:
        raise SystemExit(code)  # the launcher's own exit: atexit handlers still run
    return result


@safe("guard exit code")
def _exit_code() -> int | None:
    """The exit code to end the launcher with: this ``ray.get`` is verl's wait for the TaskRunner
    and the TaskRunner stopped the run through the guard."""
    if _getframe is None or _caller(_getframe) is not _launcher_caller or not settings().run_id:
        return None
    stop = job_board.read(str(settings().run_id), topic=job_board.GUARD)
    if not stop or stop.get("kind") != MARKER_KIND:
        return None
    code = settings().guard_exit_code
    print(
        f"otel-verl guard: training was stopped after step {stop.get('step')} ({', '.join(stop.get('rules') or [])}); "
        f"exiting with {code} ({config.GUARD_EXIT_CODE}); marker {stop.get('marker')}",
        file=sys.stdout,
        flush=True,
    )
    return code
