"""A new fact of the offline tools is one module whose fold goes on the list of facts
(``offline.facts.folds``): the reader hands it what it names, in the reader's order, and the run's
model keeps what it closes to under its name (``Report.facts``), with no change to either."""

from __future__ import annotations

from support.otlp_json import log_record, write_logs

from otel_verl import semconv
from otel_verl.offline import facts
from otel_verl.offline.folds import Fold, Steps
from otel_verl.offline.otlp_files import (
    LogEntry,
    MetricPoint,
    SpanRecord,
    read_log_records,
    read_metric_points,
    read_spans,
)
from otel_verl.offline.run import model, text

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
