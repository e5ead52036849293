"""``TreeBuffer``: the span processor that holds the spans of a tree until its fate is decided.

Some span trees are exported or dropped as a whole, decided only when they end (a rollout
trajectory: kept if it was among its step's slowest, failed, or sampled; ``hooks/rollout``).
The spans otel-verl makes in such a tree are plain records (``span_records``) until then; spans
that other code starts under them with the plain OpenTelemetry API (a user's agent loop or
reward function) are real SDK spans, sampled because their parent says so. ``TreeBuffer`` sits
in front of the export processors (it is the provider's active span processor, holding them) and
keeps those spans back:

* a tree is opened with its root's span id (``open``); a span whose parent is a member becomes
  one (``on_start``: the parent's span id, one dict lookup), and its ended span is held
  (``on_end``) instead of reaching the exporters;
* ``end(tree, keep)`` hands the held spans (and the tree's records, made spans) to the exporters,
  or drops them; ``take(tree)`` gives them to the caller (a reward worker hands them back to the
  trajectory's process). A member still open then follows the decision when it ends (a bounded
  table), and so do its children;
* every other span passes straight through: one empty-dict check per start and end.

Memory is bounded: at most ``MAX_TREE_SPANS`` held spans per tree and ``MAX_HELD_SPANS`` in the
process; beyond that a span of an undecided tree is dropped and counted (the tree's ``dropped``,
which goes on its root, and ``otel_verl.telemetry.dropped{otel_verl.dropped.kind=span_tree}``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, SynchronousMultiSpanProcessor

from otel_verl import private_api, semconv
from otel_verl.instruments import drops

MAX_TREE_SPANS = 256  # held spans of one tree
MAX_HELD_SPANS = 4096  # held spans of all undecided trees of the process
MAX_LATE = 1024  # members of decided trees still open, remembered to follow the decision

PENDING, KEPT, DROPPED, TAKEN = 0, 1, 2, 3
_SDK = ("opentelemetry-sdk",)
_WHY = f"the hold-back bound of {MAX_TREE_SPANS} per tree, {MAX_HELD_SPANS} per process"


class Tree:
    """The members of one undecided tree and its held spans."""

    __slots__ = ("ids", "open", "spans", "state", "dropped")

    def __init__(self) -> None:
        self.ids: list[int] = []  # member span ids (records and SDK spans)
        self.open: set[int] = set()  # SDK members not ended yet
        self.spans: list[ReadableSpan] = []
        self.state = PENDING
        self.dropped = 0  # spans left out by the bounds


class TreeBuffer(SpanProcessor):
    """The export processors (``inner``) behind a hold-back for undecided trees.

    ``in_path`` False: a buffer over a provider it is not the active processor of (a provider
    given to ``instrument()``): trees then hold no SDK spans, ``end`` still exports the records.
    """

    def __init__(self, inner: Any = None, *, in_path: bool = True) -> None:
        self.inner = inner if inner is not None else SynchronousMultiSpanProcessor()
        self.in_path = in_path
        # The SDK calls its active processor's ``_on_ending`` (its own hook, no API); passed on when
        # the inner one has it (said once otherwise: only processors that use it lose it).
        self._inner_on_ending = private_api.attribute(
            self.inner,
            "_on_ending",
            name="opentelemetry.sdk.trace.SynchronousMultiSpanProcessor._on_ending",
            dists=_SDK,
            effect="span processors do not see spans that are ending",
        )
        self._lock = threading.Lock()
        self._members: dict[int, Tree] = {}
        self._late: OrderedDict[int, bool] = OrderedDict()  # span id -> keep
        self._held = 0
        # what records of trees need to become this provider's spans (``for_provider``)
        self.resource: Any = None
        self._sampler: Any = None
        # the sampler is the SDK's default (parent-based, always on): a record is sampled exactly
        # when its parent is (or it is a root), so its start needs no sampler call
        self.by_parent = False
        self.scope: Any = None

    @property
    def sampler(self) -> Any:
        """The provider's sampler, which records of trees are sampled by."""
        return self._sampler

    @sampler.setter
    def sampler(self, sampler: Any) -> None:
        self._sampler = sampler
        self.by_parent = _is_default_sampler(sampler)

    # -- the SDK's active-span-processor interface ------------------------------------
    def add_span_processor(self, span_processor: SpanProcessor) -> None:
        self.inner.add_span_processor(span_processor)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if self._members or self._late:
            parent = span.parent
            if parent is not None:
                self._join_child(parent.span_id, span.context.span_id)
        self.inner.on_start(span, parent_context=parent_context)

    def _on_ending(self, span: Any) -> None:
        if self._inner_on_ending is not None:
            self._inner_on_ending(span)

    def on_end(self, span: ReadableSpan) -> None:
        if self._members or self._late:
            span_id = span.context.span_id
            tree = self._members.get(span_id)
            if tree is not None:
                self._hold(tree, span)
                return
            if span_id in self._late:
                with self._lock:
                    keep = self._late.pop(span_id, True)
                if not keep:
                    return
        self.inner.on_end(span)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)

    # -- trees ----------------------------------------------------------------------
    def open(self, root_id: int) -> Tree:
        """A new tree whose root has span id ``root_id`` (a record: it never ends here as an SDK span)."""
        tree = Tree()
        # no lock: no other thread knows the tree yet, and each step is one atomic operation
        tree.ids.append(root_id)
        self._members[root_id] = tree
        return tree

    def join(self, tree: Tree, span_id: int) -> None:
        """Make ``span_id`` (one of the tree's records that may be a parent) a member."""
        with self._lock:
            if tree.state == PENDING:
                tree.ids.append(span_id)
                self._members[span_id] = tree

    def _join_child(self, parent_id: int, span_id: int) -> None:
        tree = self._members.get(parent_id)
        if tree is not None:
            with self._lock:
                if tree.state == PENDING:
                    tree.ids.append(span_id)
                    tree.open.add(span_id)
                    self._members[span_id] = tree
                    return
        if parent_id in self._late:
            with self._lock:
                keep = self._late.get(parent_id)
                if keep is not None:
                    self._remember(span_id, keep)

    def _hold(self, tree: Tree, span: ReadableSpan) -> None:
        with self._lock:
            state = tree.state
            if state == PENDING:
                tree.open.discard(span.context.span_id)
                if len(tree.spans) < MAX_TREE_SPANS and self._held < MAX_HELD_SPANS:
                    tree.spans.append(span)
                    self._held += 1
                    return
                tree.dropped += 1
        if state == PENDING:
            drops.dropped(semconv.DROPPED_SPAN_TREE, MAX_HELD_SPANS, _WHY)
        elif state == KEPT:  # decided while this span ended: it follows the decision
            self.inner.on_end(span)

    def _close(self, tree: Tree, state: int) -> list[ReadableSpan]:
        with self._lock:
            if tree.state != PENDING:
                return []
            tree.state = state
            for span_id in tree.ids:
                self._members.pop(span_id, None)
            for span_id in tree.open:
                self._remember(span_id, state == KEPT)
            spans, tree.spans = tree.spans, []
            self._held -= len(spans)
            tree.ids, tree.open = [], set()
        return spans

    def _remember(self, span_id: int, keep: bool) -> None:
        # under self._lock
        self._late[span_id] = keep
        while len(self._late) > MAX_LATE:
            self._late.popitem(last=False)

    def end(self, tree: Tree, keep: bool, spans: Iterable[ReadableSpan] = ()) -> None:
        """Decide ``tree``: export its held spans and ``spans`` (its records, made spans), or drop all."""
        held = self._close(tree, KEPT if keep else DROPPED)
        if keep:
            self.export(spans)
            self.export(held)

    def take(self, tree: Tree) -> list[ReadableSpan]:
        """Close ``tree`` and return its held spans (handed to another process; late ones are dropped)."""
        return self._close(tree, TAKEN)

    def export(self, spans: Iterable[ReadableSpan]) -> None:
        for span in spans:
            self.inner.on_end(span)

    @property
    def held(self) -> int:
        return self._held

    @property
    def trees(self) -> int:
        """Undecided trees (tests)."""
        return len({id(t) for t in self._members.values()})


def for_provider(provider: Any, scope: Any, buffer: TreeBuffer | None = None) -> TreeBuffer | None:
    """The ``TreeBuffer`` of an SDK ``provider`` (``buffer``: the one built into it), with what records
    need to become its spans: its resource and sampler, and ``scope``. None for a provider that is
    not the SDK's (no-op, proxy): records of trees then never become spans."""
    from opentelemetry.sdk.trace import TracerProvider

    if not isinstance(provider, TracerProvider):
        return None
    if buffer is None:
        # A provider given to instrument(): its multi-processor is its own attribute, no API. Without
        # it (said once) no tree is exported, the safe direction: nothing else changes.
        active = private_api.attribute(
            provider,
            "_active_span_processor",
            name="opentelemetry.sdk.trace.TracerProvider._active_span_processor",
            dists=_SDK,
            effect="rollout trajectory spans are not exported",
        )
        if active is None:
            return None
        buffer = active if isinstance(active, TreeBuffer) else TreeBuffer(active, in_path=False)
    buffer.resource = provider.resource
    buffer.sampler = provider.sampler
    buffer.scope = scope
    return buffer


def _is_default_sampler(sampler: Any) -> bool:
    from opentelemetry.sdk.trace.sampling import DEFAULT_ON, ParentBased

    try:  # the sampler's own description names its delegates (the public way to tell them apart)
        return type(sampler) is ParentBased and sampler.get_description() == DEFAULT_ON.get_description()
    except Exception:  # noqa: BLE001 - a sampler whose description fails: ask it each time
        return False
