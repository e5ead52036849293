"""``otel_verl.offline.facts.health``: the run's health first, in ``summary`` and in the report."""

from __future__ import annotations

import io
import re

from support.otlp_json import T0, gauge, log_record, span, write_logs, write_metrics, write_spans

from otel_verl import semconv
from otel_verl.offline.report import build, render
from otel_verl.offline.summary import summary

ORDER = [
    "guard",
    "stall",
    "non-finite values",
    "validation score",
    "generation health",
    "goodput",
    "slowest step",
    "slowest trajectory",
    "alert rules",
]


def _nonfinite(key: str, count: int, time_s: float) -> dict:
    point = {
        "asInt": str(count),
        "timeUnixNano": str(T0 + int(time_s * 1e9)),
        "attributes": [{"key": semconv.ATTR_METRIC_KEY, "value": {"stringValue": key}}],
    }
    return {
        "name": semconv.M_NONFINITE,
        "sum": {"aggregationTemporality": 2, "isMonotonic": True, "dataPoints": [point]},
    }


def _otlp_attrs(attrs: dict) -> list[dict]:
    """OTLP JSON attributes; NaN as protobuf's JSON writes it (a string)."""
    out = []
    for k, v in attrs.items():
        if isinstance(v, str):
            value = {"stringValue": v}
        elif isinstance(v, int):
            value = {"intValue": str(v)}
        else:
            value = {"doubleValue": "NaN" if v != v else v}
        out.append({"key": k, "value": value})
    return out


def _sick_run(folder, rule: str = "nonfinite") -> None:
    """Three steps: actor/pg_loss NaN at steps 2 and 3 (the guard fired), a grad-norm spike at step
    3, a validation before training and at step 3, a stall at step 3, a v1 poll lag in step 1."""
    spans, guard = [], []
    for step in (1, 2, 3):
        t = 10.0 * step
        sid, root = span(
            semconv.SPAN_STEP,
            f"{step:016x}",
            t,
            t + 2.0,
            verl__step=step,
            verl__time__rollout=0.5,
            verl__time__poll_lag=1.5 if step == 1 else 0.0,
            verl__time__training=1.5 if step > 1 else 0.0,
        )
        gen_id, gen = span("verl.gen", f"{step:016x}", t, t + 2.0, sid, verl__stage="gen", verl__step=step)
        spans += [root, gen]
        if step == 1:
            _, wait = span(
                semconv.SPAN_WAIT,
                f"{step:016x}",
                t + 0.1,
                t + 2.0,
                gen_id,
                verl__wait__poll_lag=1.5,
                verl__wait__poll_interval=2.0,
            )
            spans.append(wait)
        if step >= 2:
            attrs = {
                semconv.ATTR_GUARD_RULE: rule,
                semconv.ATTR_METRIC_KEY: "actor/pg_loss",
                semconv.ATTR_GUARD_VALUE: float("nan"),
                semconv.ATTR_GUARD_ACTION: "observe",
                semconv.ATTR_STEP: step,
            }
            _, g = span(semconv.SPAN_GUARD, f"{step:016x}", t + 2.1, t + 2.2, sid, verl__step=step)
            g["events"] = [{"name": semconv.EVENT_GUARD_TRIGGERED, "attributes": _otlp_attrs(attrs)}]
            spans.append(g)
            record = log_record(semconv.EVENT_GUARD_TRIGGERED, "fired", t + 2.1)
            record["attributes"] = _otlp_attrs(attrs)
            guard.append(record)  # the same firing as the span event
    write_spans(folder, "taskrunner", 10, spans)
    # the validation before training: an export before the first step, naming no step
    write_metrics(folder, "taskrunner", 10, 5.0, [gauge("verl.val-core.gsm8k.reward.mean_1", 0.125)])
    for step in (1, 2, 3):
        values = [gauge(semconv.M_TRAINING_STEP, step), gauge("verl.actor.grad_norm", 1.0 if step < 3 else 50.0)]
        if step == 3:
            values.append(gauge("verl.val-core.gsm8k.reward.mean_1", 0.5))
        if step >= 2:
            values.append(_nonfinite("actor/pg_loss", step - 1, 10.0 * step + 2.5))
        write_metrics(folder, "taskrunner", 10, 10.0 * step + 2.5, values)
    stalled = log_record(semconv.EVENT_TRAINING_STALLED, "stalled", 40.0, verl__step=3, verl__stall__seconds=900.0)
    write_logs(folder, "taskrunner", 10, [*guard, stalled])


def _summary(folder) -> list[str]:
    out = io.StringIO()
    assert summary(folder, out=out, err=io.StringIO()) == 0
    return out.getvalue().splitlines()


def test_summary_opens_with_health_in_its_order(v1_run):
    lines = _summary(v1_run)
    assert lines[1] == "health: nothing to check"
    topics = [re.match(r"  \[\w+\]\s+([^:]+):", line).group(1) for line in lines[2 : 2 + len(ORDER)]]
    assert topics == ORDER
    assert lines[2] == "  [ok]    guard: no guard rule fired (report: #guard)"
    assert "  [ok]    stall: no stall reported" in lines
    assert "  [info]  validation score: not logged by this run (no val-core/... values)" in lines
    assert lines.index("time per stage, seconds (verl's timing_s/<stage>, from the verl.<stage> spans):") > 2 + len(
        ORDER
    )


def test_a_sick_run_says_so_first(tmp_path):
    _sick_run(tmp_path)
    lines = _summary(tmp_path)
    assert lines[1] == "health: something to check"
    box = lines[2 : 2 + len(ORDER)]
    assert [re.match(r"  \[\w+\]\s+([^:]+):", line).group(1) for line in box] == ORDER
    # one firing per step, though both the span event and the log record carry it
    assert box[0] == (
        "  [check] guard: nonfinite fired 2 times at steps 2, 3 (actor/pg_loss=nan; action observe) (report: #guard)"
    )
    assert box[1] == (
        "  [check] stall: stalled at step 3: no training step finished for 900 s; "
        "no process reported its stacks (report: #stall)"
    )
    assert box[2] == "  [check] non-finite values: NaN or infinite: actor/pg_loss 2x at steps 2, 3 (report: #guard)"
    # the validation before training is step 0
    assert box[3] == (
        "  [info]  validation score: val-core/gsm8k/reward/mean_1 0.125 at step 0 -> 0.5 at step 3 "
        "(2 validations) (report: #curves)"
    )
    assert box[4] == "  [info]  generation health: not measured by this run (no verl.rollout.degenerate_ratio)"
    assert box[5] == "  [info]  goodput: not measured by this run (no verl.goodput.time)"
    assert box[6].startswith("  [info]  slowest step: step ")
    # the alert rules: the guard's built-in rules over the values, and the stall alert
    assert box[8].startswith("  [check] alert rules: would have fired: ")
    for alert in ("VerlNonFiniteLossOrGradNorm from step 2", "VerlTrainingStalled from step 3"):
        assert alert in box[8]


def test_the_page_opens_with_the_same_health_box_linking_to_its_sections(tmp_path):
    _sick_run(tmp_path)
    page = render(build(tmp_path))
    body = page[page.index("<body>") :]
    assert body.index('<section id="health"') < body.index('<dl class="meta">') < body.index('<section id="stages">')
    topics = re.findall(r'<li class="finding (\w+)" data-topic="([^"]+)">', body)
    assert [t for _, t in topics] == ORDER
    assert dict((t, level) for level, t in topics)["guard"] == "warn"
    for anchor in re.findall(r'<li class="finding[^>]*>.*?</li>', body):
        for target in re.findall(r'href="#([\w-]+)"', anchor):
            assert f'id="{target}"' in page, target  # every link lands on a section of the page
    guard = page[page.index('<section id="guard">') :]
    assert guard.count("<tr><td>2</td><td>nonfinite</td><td>actor/pg_loss</td>") == 1
    assert '<li data-alert="VerlNonFiniteLossOrGradNorm">' in guard and '<li data-alert="VerlTrainingStalled">' in guard
    assert '<div class="panel"><h3>Validation score</h3>' in page


def test_health_from_the_files_is_escaped(tmp_path):
    _sick_run(tmp_path, rule="<script>alert(1)</script>\x1b[31m")
    page = render(build(tmp_path))
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    text = "\n".join(_summary(tmp_path))
    assert "\x1b" not in text and "<script>alert(1)</script>" in text  # terminal-safe, as every summary line


def test_the_v1_poll_lag_in_rl_terms(tmp_path):
    _sick_run(tmp_path)
    words = "rollouts done at 0.50 s; the trainer waited 1.50 s more: the replay buffer's poll interval"
    lines = _summary(tmp_path)
    assert f"  step 1: {words} (it polls every 2 s)" in lines
    page = render(build(tmp_path))
    escaped = words.replace("'", "&#x27;")
    assert f'<li data-step="1">step 1: {escaped} (it polls every 2 s)</li>' in page
    assert "waiting after the rollouts were done (the replay buffer&#x27;s poll)" in page  # the category, in words


def test_a_key_never_logged_is_said_not_drawn(v1_run, tmp_path):
    page = render(build(v1_run))
    # the Grad norm chart: verl never logged actor/grad_norm in this run
    assert '<div class="panel not-logged" data-title="Grad norm"><h3>Grad norm</h3>' in page
    assert "actor/grad_norm: not logged by this run" in page
    assert 'data-title="Grad norm"' not in page.replace('<div class="panel not-logged" data-title="Grad norm"', "")
    # a chart with one key logged and others not: the logged one drawn, the others said
    kl = page[page.index("<h3>KL</h3>") :]
    kl = kl[: kl.index("</div></div>") + 12] if "</div></div>" in kl else kl
    assert "actor/ppo_kl, actor/reward_kl_penalty: not logged by this run" in page
    lines = _summary(v1_run)
    missing = next(line for line in lines if line.startswith("  not logged by this run: "))
    assert "actor/grad_norm" in missing and "actor/kl_loss" not in missing and "val-core" not in missing


def test_the_stage_table_shows_seconds_not_span_ids(v1_run):
    rep = build(v1_run)
    page = render(rep)
    table = page[page.index('<table id="stage-table"') :]
    table = table[: table.index("</table>")]
    sid = rep.steps[1].slowest.span_id
    assert f'data-span-id="{sid}"' in table  # still there for the script's click-through
    assert f">{sid}<" not in table and "<code>" not in table


def test_the_time_the_spans_cover_is_explained(v1_run):
    page = render(build(v1_run))
    assert (
        "<dt>time the spans cover</dt><dd>15.0 s, from the first span&#x27;s start to the last one&#x27;s end "
        "(the run&#x27;s start-up before its first span, Ray and model loading, is not in it)</dd>"
    ) in page
    # one count of processes on the page as in summary: those that sent anything, then those with spans
    assert "<dt>processes</dt><dd>3 sent telemetry, 3 of them spans: " in page


def test_a_folder_above_the_telemetry_is_pointed_at_it(v1_run, capsys):
    from otel_verl import cli

    above = v1_run.parent  # .work/demo, whose telemetry is in ./telemetry
    assert cli.main(["summary", str(above)]) == 1
    err = capsys.readouterr().err
    assert f"no telemetry files (traces-*.jsonl, metrics-*.jsonl) in {above}; {v1_run} under it has them" in err
    assert err.count("\n") == 1


def test_a_file_given_as_the_folder_is_said_plainly(v1_run, capsys):
    from otel_verl import cli

    one = next(v1_run.glob("traces-*.jsonl"))
    assert cli.main(["summary", str(one)]) == 2
    err = capsys.readouterr().err
    assert f"{one} is not a folder: give the run's telemetry folder (the one OTEL_VERL_FILE_DIR named)" in err


def test_a_key_logged_as_zero_at_every_step_says_so(tmp_path):
    for step in (1, 2):
        kl = gauge(semconv.M_KL, 0.0, **{semconv.ATTR_KL_SOURCE: "ppo_kl"})
        write_metrics(tmp_path, "taskrunner", 1, step, [gauge(semconv.M_TRAINING_STEP, step), kl])
    page = render(build(tmp_path))
    assert '<span class="key" data-label="actor/ppo_kl">' in page and "(0 at every step)" in page
