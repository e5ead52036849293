"""The "verl RL training" dashboard: ``collector/grafana/dashboards/verl-rl-training.json`` is written from
this by ``python scripts/gen_dashboards.py`` (``--check``: the committed file is what this makes).

Rows and panels are listed in the order they show. The panels after a row fill lines of 24 columns
left to right, a new line once one is full (the SDK's layout), so a panel's place follows from its
width and height; a panel wider than what is left of its line would stick out (a test says so).
Panel ids stay fixed (links such as ``?viewPanel=`` name them); a new panel takes a new id. Every
Prometheus query filters on the ``experiment`` and ``run`` variables (a test says so too).
"""

# ruff: noqa: E501  (a query or a description is one string, as Grafana shows it, to copy from and to)

from __future__ import annotations

from grafana_foundation_sdk.builders import bargauge, logs, loki, table, tempo
from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dashboard_b
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dashboard_m
from grafana_foundation_sdk.models import tempo as tempo_m

from . import kit

FILE = "verl-rl-training.json"

# each step's slowest trajectory per agent-loop worker (whose tree is always exported), and every
# exported one slower than the $slow variable
SLOWEST_TRAJECTORIES = '{ name = "verl.rollout.trajectory" && resource.verl.run.id =~ "$run" && (span.verl.rollout.slowest_rank = 1 || duration > $slow) } | select(span.verl.rollout.submit_step, span.verl.rollout.kept_because, span.verl.rollout.response.tokens, span.gen_ai.agent.name, span.verl.rollout.validate)'


def _variables(d: dashboard_b.Dashboard) -> None:
    for plugin in kit.PLUGINS:
        d.with_variable(kit.datasource_variable(plugin))
    everything = dashboard_m.VariableOption(selected=True, text=["All"], value=["$__all"])
    for name, label, query in (
        ("experiment", "Experiment", "label_values(verl_training_step, verl_experiment)"),
        ("run", "Run", 'label_values(verl_training_step{verl_experiment=~"$experiment"}, verl_run_id)'),
    ):
        d.with_variable(
            dashboard_b.QueryVariable(name)
            .label(label)
            .datasource(kit.PROMETHEUS)
            .query(query)
            .refresh(dashboard_m.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .include_all(True)
            .multi(True)
            .all_value(".*")
            .sort(dashboard_m.VariableSort.ALPHABETICAL_ASC)
            .current(everything)
            .options([])
            .hide(dashboard_m.VariableHide.DONT_HIDE)
        )
    thresholds = ["30s", "60s", "120s", "300s", "600s"]
    d.with_variable(
        dashboard_b.CustomVariable("slow")
        .label("Slow trajectory threshold")
        .values(",".join(thresholds))
        .include_all(False)
        .multi(False)
        .hide(dashboard_m.VariableHide.DONT_HIDE)
        .current(dashboard_m.VariableOption(selected=True, text="60s", value="60s"))
        .options([dashboard_m.VariableOption(selected=t == "60s", text=t, value=t) for t in thresholds])
    )


def build() -> dashboard_b.Dashboard:
    """The dashboard, as the SDK's builder."""
    d = (
        dashboard_b.Dashboard("verl RL training")
        .uid("verl-rl-training")
        .description(
            "otel-verl: reward, KL, losses, entropy, throughput, stage times, rollout latency, GPUs and sample generations of verl PPO/GRPO runs."
        )
        .tags(["verl", "rl", "opentelemetry"])
        .editable()
        .tooltip(dashboard_m.DashboardCursorSync.CROSSHAIR)
        .version(1)
        .refresh("1m")
        .time("now-6h", "now")
        .timezone("browser")
        .fiscal_year_start_month(0)
        .live_now(False)
        .links([])
        .annotation(kit.builtin_annotation())
        .annotation(
            kit.PrometheusAnnotation(
                "Firing alerts",
                'ALERTS{alertstate="firing", alertname=~"Verl.*", verl_experiment=~"$experiment", verl_run_id=~"$run"}',
                step="60s",
                title_format="{{alertname}} ({{severity}})",
                text_format="{{verl_experiment}} / {{verl_run_id}}",
                tag_keys="severity,verl_run_id",
                icon_color="red",
            )
        )
    )
    _variables(d)
    d.with_row(kit.row(1, "Overview"))
    d.with_panel(
        kit.stat(
            2,
            "Step",
            "",
            'max by (verl_run_id) (verl_training_step{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
            "{{verl_run_id}}",
            unit="short",
            decimals=0,
        )
    )
    d.with_panel(
        kit.stat(
            3,
            "Since last step",
            "Heartbeat: seconds since the last completed step. VerlTrainingStalled fires above 30 min.",
            'time() - max by (verl_run_id) (verl_training_last_step_timestamp_seconds{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
            "{{verl_run_id}}",
            unit="s",
        )
    )
    d.with_panel(
        kit.stat(
            4,
            "Tokens/s per GPU",
            "",
            'max by (verl_run_id) (verl_training_throughput_per_second{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
            "{{verl_run_id}}",
            unit="short",
        )
    )
    d.with_panel(
        kit.stat(
            5,
            "Mean reward (score)",
            "",
            'max by (verl_run_id) (verl_training_reward{verl_experiment=~"$experiment", verl_run_id=~"$run", verl_reward_source="score"})',
            "{{verl_run_id}}",
            unit="short",
        )
    )
    d.with_panel(
        kit.stat(
            6,
            "Firing alerts",
            "Prometheus alerts from collector/prometheus/rules/verl-alerts.yaml that are firing now.",
            'count by (verl_run_id) (ALERTS{alertstate="firing", alertname=~"Verl.*", verl_experiment=~"$experiment", verl_run_id=~"$run"})',
            "{{verl_run_id}}",
            unit="short",
        )
    )
    d.with_panel(
        kit.stat(
            7,
            "NaN/Inf values (1h)",
            "",
            'sum by (verl_run_id) (increase(verl_training_nonfinite_total{verl_experiment=~"$experiment", verl_run_id=~"$run"}[1h]))',
            "{{verl_run_id}}",
            unit="short",
            decimals=0,
        )
    )
    d.with_row(kit.row(8, "Learning"))
    d.with_panel(
        kit.timeseries(
            9,
            "Reward and KL",
            "Batch-mean reward (left axis) and KL (right axis). KL above 0.2 for 5 min is a warning, above 0.5 critical.",
            [
                kit.prom(
                    'max by (verl_run_id, verl_reward_source) (verl_training_reward{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "reward {{verl_reward_source}} {{verl_run_id}}",
                ),
                kit.prom(
                    'max by (verl_run_id, verl_kl_source) (verl_training_kl{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "KL {{verl_kl_source}} {{verl_run_id}}",
                ),
            ],
            w=12,
            h=9,
            unit="short",
            axis_label="reward",
            overrides=[kit.right_axis("B", label="KL")],
        )
    )
    d.with_panel(
        kit.timeseries(
            10,
            "Losses",
            "",
            [
                kit.prom(
                    'max by (verl_run_id) (verl_actor_pg_loss{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "actor pg_loss {{verl_run_id}}",
                ),
                kit.prom(
                    'max by (verl_run_id) (verl_actor_kl_loss{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "actor kl_loss {{verl_run_id}}",
                ),
                kit.prom(
                    'max by (verl_run_id) (verl_critic_vf_loss{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "critic vf_loss {{verl_run_id}}",
                ),
            ],
            w=12,
            h=9,
            unit="short",
            overrides=[kit.right_axis("C", label="vf_loss")],
        )
    )
    d.with_panel(
        kit.timeseries(
            11,
            "Entropy",
            "Policy entropy. A fall to a quarter of the previous hour's level (VerlEntropyCollapse) means exploration is stopping.",
            [
                kit.prom(
                    'max by (verl_run_id) (verl_actor_entropy{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "actor entropy {{verl_run_id}}",
                ),
            ],
            w=8,
            h=8,
            unit="short",
        )
    )
    d.with_panel(
        kit.timeseries(
            12,
            "Gradient norm",
            "VerlGradNormSpike fires when the 5 min max exceeds 5x the previous hour's median.",
            [
                kit.prom(
                    'max by (verl_run_id) (verl_actor_grad_norm{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "actor {{verl_run_id}}",
                ),
                kit.prom(
                    'max by (verl_run_id) (verl_critic_grad_norm{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "critic {{verl_run_id}}",
                ),
            ],
            w=8,
            h=8,
            unit="short",
        )
    )
    d.with_panel(
        kit.timeseries(
            13,
            "NaN/Inf values by metric key",
            "Non-finite values that verl logged, per metric key.",
            [
                kit.prom(
                    'sum by (verl_run_id, verl_metric_key) (increase(verl_training_nonfinite_total{verl_experiment=~"$experiment", verl_run_id=~"$run"}[$__rate_interval]))',
                    "{{verl_metric_key}} {{verl_run_id}}",
                ),
            ],
            w=8,
            h=8,
            unit="short",
            bars=True,
        )
    )
    d.with_row(kit.row(45, "Guard and stall doctor"))
    d.with_panel(
        kit.timeseries(
            46,
            "Guard rules fired",
            "Each firing of an otel-verl guard rule (verl_guard_triggered_total by verl_guard_rule): the rule's action (record, alert, checkpoint or stop) ran at that step. Alert: VerlGuardTriggered (all but record).",
            [
                kit.prom(
                    'sum by (verl_run_id, verl_guard_rule) (increase(verl_guard_triggered_total{verl_experiment=~"$experiment", verl_run_id=~"$run"}[$__rate_interval]))',
                    "{{verl_guard_rule}} {{verl_run_id}}",
                ),
            ],
            w=12,
            h=8,
            unit="short",
            bars=True,
        )
    )
    d.with_panel(
        kit.timeseries(
            47,
            "Stalled (stall doctor)",
            "1 while the stall doctor finds that no step has finished within its adaptive limit (OTEL_VERL_STALL_AFTER beyond what the stage in progress usually takes), 0 once a step finishes again. The stacks of every process are in the verl.stall.stacks log records (docs/stall-doctor.md). Alert: VerlStallDoctorStalled.",
            [
                kit.prom(
                    'max by (verl_run_id) (verl_training_stalled{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "{{verl_run_id}}",
                ),
            ],
            w=12,
            h=8,
            unit="none",
            fill=30,
            step_after=True,
            minimum=0,
            maximum=1,
        )
    )
    d.with_row(kit.row(14, "Speed"))
    d.with_panel(
        kit.timeseries(
            15,
            "Tokens/s per GPU",
            "",
            [
                kit.prom(
                    'max by (verl_run_id) (verl_training_throughput_per_second{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "{{verl_run_id}}",
                ),
            ],
            w=8,
            h=8,
            unit="short",
        )
    )
    d.with_panel(
        kit.timeseries(
            16,
            "Step time",
            "",
            [
                kit.prom(
                    'sum by (verl_run_id) (rate(verl_stage_duration_seconds_sum{verl_experiment=~"$experiment", verl_run_id=~"$run", verl_stage="step"}[$__rate_interval])) / sum by (verl_run_id) (rate(verl_stage_duration_seconds_count{verl_experiment=~"$experiment", verl_run_id=~"$run", verl_stage="step"}[$__rate_interval]))',
                    "mean step time {{verl_run_id}}",
                ),
                kit.prom(
                    'max by (verl_run_id) (verl_perf_time_per_step{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "perf/time_per_step {{verl_run_id}}",
                ),
            ],
            w=8,
            h=8,
            unit="s",
        )
    )
    d.with_panel(
        kit.timeseries(
            17,
            "MFU (actor)",
            "",
            [
                kit.prom(
                    'max by (verl_run_id) (verl_perf_mfu_actor{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "{{verl_run_id}}",
                ),
            ],
            w=8,
            h=8,
            unit="percentunit",
        )
    )
    d.with_panel(
        kit.timeseries(
            18,
            "Time per step by stage (stacked)",
            "Seconds per step spent in each stage (gen, reward, old_log_prob, ref, values, adv, update_critic, update_actor, update_weights, save_checkpoint, testing), averaged over the interval. Select a single run.",
            [
                kit.prom(
                    'sum by (verl_stage) (increase(verl_stage_duration_seconds_sum{verl_experiment=~"$experiment", verl_run_id=~"$run", verl_stage!="step"}[$__rate_interval])) / on () group_left () sum (increase(verl_stage_duration_seconds_count{verl_experiment=~"$experiment", verl_run_id=~"$run", verl_stage="step"}[$__rate_interval]))',
                    "{{verl_stage}}",
                ),
            ],
            w=24,
            h=9,
            unit="s",
            bars=True,
        )
    )
    d.with_panel(
        kit.timeseries(
            33,
            "Telemetry cost per step",
            "otel-verl's own CPU (otel_verl.overhead.cpu_time: its threads by their thread CPU clocks, plus its hooks on verl's threads), all processes of the run, per training step, next to the step time. Not counted: native gRPC threads, garbage collection, process start-up.",
            [
                kit.prom(
                    'sum by (verl_run_id) (increase(otel_verl_overhead_cpu_time_seconds_total{verl_experiment=~"$experiment", verl_run_id=~"$run"}[$__rate_interval])) / sum by (verl_run_id) (increase(verl_stage_duration_seconds_count{verl_experiment=~"$experiment", verl_run_id=~"$run", verl_stage="step"}[$__rate_interval]))',
                    "telemetry CPU-s per step {{verl_run_id}}",
                ),
                kit.prom(
                    'sum by (verl_run_id) (rate(verl_stage_duration_seconds_sum{verl_experiment=~"$experiment", verl_run_id=~"$run", verl_stage="step"}[$__rate_interval])) / sum by (verl_run_id) (rate(verl_stage_duration_seconds_count{verl_experiment=~"$experiment", verl_run_id=~"$run", verl_stage="step"}[$__rate_interval]))',
                    "step time {{verl_run_id}}",
                ),
            ],
            w=12,
            h=8,
            unit="s",
        )
    )
    d.with_panel(
        kit.timeseries(
            34,
            "Telemetry CPU by component",
            "otel-verl's own CPU per second (cores), summed over the run's processes, by otel_verl.component: recorder, exporter, flusher, watchdog, stall_reporter (threads) and hooks (on verl's threads).",
            [
                kit.prom(
                    'sum by (otel_verl_component) (rate(otel_verl_overhead_cpu_time_seconds_total{verl_experiment=~"$experiment", verl_run_id=~"$run"}[$__rate_interval]))',
                    "{{otel_verl_component}}",
                ),
            ],
            w=12,
            h=8,
            unit="short",
            stacked=True,
        )
    )
    d.with_row(kit.row(35, "Where the time went"))
    d.with_panel(
        kit.timeseries(
            36,
            "Step time by category (stacked)",
            "Each step's seconds by where they went (otel-verl's verl.step.time, from the stage and verl.wait spans of the TaskRunner; the categories add up to the step): rollout, waiting (the trainer waiting for rollouts: v1's replay buffer), training, weight_sync, checkpoint, validation, driver (the TaskRunner's own work), other (between stages). Select a single run.",
            [
                kit.prom(
                    'max by (verl_time_category) (verl_step_time_seconds{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "{{verl_time_category}}",
                ),
            ],
            w=12,
            h=9,
            unit="s",
            bars=True,
        )
    )
    d.with_panel(
        kit.timeseries(
            37,
            "Trainer idle ratio and weight sync",
            "The share of each step the trainer waited for rollouts (verl.trainer.idle_ratio, left) and the weight-sync seconds per step (update_weights, right axis); the VerlWeightSyncGrowing alert watches the latter's growth.",
            [
                kit.prom(
                    'max by (verl_run_id) (verl_trainer_idle_ratio{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "idle ratio {{verl_run_id}}",
                ),
                kit.prom(
                    'max by (verl_run_id) (verl_step_time_seconds{verl_experiment=~"$experiment", verl_run_id=~"$run", verl_time_category="weight_sync"})',
                    "weight sync s {{verl_run_id}}",
                ),
            ],
            w=12,
            h=9,
            unit="percentunit",
            fill=0,
            line_width=2,
            overrides=[kit.right_axis("B", unit="s")],
        )
    )
    d.with_panel(
        kit.timeseries(
            38,
            "Busy, waiting and idle per pool (stacked)",
            "Each step's seconds per pool role (otel-verl's verl.pool.time, from the TaskRunner's stage and verl.wait spans): busy = the stages that hold the role (actor: old_log_prob, update_actor, update_weights, ...; rollout: gen, update_weights, testing; ref, critic, reward once their stages run), waiting = the trainer waiting for rollouts (verl.wait), idle = the rest; the three add up to the step for each role. Rollout idle is the time the trainer did not hold the replicas, not the replicas' own idle time (async modes keep generating): that is the panel on the right. Select a single run.",
            [
                kit.prom(
                    'max by (verl_pool_role, verl_pool_state) (verl_pool_time_seconds{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "{{verl_pool_role}} {{verl_pool_state}}",
                ),
            ],
            w=16,
            h=9,
            unit="s",
            bars=True,
        )
    )
    d.with_panel(
        kit.timeseries(
            39,
            "Rollout replicas busy (their own clock)",
            "Share of time each rollout replica had at least one request in its server's generate (otel-verl's verl.rollout.replica.busy_time, counted in the server actor: the union of all agent-loop workers' requests); one minus it is the replica's own idle share, which the pool panel's rollout idle (the trainer's view) is not in async modes.",
            [
                kit.prom(
                    'sum by (verl_run_id, verl_rollout_replica) (rate(verl_rollout_replica_busy_time_seconds_total{verl_experiment=~"$experiment", verl_run_id=~"$run"}[$__rate_interval]))',
                    "replica {{verl_rollout_replica}} {{verl_run_id}}",
                ),
            ],
            w=8,
            h=9,
            unit="percentunit",
            line_width=2,
            minimum=0,
            maximum=1,
        )
    )
    d.with_panel(
        bargauge.Panel()
        .id(49)
        .title("Goodput by role")
        .description(
            "The share of the run's step time, per role (trainer: the actor/critic/ref pools; rollout: the replicas), in each goodput bucket (otel-verl's verl.goodput.time counter, from the TaskRunner's step-time categories and verl's own counts of dropped groups and aborted samples): productive, overhead, idle and wasted add up to 1 for each role. The buckets' definitions are in docs/time.md (Goodput by role)."
        )
        .datasource(kit.PROMETHEUS)
        .span(24)
        .height(8)
        .with_target(
            kit.prom(
                'sum by (verl_run_id, verl_goodput_role, verl_goodput_bucket) (verl_goodput_time_seconds_total{verl_experiment=~"$experiment", verl_run_id=~"$run"}) / ignoring (verl_goodput_bucket) group_left () sum by (verl_run_id, verl_goodput_role) (verl_goodput_time_seconds_total{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                "{{verl_goodput_role}} {{verl_goodput_bucket}} {{verl_run_id}}",
            ).ref_id("A")
        )
        .unit("percentunit")
        .min(0)
        .max(1)
        .decimals(1)
        .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
        .orientation(common.VizOrientation.AUTO)
        .display_mode(common.BarGaugeDisplayMode.GRADIENT)
        .value_mode(common.BarGaugeValueMode.COLOR)
        .show_unfilled(True)
    )
    d.with_row(kit.row(19, "Rollout"))
    d.with_panel(
        kit.timeseries(
            20,
            "Trajectory latency",
            "Training (not validation) trajectories. Click an exemplar to open its trace.",
            [
                kit.prom(
                    'histogram_quantile(0.5, sum by (le) (rate(verl_rollout_trajectory_duration_seconds_bucket{verl_experiment=~"$experiment", verl_run_id=~"$run", verl_rollout_validate!="true"}[$__rate_interval])))',
                    "p50",
                    exemplar=True,
                ),
                kit.prom(
                    'histogram_quantile(0.9, sum by (le) (rate(verl_rollout_trajectory_duration_seconds_bucket{verl_experiment=~"$experiment", verl_run_id=~"$run", verl_rollout_validate!="true"}[$__rate_interval])))',
                    "p90",
                    exemplar=True,
                ),
                kit.prom(
                    'histogram_quantile(0.99, sum by (le) (rate(verl_rollout_trajectory_duration_seconds_bucket{verl_experiment=~"$experiment", verl_run_id=~"$run", verl_rollout_validate!="true"}[$__rate_interval])))',
                    "p99",
                    exemplar=True,
                ),
            ],
            w=6,
            h=8,
            unit="s",
        )
    )
    d.with_panel(
        kit.timeseries(
            21,
            "LLM call latency",
            "",
            [
                kit.prom(
                    'histogram_quantile(0.5, sum by (le) (rate(verl_rollout_llm_call_duration_seconds_bucket{verl_experiment=~"$experiment", verl_run_id=~"$run"}[$__rate_interval])))',
                    "p50",
                ),
                kit.prom(
                    'histogram_quantile(0.99, sum by (le) (rate(verl_rollout_llm_call_duration_seconds_bucket{verl_experiment=~"$experiment", verl_run_id=~"$run"}[$__rate_interval])))',
                    "p99",
                ),
            ],
            w=6,
            h=8,
            unit="s",
        )
    )
    d.with_panel(
        kit.timeseries(
            22,
            "Rollout tail ratio",
            "Slowest over median trajectory latency of the last step. VerlRolloutLongTail fires above 4 for 15 min.",
            [
                kit.prom(
                    'max by (verl_run_id) (verl_rollout_tail_ratio{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "slowest / median {{verl_run_id}}",
                ),
            ],
            w=6,
            h=8,
            unit="short",
        )
    )
    d.with_panel(
        kit.timeseries(
            23,
            "Response length",
            "",
            [
                kit.prom(
                    'max by (verl_run_id) (verl_response_length_mean{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "mean {{verl_run_id}}",
                ),
                kit.prom(
                    'histogram_quantile(0.99, sum by (le) (rate(verl_rollout_response_tokens_bucket{verl_experiment=~"$experiment", verl_run_id=~"$run"}[$__rate_interval])))',
                    "p99 (trajectories)",
                ),
            ],
            w=6,
            h=8,
            unit="short",
        )
    )
    d.with_panel(
        table.Panel()
        .id(24)
        .title("Slowest trajectories")
        .description(
            "Each step's slowest rollout trajectory in each agent-loop worker (verl.rollout.slowest_rank = 1: its tree is always exported, whatever the span budget), and every exported one longer than $slow (TraceQL, Tempo). Click a trace id to open the trajectory with its LLM calls, tools and reward span (v0: in the step's trace; v1: a trace of its own, linked to the step's gen span)."
        )
        .datasource(kit.TEMPO)
        .span(16)
        .height(9)
        .with_target(
            tempo.TempoQuery()
            .datasource(kit.TEMPO)
            .ref_id("A")
            .query_type(tempo_m.TempoQueryType.TRACEQL)
            .limit(20)
            .spss(5)
            .table_type(tempo_m.SearchTableType.SPANS)
            .query(SLOWEST_TRAJECTORIES)
        )
        .show_header(True)
        .sort_by([common_b.TableSortByFieldState().display_name("Duration").desc(True)])
    )
    d.with_panel(
        kit.timeseries(
            48,
            "Degenerate responses",
            "Share of a step's training responses, by kind: at the length limit (rollout.response_length), empty, or repetitive (seq-rep-4 of their token ids at least 0.5), averaged over the agent-loop workers. VerlRolloutDegenerateResponses fires when the repetitive or empty share is above 0.2 for 15 min.",
            [
                kit.prom(
                    'avg by (verl_run_id, verl_rollout_degenerate_kind) (verl_rollout_degenerate_ratio{verl_experiment=~"$experiment", verl_run_id=~"$run", verl_rollout_validate="false"})',
                    "{{verl_rollout_degenerate_kind}} {{verl_run_id}}",
                ),
            ],
            w=8,
            h=9,
            unit="percentunit",
        )
    )
    d.with_panel(
        kit.timeseries(
            50,
            "LLM tokens per second by type",
            "Tokens per second of the run's LLM calls (agent-loop workers), input (the prompt, cached prefix included) and output (generated), from the GenAI client metric gen_ai.client.token.usage (docs/rollouts.md, GenAI client metrics); a failed call counts none.",
            [
                kit.prom(
                    'sum by (verl_run_id, gen_ai_token_type) (rate(gen_ai_client_token_usage_sum{verl_experiment=~"$experiment", verl_run_id=~"$run"}[$__rate_interval]))',
                    "{{gen_ai_token_type}} {{verl_run_id}}",
                ),
            ],
            w=24,
            h=8,
            unit="short",
            line_width=2,
            minimum=0,
        )
    )
    d.with_row(kit.row(25, "GPU"))
    d.with_panel(
        kit.timeseries(
            26,
            "GPU utilisation per rank",
            "Fraction of time a kernel ran on each GPU (hw.gpu.utilization, task general).",
            [
                kit.prom(
                    'max by (host_name, verl_rank, hw_id) (hw_gpu_utilization_ratio{hw_gpu_task="general", verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "{{host_name}} rank {{verl_rank}} {{hw_id}}",
                ),
            ],
            w=12,
            h=8,
            unit="percentunit",
            minimum=0,
            maximum=1,
        )
    )
    d.with_panel(
        kit.timeseries(
            27,
            "GPU memory per rank",
            "Used bytes (left) and fraction of the limit (right). VerlGPUMemoryNearLimit fires above 97 % for 10 min.",
            [
                kit.prom(
                    'max by (host_name, verl_rank, hw_id) (hw_gpu_memory_usage_bytes{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "used {{host_name}} rank {{verl_rank}} {{hw_id}}",
                ),
                kit.prom(
                    'max by (host_name, verl_rank, hw_id) (hw_gpu_memory_usage_bytes{verl_experiment=~"$experiment", verl_run_id=~"$run"} / hw_gpu_memory_limit_bytes{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "fraction {{host_name}} rank {{verl_rank}} {{hw_id}}",
                ),
            ],
            w=12,
            h=8,
            unit="bytes",
            overrides=[kit.right_axis("B", label="fraction of limit", unit="percentunit")],
        )
    )
    d.with_panel(
        kit.timeseries(
            30,
            "GPU power per rank",
            "Instantaneous power drawn by each GPU (hw.power, hw.type gpu).",
            [
                kit.prom(
                    'max by (host_name, verl_rank, hw_id) (hw_power_watts{hw_type="gpu", verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "{{host_name}} rank {{verl_rank}} {{hw_id}}",
                ),
            ],
            w=8,
            h=8,
            unit="watt",
        )
    )
    d.with_panel(
        kit.timeseries(
            31,
            "GPU temperature per rank",
            "GPU die temperature (hw.temperature, hw.type gpu).",
            [
                kit.prom(
                    'max by (host_name, verl_rank, hw_id) (hw_temperature_celsius{hw_type="gpu", verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "{{host_name}} rank {{verl_rank}} {{hw_id}}",
                ),
            ],
            w=8,
            h=8,
            unit="celsius",
        )
    )
    d.with_panel(
        kit.timeseries(
            32,
            "GPU memory held by each rank's process",
            "What the rank's own process holds on its GPU (verl.process.gpu.memory.usage): a rank whose line keeps rising leaks.",
            [
                kit.prom(
                    'max by (host_name, verl_rank, hw_id) (verl_process_gpu_memory_usage_bytes{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "{{host_name}} rank {{verl_rank}} {{hw_id}}",
                ),
            ],
            w=8,
            h=8,
            unit="bytes",
        )
    )
    d.with_row(kit.row(28, "Samples"))
    d.with_panel(
        logs.Panel()
        .id(29)
        .title("Sample generations")
        .description(
            "Log records with event name verl.rollout.sample (opt-in in otel-verl): prompt/response samples with verl.step, verl.sample.reward and data source as structured metadata. Open a line's details for the trace link."
        )
        .datasource(kit.LOKI)
        .span(24)
        .height(12)
        .with_target(
            loki.Dataquery()
            .datasource(kit.LOKI)
            .ref_id("A")
            .query_type("range")
            .expr(
                '{service_name=~".+", verl_experiment=~"$experiment", verl_run_id=~"$run"} | verl_sample_reward != ""'
            )
        )
        .show_time(True)
        .wrap_log_message(True)
        .prettify_log_message(False)
        .enable_log_details(True)
        .dedup_strategy(common.LogsDedupStrategy.NONE)
        .sort_order(common.LogsSortOrder.DESCENDING)
        .show_labels(False)
        .show_common_labels(False)
    )
    d.with_row(kit.row(40, "Rollout engine (vLLM, per replica)"))
    d.with_panel(
        kit.timeseries(
            41,
            "KV cache usage per replica",
            "vLLM's own vllm:kv_cache_usage_perc (0 to 1) of each rollout replica, bridged by otel-verl from the engine's Prometheus registry in the server actor (label verl_rollout_replica). Near 1 the engine preempts requests and the rollout slows.",
            [
                kit.prom(
                    'max by (verl_run_id, verl_rollout_replica) (vllm_kv_cache_usage_perc{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "replica {{verl_rollout_replica}} {{verl_run_id}}",
                ),
            ],
            w=6,
            h=8,
            unit="percentunit",
            line_width=2,
            minimum=0,
            maximum=1,
        )
    )
    d.with_panel(
        kit.timeseries(
            42,
            "Engine queue per replica",
            "Requests waiting in vLLM's scheduler (vllm:num_requests_waiting) and running (vllm:num_requests_running) per rollout replica. A queue that never drains between steps means the replicas cannot keep up.",
            [
                kit.prom(
                    'sum by (verl_run_id, verl_rollout_replica) (vllm_num_requests_waiting{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "waiting, replica {{verl_rollout_replica}} {{verl_run_id}}",
                ),
                kit.prom(
                    'sum by (verl_run_id, verl_rollout_replica) (vllm_num_requests_running{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "running, replica {{verl_rollout_replica}} {{verl_run_id}}",
                ),
            ],
            w=6,
            h=8,
            unit="short",
            line_width=2,
            minimum=0,
        )
    )
    d.with_panel(
        kit.timeseries(
            43,
            "Time to first token per replica (p50, p95)",
            "vLLM's vllm:time_to_first_token_seconds histogram per rollout replica (its own buckets, bridged as _bucket/_sum/_count).",
            [
                kit.prom(
                    'histogram_quantile(0.5, sum by (le, verl_run_id, verl_rollout_replica) (rate(vllm_time_to_first_token_seconds_bucket{verl_experiment=~"$experiment", verl_run_id=~"$run"}[$__rate_interval])))',
                    "p50, replica {{verl_rollout_replica}} {{verl_run_id}}",
                ),
                kit.prom(
                    'histogram_quantile(0.95, sum by (le, verl_run_id, verl_rollout_replica) (rate(vllm_time_to_first_token_seconds_bucket{verl_experiment=~"$experiment", verl_run_id=~"$run"}[$__rate_interval])))',
                    "p95, replica {{verl_rollout_replica}} {{verl_run_id}}",
                ),
            ],
            w=6,
            h=8,
            unit="s",
            line_width=2,
            minimum=0,
        )
    )
    d.with_panel(
        kit.timeseries(
            44,
            "Preemptions per replica",
            "vLLM's vllm:num_preemptions_total per second per rollout replica: requests the engine evicted for lack of KV cache and recomputes later.",
            [
                kit.prom(
                    'sum by (verl_run_id, verl_rollout_replica) (rate(vllm_num_preemptions_total{verl_experiment=~"$experiment", verl_run_id=~"$run"}[$__rate_interval]))',
                    "replica {{verl_rollout_replica}} {{verl_run_id}}",
                ),
            ],
            w=6,
            h=8,
            unit="short",
            line_width=2,
            minimum=0,
        )
    )
    d.with_row(kit.row(70, "Rollout/training mismatch"))
    d.with_panel(
        kit.timeseries(
            71,
            "Rollout vs trainer token probabilities",
            "verl's comparison of the rollout engine's token probabilities with the trainer's recomputation, per step: their Pearson correlation (left; near 1 while the rollout samples from the trained policy) and the mean absolute probability difference (right axis). VerlRolloutPolicyMismatch fires below 0.9 for 10 min (critical below 0.5); the guard's rollout_policy_mismatch rule below 0.5 for 2 steps.",
            [
                kit.prom(
                    'min by (verl_run_id) (verl_training_rollout_probs_correlation{verl_experiment=~"$experiment", verl_run_id=~"$run"})',
                    "correlation {{verl_run_id}}",
                ),
                kit.prom(
                    'max by (verl_run_id, verl_stat) (verl_training_rollout_probs_diff{verl_experiment=~"$experiment", verl_run_id=~"$run", verl_stat="mean"})',
                    "|p diff| {{verl_stat}} {{verl_run_id}}",
                ),
            ],
            w=8,
            h=8,
            unit="short",
            overrides=[kit.right_axis("B")],
        )
    )
    d.with_panel(
        kit.timeseries(
            72,
            "Rollout/training mismatch (rollout_corr)",
            "verl's rollout_corr/* measures of the rollout policy against the trained one: KL(rollout || trainer), its k3 estimate and the mean absolute log-perplexity difference per step; they grow with engine numerics, a broken weight sync or staleness.",
            [
                kit.prom(
                    'max by (verl_run_id, verl_mismatch_measure) (verl_training_rollout_mismatch{verl_experiment=~"$experiment", verl_run_id=~"$run", verl_mismatch_measure=~"k3_kl|kl|log_ppl_abs_diff"})',
                    "{{verl_mismatch_measure}} {{verl_run_id}}",
                ),
            ],
            w=8,
            h=8,
            unit="short",
        )
    )
    d.with_panel(
        kit.timeseries(
            73,
            "Off-policy staleness (v1)",
            "verl's v1 driver: model versions the trained trajectories lag behind the policy, mean and max per step, from the newest weights each used (lower) and the oldest (worst); 0 in synchronous training. VerlOffPolicyStalenessHigh fires when the lower mean stays above 4 for 15 min.",
            [
                kit.prom(
                    'max by (verl_run_id, verl_staleness_bound, verl_stat) (verl_training_off_policy_staleness{verl_experiment=~"$experiment", verl_run_id=~"$run", verl_stat=~"mean|max"})',
                    "{{verl_staleness_bound}} {{verl_stat}} {{verl_run_id}}",
                ),
            ],
            w=8,
            h=8,
            unit="short",
        )
    )
    return d
