"""The ops kit's way of building a Grafana dashboard with grafana-foundation-sdk (Grafana's own types).

Every data-source reference goes through a data-source variable (``${ds_prometheus}``,
``${ds_tempo}``, ``${ds_loki}``), whose default is an import input (``${DS_PROMETHEUS}``, ...):
Grafana's importer ("Import dashboard", or its API with ``inputs``) asks for a data source of each
``__inputs`` entry and writes the chosen one's UID there. Provisioned as a file (the kit's compose
stack), nothing replaces ``${DS_PROMETHEUS}``, so the variable falls back to the data source of
that plugin (the kit has one of each). :func:`exported` adds ``__inputs`` and ``__requires`` as
Grafana's own "Export for sharing externally" writes them.

The panel helpers are the kit's one style (lines with 10% fill, shared tooltip, legend below; a
stat's last value), so a panel says only what is its own. Where the SDK's types lack a field that
Grafana reads (a Prometheus annotation's formats), :class:`PrometheusAnnotation` adds it, said there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dashboard_b
from grafana_foundation_sdk.builders import prometheus as prometheus_b
from grafana_foundation_sdk.builders import stat as stat_b
from grafana_foundation_sdk.builders import timeseries as timeseries_b
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dashboard_m

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "collector" / "compose.yaml"

# the data sources a dashboard may use (plugin id: name), in the order their variables and inputs are listed
PLUGINS = {"prometheus": "Prometheus", "tempo": "Tempo", "loki": "Loki"}


def variable_name(plugin: str) -> str:
    """The dashboard variable that picks the data source of ``plugin``."""
    return f"ds_{plugin}"


def input_name(plugin: str) -> str:
    """The ``__inputs`` entry Grafana's importer asks for (``${DS_PROMETHEUS}`` in the JSON)."""
    return f"DS_{plugin.upper()}"


def datasource(plugin: str) -> common.DataSourceRef:
    """A reference to the data source of ``plugin`` that the dashboard's variable picks."""
    return common.DataSourceRef(type_val=plugin, uid="${" + variable_name(plugin) + "}")


PROMETHEUS = datasource("prometheus")
TEMPO = datasource("tempo")
LOKI = datasource("loki")


def datasource_variable(plugin: str) -> dashboard_b.DatasourceVariable:
    """The variable ``ds_<plugin>``: any data source of ``plugin``, the import's choice by default."""
    default = "${" + input_name(plugin) + "}"
    return (
        dashboard_b.DatasourceVariable(variable_name(plugin))
        .label(PLUGINS[plugin])
        .type(plugin)
        .regex("")
        .hide(dashboard_m.VariableHide.DONT_HIDE)
        .include_all(False)
        .multi(False)
        .current(dashboard_m.VariableOption(selected=False, text=default, value=default))
    )


# ---------------------------------------------------------------------------------------------
# Queries and panels


def prom(expr: str, legend: str = "", *, exemplar: bool = False) -> prometheus_b.Dataquery:
    """A Prometheus range query (its refId is given by the panel, in order: A, B, ...)."""
    query = prometheus_b.Dataquery().datasource(PROMETHEUS).expr(expr).legend_format(legend).range()
    return query.exemplar(True) if exemplar else query


def _with_targets(panel: Any, targets: Iterable[Any]) -> Any:
    for ref, target in zip("ABCDEFGHIJ", targets, strict=False):
        panel.with_target(target.ref_id(ref))
    return panel


def stat(
    panel_id: int, title: str, description: str, expr: str, legend: str, *, unit: str, decimals: int | None = None
) -> stat_b.Panel:
    """A 4x4 stat of the last value of an instant query (one per run)."""
    panel = (
        stat_b.Panel()
        .id(panel_id)
        .title(title)
        .description(description)
        .datasource(PROMETHEUS)
        .span(4)
        .height(4)
        .with_target(prom(expr, legend).instant().ref_id("A"))
        .unit(unit)
        .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
        .color_mode(common.BigValueColorMode.VALUE)
        .graph_mode(common.BigValueGraphMode.AREA)
        .text_mode(common.BigValueTextMode.AUTO)
    )
    return panel.decimals(decimals) if decimals is not None else panel


def right_axis(ref: str, *, label: str | None = None, unit: str | None = None) -> tuple[str, list]:
    """An override: query ``ref``'s series on the right axis (with its own label and unit)."""
    properties = [dashboard_m.DynamicConfigValue(id_val="custom.axisPlacement", value="right")]
    if label is not None:
        properties.append(dashboard_m.DynamicConfigValue(id_val="custom.axisLabel", value=label))
    if unit is not None:
        properties.append(dashboard_m.DynamicConfigValue(id_val="unit", value=unit))
    return ref, properties


def timeseries(
    panel_id: int,
    title: str,
    description: str,
    targets: Sequence[Any],
    *,
    w: int,
    h: int,
    unit: str,
    stacked: bool = False,
    bars: bool = False,
    fill: int = 10,
    line_width: int = 1,
    step_after: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
    axis_label: str | None = None,
    overrides: Sequence[tuple[str, list]] = (),
    datasource_ref: common.DataSourceRef = PROMETHEUS,
) -> timeseries_b.Panel:
    """A ``w`` x ``h`` time series of ``targets``: lines (``stacked``: stacked areas), or stacked bars (``bars``)."""
    panel = (
        timeseries_b.Panel()
        .id(panel_id)
        .title(title)
        .description(description)
        .datasource(datasource_ref)
        .span(w)
        .height(h)
        .unit(unit)
        .draw_style(common.GraphDrawStyle.BARS if bars else common.GraphDrawStyle.LINE)
        .line_width(line_width)
        .fill_opacity(80 if bars else fill)
        .show_points(common.VisibilityMode.AUTO)
        .span_nulls(True)
        .axis_placement(common.AxisPlacement.AUTO)
        .stacking(
            common_b.StackingConfig()
            .mode(common.StackingMode.NORMAL if stacked or bars else common.StackingMode.NONE)
            .group("A")
        )
        .legend(
            common_b.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(common_b.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.DESCENDING))
    )
    if step_after:
        panel.line_interpolation(common.LineInterpolation.STEP_AFTER)
    if minimum is not None:
        panel.min(minimum)
    if maximum is not None:
        panel.max(maximum)
    if axis_label is not None:
        panel.axis_label(axis_label)
    for ref, properties in overrides:
        panel.override_by_query(ref, properties)
    return _with_targets(panel, targets)


def row(panel_id: int, title: str) -> dashboard_b.Row:
    """An expanded row; the panels after it, up to the next row, are its own."""
    return dashboard_b.Row(title).id(panel_id).collapsed(False)


# ---------------------------------------------------------------------------------------------
# Annotations


def builtin_annotation() -> dashboard_b.AnnotationQuery:
    """Grafana's own "Annotations & Alerts" (hidden), which Grafana adds to a dashboard that lacks it."""
    return (
        dashboard_b.AnnotationQuery()
        .built_in(1)
        .datasource(common.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
        .enable(True)
        .hide(True)
        .icon_color("rgba(0, 211, 255, 1)")
        .name("Annotations & Alerts")
        .type("dashboard")
    )


class _PrometheusAnnotationQuery(dashboard_m.AnnotationQuery):
    """Grafana's annotation type, with the fields Grafana's Prometheus data source reads from a
    Prometheus annotation (its ``processEvents``: ``step``, ``titleFormat``, ``textFormat``,
    ``tagKeys``, ``useValueForTime``), which the SDK's dashboard schema does not list."""

    prometheus_fields: dict[str, object]

    def to_json(self) -> dict[str, object]:
        return {**super().to_json(), **self.prometheus_fields}


class PrometheusAnnotation(cogbuilder.Builder[dashboard_m.AnnotationQuery]):
    """An annotation from a Prometheus query: an event at each point of each series."""

    def __init__(
        self, name: str, expr: str, *, step: str, title_format: str, text_format: str, tag_keys: str, icon_color: str
    ) -> None:
        self._internal = _PrometheusAnnotationQuery(
            name=name, datasource=PROMETHEUS, enable=True, hide=False, icon_color=icon_color, expr=expr
        )
        self._internal.prometheus_fields = {
            "step": step,
            "titleFormat": title_format,
            "textFormat": text_format,
            "tagKeys": tag_keys,
            "useValueForTime": False,
        }

    def build(self) -> dashboard_m.AnnotationQuery:
        return self._internal


# ---------------------------------------------------------------------------------------------
# Export


def grafana_version() -> str:
    """The Grafana the kit runs (compose.yaml's image tag): the ``__requires`` entry."""
    image = yaml.safe_load(COMPOSE.read_text())["services"]["grafana"]["image"]
    return image.rsplit(":", 1)[1]


_VARIABLE_REF = re.compile(r"\$\{(ds_\w+)\}")


def exported(dashboard: dict[str, Any]) -> dict[str, Any]:
    """``dashboard`` (its JSON object) with ``__inputs`` and ``__requires`` for its data-source variables.

    Raises ValueError when a data-source reference names no variable of the dashboard, or a
    variable is not used: the dashboard would not import, or would ask for a data source for nothing.
    """
    variables = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    plugins = [v["query"] for v in variables]
    declared = {variable_name(p) for p in plugins}
    text = repr(dashboard)
    used = set(_VARIABLE_REF.findall(text))
    if used != declared:
        raise ValueError(f"data-source variables used {sorted(used)} but declared {sorted(declared)}")
    inputs = [
        {
            "name": input_name(p),
            "label": PLUGINS[p],
            "description": f"the {PLUGINS[p]} data source of the otel-verl telemetry",
            "type": "datasource",
            "pluginId": p,
            "pluginName": PLUGINS[p],
        }
        for p in plugins
    ]
    requires = [{"type": "grafana", "id": "grafana", "name": "Grafana", "version": grafana_version()}] + [
        {"type": "datasource", "id": p, "name": PLUGINS[p], "version": "1.0.0"} for p in plugins
    ]
    return {"__inputs": inputs, "__requires": requires, **dashboard}
