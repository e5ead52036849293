"""What ``summary`` and ``report`` hold of a long run stays bounded (``offline.bounded``): a series
keeps each run's lowest and highest value, its first and last steps and the steps the tables show;
a step table picks the first, the slowest and the last steps; many values are a uniform sample; the
page is written a section at a time."""

from __future__ import annotations

import math

from otel_verl.offline.bounded import (
    EDGE,
    MAX_POINTS,
    MAX_RUNS,
    MAX_SAMPLE,
    Sample,
    SlowestPerRun,
    StepSeries,
    pick_steps,
    thin,
    thinned,
)
from otel_verl.offline.run.charts import line_svg


def test_a_short_series_is_drawn_whole():
    data = {s: float(s) for s in range(MAX_POINTS)}
    assert thin(data) is data


def test_a_long_series_keeps_each_runs_lowest_and_highest_in_step_order():
    n = 10 * MAX_POINTS
    data = {s: math.sin(s / 50) for s in range(n)}
    data[12_345] = 99.0  # a spike
    data[777] = -99.0
    data[4_000] = math.nan
    out = thin(data)
    assert MAX_POINTS // 4 <= len(out) <= MAX_POINTS
    assert out[12_345] == 99.0 and out[777] == -99.0 and 4_000 not in out  # the run's finite extremes
    assert list(out) == sorted(out) and set(out) <= set(data)
    assert all(out[s] == data[s] for s in out)  # values as logged, never averaged
    assert min(out) < n // 100 and max(out) > n - n // 100  # the whole range of steps


def test_a_run_of_only_nonfinite_values_keeps_one():
    data = {s: math.nan for s in range(3 * MAX_POINTS)}
    out = thin(data, most=10)
    assert 1 <= len(out) <= 5 and all(math.isnan(v) for v in out.values())


def _fold(n: int, keep: set[int] = frozenset(), value=lambda s: math.sin(s / 50)) -> dict[int, float]:
    series = StepSeries(keep)
    for s in range(1, n + 1):
        series.add(s, value(s), s)
    return series.close()


def test_a_folded_series_is_exact_while_short_and_bounded_however_long():
    short = _fold(MAX_RUNS)
    assert short == {s: math.sin(s / 50) for s in range(1, MAX_RUNS + 1)} and not thinned(short)
    sizes = [len(_fold(n)) for n in (10 * MAX_RUNS, 100 * MAX_RUNS)]
    assert all(size <= 2 * MAX_RUNS + 2 * EDGE for size in sizes)
    long = _fold(100 * MAX_RUNS)
    assert thinned(long)
    assert all(s in long for s in range(1, EDGE + 1))  # the first and last steps, exactly
    assert all(s in long for s in range(100 * MAX_RUNS - EDGE + 1, 100 * MAX_RUNS + 1))


def test_a_folded_series_keeps_its_spikes_and_the_steps_it_is_told_to():
    n = 50 * MAX_RUNS
    spikes = {777: 99.0, 31_337: -99.0}
    kept = {5_000, 5_001, 40_000}
    out = _fold(n, kept, lambda s: spikes.get(s, math.sin(s / 50)))
    assert out[777] == 99.0 and out[31_337] == -99.0
    assert all(out[s] == math.sin(s / 50) for s in kept)
    assert list(out) == sorted(out)


def test_steps_read_late_are_folded_as_the_oldest_and_the_first_and_last_steps_stay_exact():
    """Steps come in order until the first ones are read again at the end (another process's
    exports of old steps): the series still keeps its first and last steps exactly."""
    n = 100 * MAX_RUNS
    series = StepSeries()
    for s in [*range(EDGE + 1, n + 1), *range(1, EDGE + 1)]:
        series.add(s, math.sin(s / 50), s)
    out = series.close()
    assert thinned(out) and len(out) <= 2 * MAX_RUNS + 4 * EDGE
    assert all(out[s] == math.sin(s / 50) for s in [*range(1, EDGE + 1), *range(n - EDGE + 1, n + 1)])


def test_the_latest_export_of_a_recent_step_wins():
    series = StepSeries()
    series.add(1, 1.0, 10)
    series.add(2, 2.0, 20)
    series.add(1, 5.0, 30)  # step 1 exported again, later
    series.add(2, 9.0, 5)  # an older export of step 2
    assert series.close() == {1: 5.0, 2: 2.0}


def test_a_sample_holds_every_value_then_a_uniform_sample():
    sample = Sample()
    for v in range(MAX_SAMPLE):
        sample.add(float(v))
    assert sample.values == [float(v) for v in range(MAX_SAMPLE)] and not sample.sampled
    for v in range(MAX_SAMPLE, 3 * MAX_SAMPLE):
        sample.add(float(v))
    assert len(sample.values) == MAX_SAMPLE and sample.sampled
    assert (sample.count, sample.largest, sample.total) == (
        3 * MAX_SAMPLE,
        3 * MAX_SAMPLE - 1,
        sum(range(3 * MAX_SAMPLE)),
    )
    # uniform: about a third of the sample from each third of the values
    thirds = [sum(1 for v in sample.values if k * MAX_SAMPLE <= v < (k + 1) * MAX_SAMPLE) for k in range(3)]
    assert all(abs(t - MAX_SAMPLE / 3) < MAX_SAMPLE / 30 for t in thirds), thirds


def test_the_steps_picked_are_the_first_the_slowest_and_the_last():
    steps = [(n, 1.0 + (n % 7 == 0) * n) for n in range(1, 10_001)]  # every 7th step slow, later ones slower
    assert pick_steps(steps[:100], 100) == set(range(1, 101))
    picked = pick_steps(steps, 100)
    assert len(picked) <= 100
    assert set(range(1, 11)) <= picked and set(range(9_951, 10_001)) <= picked
    slowest = {n for n, _ in sorted(steps, key=lambda st: -st[1])[:40]}
    assert slowest <= picked
    assert pick_steps(steps, 100) <= pick_steps(steps, 1000)  # the timelines' steps are in the tables


def test_slowest_per_run_keeps_each_runs_slowest_step():
    runs = SlowestPerRun[int](10)
    for n in range(1, 101):
        runs.add(n, float(n % 9), n)
    kept = runs.items()
    assert len(kept) <= 10 and kept == sorted(kept)
    assert all(n % 9 == 8 for n in kept[:-1])  # each full run of 16 steps holds a step of 8 s
    short = SlowestPerRun[int](10)
    for n in range(1, 11):
        short.add(n, 1.0, n)
    assert short.items() == list(range(1, 11))


def test_a_drawn_curve_is_bounded_whatever_the_runs_length():
    def points(n: int) -> int:
        return line_svg("Reward", "", [("r", {s: float(s % 7) for s in range(n)})]).count("<circle")

    assert points(500) == 500
    assert points(5 * MAX_POINTS) <= MAX_POINTS and points(50 * MAX_POINTS) <= MAX_POINTS


def test_the_page_is_the_sections_written_in_turn(tmp_path, monkeypatch):
    from otel_verl.offline.run import page

    made: list[str] = []
    real = page._curves_section

    def curves(report):  # made only when the writer reaches it
        made.append("curves")
        return real(report)

    monkeypatch.setattr(page, "_curves_section", curves)
    from otel_verl.offline.run.model import build

    rep = build(tmp_path)
    parts = page.render_parts(rep)
    first = next(parts)
    assert first == "<!DOCTYPE html>" and made == []
    rest = "".join(parts)
    assert made == ["curves"]
    assert page.render(rep) == first + rest
