"""Guard rules: conditions over verl's per-step values, and their evaluation step after step.

The rules and their file format: ``rules.yaml`` beside this module (the built-in defaults, and the
format of a user's ``OTEL_VERL_GUARD_RULES`` file: a regular file of at most ``MAX_FILE_BYTES``,
read by ``read_rules_file``, off the training thread by ``RulesLoad``). ``Evaluator.step`` is fed
the dict verl logs at each training step end and returns the rules that fire at that step: a rule
fires once when its condition becomes true for a key, and again only after the condition was
false in between. ``resolve_actions`` says what each rule does when it fires: its
``OTEL_VERL_GUARD_ACTIONS`` entry, else its own ``action``, else ``OTEL_VERL_GUARD_ACTION``.
"""

from __future__ import annotations

import fnmatch
import math
import os
import stat
import statistics
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from otel_verl._values import as_float
from otel_verl.config import GUARD_RULE_ACTIONS, GuardActions

KINDS = ("nonfinite", "above", "below", "drop", "ratio_below", "spike", "rise", "fall")
TRENDS = ("rise", "fall")  # early warnings: the mean of the last window steps against the window before
_NEEDS = {
    "above": ("threshold",),
    "below": ("threshold",),
    "drop": ("fraction", "window"),
    "ratio_below": ("ratio", "window"),
    "spike": ("factor", "window"),
    "rise": ("factor", "window"),
    "fall": ("fraction", "window"),
}
MAX_WINDOW = 100_000  # steps of history kept per rule and key
DEFAULT_MIN_STEPS = 5


class RuleError(ValueError):
    """A rules file that cannot be used (says which rule and why)."""


@dataclass(frozen=True)
class Rule:
    name: str
    kind: str
    keys: tuple[str, ...]
    threshold: float | None = None
    fraction: float | None = None
    ratio: float | None = None
    factor: float | None = None
    min_baseline: float = 0.0
    window: int = 0
    for_steps: int = 1
    min_steps: int = DEFAULT_MIN_STEPS
    alert: str | None = None
    action: str | None = None  # one of GUARD_RULE_ACTIONS; None: OTEL_VERL_GUARD_ACTION's

    def matches(self, key: str) -> bool:
        return any(fnmatch.fnmatchcase(key, pattern) for pattern in self.keys)

    @property
    def limit(self) -> float | None:
        """The number the condition compares against (for messages and the Prometheus check)."""
        for value in (self.threshold, self.fraction, self.ratio, self.factor):
            if value is not None:
                return value
        return None


@dataclass(frozen=True)
class Firing:
    """A rule that fired for a key at a step: ``value`` is the value verl logged (for a trend, the
    mean of the last ``window`` steps), ``baseline`` what a relative rule compared it with."""

    rule: Rule
    key: str
    value: float
    step: int
    baseline: float | None = None

    def describe(self) -> str:
        r, v = self.rule, self.value
        if r.kind == "nonfinite":
            what = f"{self.key}={v} is not finite"
        elif r.kind in ("above", "below"):
            what = f"{self.key}={v:.4g} {r.kind} {r.threshold:g} for {r.for_steps} step(s)"
        elif r.kind == "drop":
            what = f"{self.key}={v:.4g} is more than {r.fraction:.0%} below its recent mean {self.baseline:.4g}"
        elif r.kind == "ratio_below":
            what = f"{self.key}={v:.4g} is below {r.ratio:.0%} of its recent mean {self.baseline:.4g}"
        elif r.kind == "spike":
            what = f"{self.key}={v:.4g} is above {r.factor:g}x its recent median {self.baseline:.4g}"
        elif r.kind == "rise":
            what = (
                f"{self.key}'s mean over the last {r.window} steps {v:.4g} is above {r.factor:g}x "
                f"its mean over the {r.window} before {self.baseline:.4g}"
            )
        else:
            what = (
                f"{self.key}'s mean over the last {r.window} steps {v:.4g} is more than {r.fraction:.0%} "
                f"below its mean over the {r.window} before {self.baseline:.4g}"
            )
        return f"rule {r.name} at step {self.step}: {what}"


def _number(raw: Mapping[str, Any], name: str, key: str, *, integer: bool = False) -> Any:
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RuleError(f"rule {name!r}: {key} must be a number, not {value!r}")
    if integer and (int(value) != value or value < 1):
        raise RuleError(f"rule {name!r}: {key} must be a whole number >= 1, not {value!r}")
    return int(value) if integer else float(value)


def parse_rules(data: Any) -> tuple[Rule, ...]:
    """Rules from the parsed YAML/JSON document (``{"rules": [...]}``); RuleError if unusable."""
    if not isinstance(data, Mapping) or not isinstance(data.get("rules"), list):
        raise RuleError("a rules file holds a mapping with a list under 'rules'")
    rules: list[Rule] = []
    for i, raw in enumerate(data["rules"]):
        if not isinstance(raw, Mapping):
            raise RuleError(f"rule #{i + 1} is not a mapping")
        name = str(raw.get("name") or f"rule{i + 1}")
        kind = raw.get("kind")
        if kind not in KINDS:
            raise RuleError(f"rule {name!r}: kind must be one of {', '.join(KINDS)}, not {kind!r}")
        keys = raw.get("keys")
        if isinstance(keys, str):
            keys = [keys]
        if not keys or not all(isinstance(k, str) and k for k in keys):
            raise RuleError(f"rule {name!r}: keys must be a non-empty list of verl metric keys")
        for needed in _NEEDS.get(kind, ()):
            if needed not in raw:
                raise RuleError(f"rule {name!r}: kind {kind} needs {needed}")
        known = set(Rule.__dataclass_fields__) | {"keys"}
        unknown = set(raw) - known
        if unknown:
            raise RuleError(f"rule {name!r}: unknown field(s) {', '.join(sorted(unknown))}")
        kwargs: dict[str, Any] = {}
        for key in ("threshold", "fraction", "ratio", "factor", "min_baseline"):
            if key in raw:
                kwargs[key] = _number(raw, name, key)
        for key in ("window", "for_steps", "min_steps"):
            if key in raw:
                kwargs[key] = _number(raw, name, key, integer=True)
        if kwargs.get("window", 0) > MAX_WINDOW:
            raise RuleError(f"rule {name!r}: window must be at most {MAX_WINDOW}")
        action = raw.get("action")
        if action is not None and action not in GUARD_RULE_ACTIONS:
            raise RuleError(f"rule {name!r}: action must be one of {', '.join(GUARD_RULE_ACTIONS)}, not {action!r}")
        alert = raw.get("alert")
        rules.append(
            Rule(name=name, kind=kind, keys=tuple(keys), alert=str(alert) if alert else None, action=action, **kwargs)
        )
    names = [r.name for r in rules]
    if len(names) != len(set(names)):
        raise RuleError("rule names must be unique")
    return tuple(rules)


def _load_text(text: str) -> Any:
    try:
        import yaml
    except ImportError:  # JSON is YAML too
        import json

        return json.loads(text)
    return yaml.safe_load(text)


def default_rules_text() -> str:
    return resources.files("otel_verl.hooks.guard").joinpath("rules.yaml").read_text()


MAX_FILE_BYTES = 1 << 20  # a rules file of a few rules is a few KB
MAX_RULES = 1000


def read_rules_file(path: str) -> str:
    """The text of a user's rules file; RuleError unless it is a regular, UTF-8 file of at most
    ``MAX_FILE_BYTES``.

    Opened without waiting (``O_NONBLOCK``: a FIFO never blocks for a writer, ``O_NOCTTY``) and
    judged by ``fstat`` before anything is read, so a FIFO, a device such as ``/dev/zero`` or a
    folder is refused at once; at most ``MAX_FILE_BYTES`` + 1 bytes are ever read.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise RuleError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RuleError(f"{path} is not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise RuleError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_FILE_BYTES:  # the file may grow after fstat
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_FILE_BYTES:
            raise RuleError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    except OSError as exc:
        raise RuleError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise RuleError(f"{path} is not UTF-8 text") from None


def load_rules(path: str | None = None) -> tuple[Rule, ...]:
    """The rules in ``path`` (YAML or JSON, read by ``read_rules_file``), else the built-in ``rules.yaml``."""
    text = read_rules_file(path) if path else default_rules_text()
    try:
        data = _load_text(text)
    except Exception as exc:  # noqa: BLE001 - yaml/json syntax errors of any kind
        raise RuleError(f"{path or 'rules.yaml'} is not valid YAML/JSON: {exc}") from None
    if isinstance(data, Mapping) and isinstance(data.get("rules"), list) and len(data["rules"]) > MAX_RULES:
        raise RuleError(f"{path or 'rules.yaml'} has more than {MAX_RULES} rules")
    return parse_rules(data)


class RulesLoad:
    """A user's rules file, loaded on a daemon thread of its own: a slow or hung file system holds
    that thread, never the caller's (the training thread). ``result`` waits for it at most as long as
    it is told."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._done = threading.Event()
        self._rules: tuple[Rule, ...] | None = None
        self._problem: str | None = None
        threading.Thread(target=self._load, name="otel-verl-guard-rules", daemon=True).start()

    def _load(self) -> None:
        try:
            self._rules = load_rules(self.path)
        except RuleError as exc:
            self._problem = str(exc)
        except Exception as exc:  # noqa: BLE001 - a rules file must never break the guard
            self._problem = f"{exc.__class__.__name__}: {exc}"
        finally:
            self._done.set()

    def result(self, timeout_s: float) -> tuple[tuple[Rule, ...] | None, str | None]:
        """``(rules, None)``, or ``(None, why not)``: unusable, or not read within ``timeout_s``."""
        if not self._done.wait(timeout_s):
            return None, f"not read within {timeout_s:g} s"
        return self._rules, self._problem


def resolve_actions(rules: tuple[Rule, ...], by_rule: GuardActions, default: str) -> tuple[dict[str, str], list[str]]:
    """What each rule does when it fires (``{name: action}``, ``off`` included): the last entry of
    ``by_rule`` (``OTEL_VERL_GUARD_ACTIONS``) whose name or pattern matches it, else the rule's own
    ``action``, else ``default`` (``OTEL_VERL_GUARD_ACTION``); and the entries that match no rule."""
    actions = {r.name: r.action or default for r in rules}
    unmatched = []
    for pattern, action in by_rule:
        named = [r.name for r in rules if fnmatch.fnmatchcase(r.name, pattern)]
        for name in named:
            actions[name] = action
        if not named:
            unmatched.append(f"{pattern}={action}")
    return actions, unmatched


def _exact_sum(values: deque[float]) -> float:
    try:
        return math.fsum(values)
    except OverflowError:  # finite values whose sum is not: +-inf, as a plain sum says
        return sum(values)


@dataclass
class _Trend:
    """The last ``2 * window`` values of a key as two windows with running sums: O(1) per step.
    The sums are recomputed exactly every ``window`` values, and at once when a value that leaves a
    window was larger than what remains of its sum (that subtraction's rounding would dominate the
    sum) or a sum is not finite: rounding never piles up, whatever the values' range."""

    window: int
    recent: deque[float] = field(default_factory=deque)
    earlier: deque[float] = field(default_factory=deque)
    recent_sum: float = 0.0
    earlier_sum: float = 0.0
    added: int = 0

    def add(self, value: float) -> tuple[float, float] | None:
        """Append ``value``; the two windows' means ``(recent, earlier)`` once both are full."""
        self.recent.append(value)
        self.recent_sum += value
        self.added += 1
        exact = self.added % self.window == 0
        if len(self.recent) > self.window:
            moved = self.recent.popleft()
            self.recent_sum -= moved
            self.earlier.append(moved)
            self.earlier_sum += moved
            exact = exact or abs(moved) > abs(self.recent_sum)
            if len(self.earlier) > self.window:
                gone = self.earlier.popleft()
                self.earlier_sum -= gone
                exact = exact or abs(gone) > abs(self.earlier_sum)
        if exact or not math.isfinite(self.recent_sum + self.earlier_sum):
            self.recent_sum, self.earlier_sum = _exact_sum(self.recent), _exact_sum(self.earlier)
        if len(self.earlier) < self.window:
            return None
        return self.recent_sum / self.window, self.earlier_sum / self.window


@dataclass
class _Track:
    history: deque[float]
    streak: int = 0
    active: bool = False
    trend: _Trend | None = None


@dataclass
class Evaluator:
    rules: tuple[Rule, ...]
    _tracks: dict[tuple[str, str], _Track] = field(default_factory=dict)
    # verl logs the same ~100 keys every step: match each key against the patterns once
    _by_key: dict[str, tuple[Rule, ...]] = field(default_factory=dict)

    def _rules_for(self, key: str) -> tuple[Rule, ...]:
        found = self._by_key.get(key)
        if found is None:
            found = self._by_key[key] = tuple(r for r in self.rules if r.matches(key))
        return found

    def watches(self, key: str) -> bool:
        """Whether a rule evaluates ``key``: a value worth measuring for the guard."""
        return bool(self._rules_for(key))

    def _track(self, rule: Rule, key: str) -> _Track:
        track = self._tracks.get((rule.name, key))
        if track is None:
            trend = _Trend(rule.window) if rule.kind in TRENDS else None
            history: deque[float] = deque(maxlen=0 if trend else max(rule.window, 1))
            track = self._tracks[(rule.name, key)] = _Track(history, trend=trend)
        return track

    def step(self, values: Mapping[str, Any], step: int) -> list[Firing]:
        """Feed one step's logged values; returns the rules that fire at this step."""
        fired: list[Firing] = []
        for key, raw in values.items():
            if not isinstance(key, str):
                continue
            rules = self._rules_for(key)
            if not rules:
                continue
            value = as_float(raw)
            if value is None:
                continue
            for rule in rules:
                firing = self._check(rule, key, value, step)
                if firing is not None:
                    fired.append(firing)
        return fired

    def _check(self, rule: Rule, key: str, value: float, step: int) -> Firing | None:
        track = self._track(rule, key)
        finite = math.isfinite(value)
        baseline: float | None = None
        if rule.kind == "nonfinite":
            hit = not finite
        elif not finite:
            return None  # the nonfinite rule's business; keeps the history clean
        elif rule.kind == "above":
            hit = value > rule.threshold  # type: ignore[operator]
        elif rule.kind == "below":
            hit = value < rule.threshold  # type: ignore[operator]
        elif track.trend is not None:
            hit, value, baseline = self._trend(rule, track.trend, value)
        else:
            hit, baseline = self._relative(rule, track, value)
        if rule.kind not in ("nonfinite", "above", "below", *TRENDS) and not hit:
            track.history.append(value)  # the baseline is what came before the problem
        track.streak = track.streak + 1 if hit else 0
        if track.streak >= rule.for_steps and not track.active:
            track.active = True
            return Firing(rule, key, value, step, baseline)
        if not hit:
            track.active = False
        return None

    @staticmethod
    def _trend(rule: Rule, trend: _Trend, value: float) -> tuple[bool, float, float | None]:
        """(hit, the recent window's mean, the earlier window's): every value counts, the trend is the signal."""
        means = trend.add(value)
        if means is None:
            return False, value, None
        recent, earlier = means
        if abs(earlier) <= rule.min_baseline:
            return False, recent, earlier
        if rule.kind == "rise":
            return earlier > 0 and recent / earlier > rule.factor, recent, earlier  # type: ignore[operator]
        return (earlier - recent) / abs(earlier) > rule.fraction, recent, earlier  # type: ignore[operator]

    @staticmethod
    def _relative(rule: Rule, track: _Track, value: float) -> tuple[bool, float | None]:
        if len(track.history) < min(rule.min_steps, rule.window):
            return False, None
        history = list(track.history)
        if rule.kind == "spike":
            base = statistics.median(history)
            return base > 0 and value / base > rule.factor, base  # type: ignore[operator]
        base = statistics.fmean(history)
        if rule.kind == "drop":
            if abs(base) <= rule.min_baseline:
                return False, base
            return (base - value) / abs(base) > rule.fraction, base  # type: ignore[operator]
        return base > 0 and value / base < rule.ratio, base  # ratio_below
