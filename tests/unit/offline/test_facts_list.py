"""A new fact of the offline tools is one module whose fold goes on the list of facts
(``offline.facts.folds``): the reader hands it what it names, in the reader's order, and the run's
model keeps what it closes to under its name (``Report.facts``), with no change to either. A new
per-step fact is one ``StepFact`` on the list of them (``offline.facts.step_facts``): the model
keeps its value on each step's row (``StepRow.facts``) and its run total (``StepTotals``), the health
box says what it says of the slowest step and trajectory, and a renderer shows it with one line."""

from __future__ import annotations

from dataclasses import dataclass

from support.otlp_json import log_record, span, write_logs, write_spans

from otel_verl import semconv
from otel_verl.offline import facts
from otel_verl.offline.folds import Fold, Phrase, StepFact, Steps, StepSpans, Total
from otel_verl.offline.otlp_files import (
    LogEntry,
    MetricPoint,
    SpanRecord,
    read_log_records,
    read_metric_points,
    read_spans,
)
from otel_verl.offline.run import model, page, text

EVENT = "my.fact.event"


class Counts(Fold):
    """A fact made up for the test: what it is handed, and in which order."""

    SPANS = frozenset({semconv.SPAN_ROLLOUT_TRAJECTORY})
    POINTS = frozenset({semconv.M_TRAINING_STEP})
    EVENTS = frozenset({EVENT})

    def __init__(self) -> None:
        self.spans = self.points = self.logs = 0
        self.steps: list[int] | None = None
        self.order: list[str] = []

    def _saw(self, what: str) -> None:
        if not self.order or self.order[-1] != what:
            self.order.append(what)

    def on_span(self, s: SpanRecord) -> None:
        assert s.name == semconv.SPAN_ROLLOUT_TRAJECTORY
        self.spans += 1
        self._saw("span")

    def on_steps(self, steps: Steps) -> None:
        self.steps = [n for n, _, _ in steps.at]
        self._saw("steps")

    def on_point(self, p: MetricPoint) -> None:
        assert p.name == semconv.M_TRAINING_STEP
        self.points += 1
        self._saw("point")

    def on_log(self, r: LogEntry) -> None:
        assert r.event_name == EVENT
        self.logs += 1
        self._saw("log")

    def close(self) -> tuple:
        return self.spans, self.points, self.logs, self.steps, self.order


def test_a_fact_put_on_the_list_is_handed_what_it_names_and_kept_by_its_name(v1_run, monkeypatch):
    write_logs(v1_run, "taskrunner", 10, [log_record(EVENT, "x", 1.0), log_record("other.event", "y", 2.0)])
    listed = facts.folds
    monkeypatch.setattr(
        model, "fact_folds", lambda include_validation=False: {**listed(include_validation), "n": Counts()}
    )
    rep = model.build(v1_run)
    spans, points, logs, steps, order = rep.facts["n"]
    assert spans == sum(s.name == semconv.SPAN_ROLLOUT_TRAJECTORY for s in read_spans(v1_run)) > 0
    assert points == sum(p.name == semconv.M_TRAINING_STEP for p in read_metric_points(v1_run)) > 0
    assert logs == sum(r.event_name == EVENT for r in read_log_records(v1_run)) == 1
    assert steps == [1, 2] and order == ["span", "steps", "point", "log"]
    # the facts already listed are there too, and the summary reads them as before
    assert set(listed()) <= set(rep.facts) | model.COMBINED
    assert text.lines(rep) == text.lines(model.build(v1_run))


@dataclass(frozen=True)
class Seen:
    """A per-step fact made up for the test: what the step handed it."""

    spans: int
    trajectories: int
    tails: bool

    def line(self) -> str:
        return f"made up: {self.spans} spans, {self.trajectories} trajectories"


def _seen(step: StepSpans) -> Seen | None:
    if step.step == 2:
        return None  # a step without the fact: no line for it
    return Seen(len(step.trace), len(step.pool), "tails" in step.run)


# its run total: (steps, spans) over every step, those without the fact too; its words
# on the slowest step (step 1, the longer) and on the run's slowest trajectory (in step 1)
SEEN = StepFact(
    "seen",
    _seen,
    total=Total((0, 0), lambda total, seen: (total[0] + 1, total[1] + (seen.spans if seen is not None else 0))),
    slowest_step=lambda seen, row: Phrase(f"; made up: step {row.step} handed {seen.spans} spans", "seen"),
    slowest_trajectory=lambda seen, row: f"made up: 1 of {seen.trajectories} in step {row.step}",
)


def test_a_per_step_fact_put_on_the_list_reaches_its_row_and_the_renderers(tmp_path, monkeypatch):
    trajectory = {"verl__rollout__submit_step": 1, "verl__rollout__sample_index": 0, "verl__rollout__index": 0}
    spans = []
    for step in (1, 2):
        trace = f"{step:016x}"
        end = 10 * step + 4 - step  # step 1 the slowest
        sid, root = span(semconv.SPAN_STEP, trace, 10 * step, end, verl__step=step, verl__time__rollout=2.0)
        _, stage = span("verl.gen", trace, 10 * step, 10 * step + 1, sid, verl__stage="gen", verl__step=step)
        spans += [root, stage]
    spans.append(span(semconv.SPAN_ROLLOUT_TRAJECTORY, "a" * 16, 10.1, 10.9, **trajectory)[1])
    write_spans(tmp_path, "taskrunner", 1, spans)
    listed = facts.step_facts
    assert len({f.name for f in listed()}) == len(listed())  # one value per name on a row
    plain = model.build(tmp_path)
    # the registration line, and one line per renderer
    monkeypatch.setattr(model, "fact_step_facts", lambda: (*listed(), SEEN))
    monkeypatch.setattr(text, "STEP_LINES", (*text.STEP_LINES, SEEN))
    monkeypatch.setattr(page, "STEP_LISTS", (*page.STEP_LISTS, (SEEN, "seen", "what each step handed")))
    rep = model.build(tmp_path)
    assert [SEEN.of(r) for r in rep.steps] == [Seen(2, 1, True), None]  # its trace, its pool, the run's facts
    assert {f.name for f in listed()} < set(rep.steps[0].facts)  # the listed ones are there too
    # its run total over every step (a run without it: none)
    assert SEEN.total_of(rep.totals) == (2, 2) and SEEN.total_of(plain.totals) == (0, 0)
    # its words in the health box's findings, after the listed facts' (the time categories)
    assert rep.health is not None and plain.health is not None
    found = {f.topic: f for f in rep.health.findings}
    before = {f.topic: f for f in plain.health.findings}
    step_words, trajectory_words = "; made up: step 1 handed 2 spans", ", made up: 1 of 1 in step 1"
    assert found["slowest step"].text == before["slowest step"].text + step_words
    assert before["slowest step"].text.startswith("step 1, 3.00 s: generating rollouts 67%")
    assert found["slowest step"].anchor == before["slowest step"].anchor == "time-went"  # the first fact's
    assert found["slowest trajectory"].text == before["slowest trajectory"].text + trajectory_words
    said = text.lines(rep)
    assert "  step 1: made up: 2 spans, 1 trajectories" in said and not any("step 2: made up" in x for x in said)
    assert sum(step_words in x for x in said) == sum(trajectory_words in x for x in said) == 1
    unsaid = [x.replace(step_words, "").replace(trajectory_words, "") for x in said]
    assert [x for x in unsaid if "made up" not in x] == text.lines(plain)
    html = page.render(rep)
    assert (
        '<details id="seen"><summary>what each step handed</summary><ul>'
        '<li data-step="1">step 1: made up: 2 spans, 1 trajectories</li></ul></details>'
    ) in html
    assert '<details id="seen">' not in page.render(plain)
