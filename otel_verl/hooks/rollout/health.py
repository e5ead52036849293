"""Generation health: degenerate responses, measured on token ids (never their text).

Every trajectory's final response (``AgentLoopOutput.response_ids``, the unpadded ids verl scores)
is checked once, on the agent loop's event loop, when its reward is computed (``trajectory``):

* ``length_limit``: the response is as long as ``rollout.response_length`` (verl cuts it there;
  the engine's finish reason cannot tell: verl's vLLM server reports ``length`` as ``completed``);
* ``empty``: no token, or only end-of-sequence / padding tokens;
* ``repetitive``: the response's repetition (``seq-rep-4``: the share of its 4-grams that repeat
  an earlier one, ``1 - distinct / all``) is at least ``REPETITIVE_AT``. Read over its last
  ``MAX_EXAMINED`` tokens only: a model that collapses into a loop loops to the end, and the cap
  bounds the cost per trajectory whatever the response length (a loop whose period is up to about
  half the window is caught).

Per step (a group of trajectories in this worker, as the long tail), the share of each kind is the
gauge ``verl.rollout.degenerate_ratio`` (``verl.rollout.degenerate.kind``); a recorded trajectory
span carries its repetition and its kinds, so a degenerate trajectory's trace can be found.
"""

from __future__ import annotations

from typing import Any

from otel_verl import semconv

NGRAM = 4
MAX_EXAMINED = 256  # tokens of a response's end the repetition is read over
REPETITIVE_AT = 0.5  # seq-rep-4 from which a response counts as repetitive
_SHORT = 4  # a response of at most this many tokens, all of them stop tokens, is empty

KINDS = (semconv.DEGENERATE_LENGTH_LIMIT, semconv.DEGENERATE_EMPTY, semconv.DEGENERATE_REPETITIVE)


def repetition(ids: Any) -> float:
    """``seq-rep-4`` of the last ``MAX_EXAMINED`` token ids: 0 when no 4-gram repeats, near 1 in a loop."""
    tail = ids[-MAX_EXAMINED:]
    n = len(tail) - NGRAM + 1
    if n <= 1:
        return 0.0
    return 1.0 - len(set(zip(tail, tail[1:], tail[2:], tail[3:], strict=False))) / n


class Limits:
    """What one worker's responses are measured against: its max response length and stop tokens."""

    __slots__ = ("max_length", "stops")

    def __init__(self, max_length: int | None, stops: frozenset[int]) -> None:
        self.max_length = max_length
        self.stops = stops

    @classmethod
    def of_worker(cls, worker: Any) -> Limits:
        """From verl's ``AgentLoopWorker``: ``rollout_config.response_length``, the tokenizer's eos and pad ids."""
        length = getattr(getattr(worker, "rollout_config", None), "response_length", None)
        return cls.of(length, getattr(worker, "tokenizer", None))

    @classmethod
    def of_trainer(cls, trainer: Any) -> Limits:
        """In the TaskRunner, from the trainer's config (the workers' own): ``actor_rollout_ref.rollout``."""
        rollout = getattr(getattr(getattr(trainer, "config", None), "actor_rollout_ref", None), "rollout", None)
        return cls.of(getattr(rollout, "response_length", None), getattr(trainer, "tokenizer", None))

    @classmethod
    def of(cls, length: Any, tokenizer: Any) -> Limits:
        """From a ``rollout.response_length`` and a tokenizer (the worker's, or the trainer's: the same config)."""
        max_length = length if isinstance(length, int) and not isinstance(length, bool) and length > 0 else None
        stops: set[int] = set()
        for name in ("eos_token_id", "pad_token_id"):
            value = getattr(tokenizer, name, None)
            if isinstance(value, int):
                stops.add(value)
            elif isinstance(value, (list, tuple)):
                stops.update(v for v in value if isinstance(v, int))
        return cls(max_length, frozenset(stops))


def measure(ids: Any, limits: Limits) -> tuple[float, tuple[str, ...]]:
    """(repetition, the degenerate kinds) of one response's token ids (a list, or a 1-D tensor / array).

    Only the last ``MAX_EXAMINED`` ids are read (a tensor's are the only ones converted), so the cost
    is bounded whatever the response length.
    """
    n = len(ids)
    tail = ids[-MAX_EXAMINED:]
    if not isinstance(tail, (list, tuple)):
        tail = tail.tolist()
    kinds: list[str] = []
    if limits.max_length is not None and n >= limits.max_length:
        kinds.append(semconv.DEGENERATE_LENGTH_LIMIT)
    if n == 0 or (n <= _SHORT and all(t in limits.stops for t in tail)):  # n <= _SHORT: tail is all of it
        kinds.append(semconv.DEGENERATE_EMPTY)
    rep = repetition(tail)
    if rep >= REPETITIVE_AT:
        kinds.append(semconv.DEGENERATE_REPETITIVE)
    return rep, tuple(kinds)


class Tally:
    """The degenerate responses of a group since its last end (what the step's gauge says)."""

    __slots__ = ("measured", "counts")

    def __init__(self) -> None:
        self.measured = 0
        self.counts = dict.fromkeys(KINDS, 0)

    def add(self, kinds: tuple[str, ...]) -> None:
        self.measured += 1
        for kind in kinds:
            self.counts[kind] += 1

    def ratios(self) -> dict[str, float] | None:
        """Each kind's share of the responses measured, and start over; None if none was."""
        if not self.measured:
            return None
        out = {kind: n / self.measured for kind, n in self.counts.items()}
        self.measured = 0
        self.counts = dict.fromkeys(KINDS, 0)
        return out
