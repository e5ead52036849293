"""The engine's request spans of an undecided trajectory tree, handed back to the tree's process.

A trajectory's tree is exported or dropped as a whole when it ends (``trajectory``), in its
agent-loop worker; the engine (vLLM's ``llm_request``) records its span of each LLM call in the
rollout server's process, under the call's record (``engine_context``: a ``traceparent`` marked
*held*). The same decision reaches those spans this way, as it reaches the reward worker's
(``reward_worker``):

* server side (``hold``/``give``, in ``server.generate_wrapper``): before verl's ``generate``
  runs, the call's record becomes a tree of this process's ``TreeBuffer``, so the engine's span
  under it is held instead of exported; when ``generate`` returns (the engine ended its span
  before it handed over the finished output), the held spans go back with verl's reply, under
  ``HANDBACK_KEY`` in its ``extra_fields``. A request that fails exports its spans from here (its
  trajectory fails too, and failed ones are always kept); a reply without an ``extra_fields`` dict
  drops them; an engine span that ends after the reply left is dropped (the tree's late rule);
* worker side (``take``, in ``llm.generate_wrapper``): the key is taken out of the reply before
  verl's code reads it, and the data joins the trajectory's hand-backs, exported with its tree.
"""

from __future__ import annotations

from typing import Any

from otel_verl.hooks.rollout import span_records
from otel_verl.process.span_trees import Tree
from otel_verl.process.state import PROCESS

HANDBACK_KEY = "_otel_verl_engine_spans"  # in the reply's extra_fields: the engine's spans of a held call


def hold(parent: str) -> Tree | None:
    """A tree for the engine spans under ``parent`` (a held ``traceparent``), or None (no buffer here)."""
    trees = PROCESS.telemetry.trees
    if trees is None or not trees.in_path:
        return None
    return trees.open(int(parent[36:52], 16))


def give(tree: Tree, result: Any, error: BaseException | None) -> None:
    """Hand ``tree``'s held spans back in verl's ``result``, or export them (``error``) here."""
    trees = PROCESS.telemetry.trees
    if trees is None:
        return
    extra = getattr(result, "extra_fields", None)
    if error is not None or not isinstance(extra, dict):
        trees.end(tree, error is not None)
        return
    extra[HANDBACK_KEY] = span_records.to_wire((), trees.take(tree), trees.resource)


def take(output: Any) -> Any:
    """The engine's spans handed back in a reply (taken out of it), or None."""
    extra = getattr(output, "extra_fields", None)
    return extra.pop(HANDBACK_KEY, None) if isinstance(extra, dict) else None
