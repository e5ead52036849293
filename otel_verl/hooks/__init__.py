"""Hooks, one module per verl subsystem they patch; each module exposes ``HOOKS``.

Where things are made (the full list of names: docs/reference.md):

* ``stages``: step and stage spans (verl's timer);
* ``trainer``: run identity, ``verl.init`` / ``verl.validation`` spans, flush at the end of ``fit``;
* ``tracking``: every value ``Tracking.log`` sees -> metrics;
* ``workers``: worker-group calls (driver) and the worker ranks' spans;
* ``rollout/``: trajectory, LLM-call, reward and tool spans in the agent-loop workers;
* ``waits``: ``verl.wait`` spans where the trainer waits (v1 replay buffer); ``waiting_for`` what
  such a wait waits for (the prompt groups in flight), ``poll_lag`` how long it waited after they were done;
* ``accounting``: where a step's time went, from its stage and wait spans (per role in goodput
  buckets: ``otel_verl.instruments.goodput``);
* ``replicas``: ``verl.replicas.*`` spans where the trainer sleeps, wakes, syncs and resumes the replicas;
* ``samples``: opt-in sampled generations as log records;
* ``callbacks``: verl's documented v1 hooks (checkpoint callback, step callbacks), attached to
  each trainer object, each with a patch as its fallback;
* ``guard/``: the guard, rules over each step's values and each rule's action (record, alert,
  checkpoint, stop), its checkpoint (never at the cost of one of verl's) and its stop's marker and exit code;
* ``ray_launch``: ``ray.init`` hands the ``OTEL_*`` settings to the job's Ray workers.
  ``rl_insight``: there too, one warning when verl's RL-Insight logger would send the OTLP headers to its server.

``hookset`` applies them on import (``compat``: which apply to the installed verl), ``spans`` is
the one traced-call shape they share, ``verl_async`` where a hook's code goes in verl's
``auto_await`` methods, ``per_trainer`` the one way they read a fact of the trainer's config once
per run, ``targets`` names every verl/Ray module they touch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the package itself loads nothing: ``hooks.guard.rules`` is read by the offline tools too
    from otel_verl.hooks.hookset import Hook


def all_hooks() -> list[Hook]:
    """Every hook otel-verl installs (the instrumentor's list, and what ``doctor`` checks)."""
    from otel_verl.hooks import (
        callbacks,
        ray_launch,
        replicas,
        rollout,
        samples,
        stages,
        tracking,
        trainer,
        waits,
        workers,
    )
    from otel_verl.hooks.guard import actions as guard_actions
    from otel_verl.hooks.guard import checkpoint as guard_checkpoint
    from otel_verl.hooks.guard import generation as guard_generation

    return [
        *stages.HOOKS,
        *callbacks.HOOKS,  # before trainer's: its fit wrapper ends a failed step's span before the flush
        *trainer.HOOKS,
        *tracking.HOOKS,
        *workers.HOOKS,
        *waits.HOOKS,
        *replicas.HOOKS,
        *ray_launch.HOOKS,
        *samples.HOOKS,
        *rollout.HOOKS,
        *guard_checkpoint.HOOKS,
        *guard_generation.HOOKS,
        *guard_actions.HOOKS,  # last: its fit wrapper is the outermost (the others' flush runs inside it)
    ]
