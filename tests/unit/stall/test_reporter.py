"""Every process's side (``otel_verl.stall.reporter``, ``stacks``, ``board``): the stacks of all
threads, once per publication, linked to the step's trace."""

from __future__ import annotations

import importlib.metadata
import logging
import sys
import threading
import types

import pytest

from otel_verl import config, semconv
from otel_verl import job_board as board
from otel_verl.stall import reporter, stacks

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"


def _blocked_in_a_named_function(ready: threading.Event, release: threading.Event) -> None:
    ready.set()
    release.wait()


@pytest.fixture
def blocked_thread():
    ready, release = threading.Event(), threading.Event()
    t = threading.Thread(target=_blocked_in_a_named_function, args=(ready, release), name="stuck-one", daemon=True)
    t.start()
    ready.wait(5)
    yield t
    release.set()
    t.join(5)


def test_format_stacks_names_where_each_thread_is(blocked_thread):
    text = stacks.format_stacks()
    assert 'Thread "stuck-one"' in text and "_blocked_in_a_named_function" in text
    assert 'Thread "MainThread"' in text


def test_a_publication_is_reported_once_with_the_steps_trace(logged, monkeypatch, blocked_thread):
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "run-r")
    config.settings.cache_clear()
    state = {"state": "stalled", "episode": 1, "seq": 1, "step": 4, "stalled_s": 31.5, "trace_id": TRACE}
    state["span_id"] = SPAN
    monkeypatch.setattr(board, "read", lambda run_id: dict(state))
    reporter.REPORTER.stop()  # this process's own reporter (instrumented by the fixture) stays out of it
    rep = reporter.Reporter()
    assert rep.poll() is True
    assert rep.poll() is False  # the same publication
    state["seq"] = 2
    assert rep.poll() is True  # the bounded repeat
    state["state"] = "resumed"
    assert rep.poll() is False
    records = logged.records()
    assert [r.event_name for r in records] == [semconv.EVENT_STALL_STACKS] * 2
    rec = records[0]
    assert "_blocked_in_a_named_function" in rec.body
    assert rec.attributes[semconv.ATTR_STEP] == 4 and rec.attributes[semconv.ATTR_STALL_EPISODE] == 1
    assert format(rec.trace_id, "032x") == TRACE and format(rec.span_id, "016x") == SPAN
    # the event name also as an attribute: Loki 3.7 stores attributes (structured metadata event_name),
    # not the EventName field, so docs/stall-doctor.md's `| event_name="verl.stall.stacks"` finds it
    assert {r.attributes[semconv.ATTR_EVENT_NAME] for r in records} == {semconv.EVENT_STALL_STACKS}


def _fake_kv(monkeypatch, store):
    kv = types.ModuleType("ray.experimental.internal_kv")
    kv._internal_kv_initialized = lambda: True
    kv._internal_kv_put = lambda key, value, overwrite, namespace: store.__setitem__((namespace, key), value)
    kv._internal_kv_get = lambda key, namespace: store.get((namespace, key))
    import ray.experimental

    monkeypatch.setattr(ray.experimental, "internal_kv", kv, raising=False)
    monkeypatch.setitem(sys.modules, "ray.experimental.internal_kv", kv)


def test_board_round_trip_through_rays_kv(monkeypatch):
    store = {}
    _fake_kv(monkeypatch, store)
    assert board.publish("run-b", {"state": "stalled", "episode": 3})
    assert board.read("run-b") == {"state": "stalled", "episode": 3}
    assert board.read("other-run") is None
    assert list(store) == [(board.NAMESPACE, b"stall:run-b")]


def test_no_ray_kv_means_off_said_once_with_rays_version(monkeypatch, caplog):
    import ray.experimental

    broken = types.ModuleType("ray.experimental.internal_kv")  # a Ray that renamed its private API
    monkeypatch.setitem(sys.modules, "ray.experimental.internal_kv", broken)
    monkeypatch.setattr(ray.experimental, "internal_kv", broken, raising=False)
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        assert board.read("run-x") is None
        assert board.publish("run-x", {}) is False
    messages = [r.getMessage() for r in caplog.records if "stall doctor is off" in r.getMessage()]
    assert (
        len(messages) == 1
        and f"ray {importlib.metadata.version('ray')} has no ray.experimental.internal_kv." in messages[0]
    )
