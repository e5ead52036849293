"""How an instrument's name shows in Prometheus 3 (its OTLP receiver's default translation).

``UnderscoreEscapingWithSuffixes``, ported from prometheus/otlptranslator (``metric_namer.go``
``normalizeName``/``addUnitTokens``, ``unit_namer.go`` ``buildUnitSuffixes``/``cleanUpUnit``):
dots become underscores, the unit adds a suffix (``s`` -> ``_seconds``, ``By`` -> ``_bytes``,
``{token}/s`` -> ``_per_second``), counters end in ``_total``, unit-``1`` gauges in ``_ratio``.
The ``collector/`` kit's metric names and ``tests/ops`` derive from this and ``catalog``.
"""

from __future__ import annotations

import re

from otel_verl.instruments.catalog import (
    COUNTER,
    GAUGE,
    HISTOGRAM,
    OBSERVABLE_COUNTER,
    OBSERVABLE_GAUGE,
    OBSERVABLE_UP_DOWN_COUNTER,
    UP_DOWN_COUNTER,
    InstrumentSpec,
)

# OTel kind -> Prometheus type: a non-monotonic sum (UpDownCounter) is a Prometheus gauge.
_PROMETHEUS_TYPE = {
    OBSERVABLE_GAUGE: GAUGE,
    UP_DOWN_COUNTER: GAUGE,
    OBSERVABLE_UP_DOWN_COUNTER: GAUGE,
    OBSERVABLE_COUNTER: COUNTER,
}

_UNIT_MAP = {
    "d": "days",
    "h": "hours",
    "min": "minutes",
    "s": "seconds",
    "ms": "milliseconds",
    "us": "microseconds",
    "ns": "nanoseconds",
    "By": "bytes",
    "KiBy": "kibibytes",
    "MiBy": "mebibytes",
    "GiBy": "gibibytes",
    "TiBy": "tibibytes",
    "KBy": "kilobytes",
    "MBy": "megabytes",
    "GBy": "gigabytes",
    "TBy": "terabytes",
    "m": "meters",
    "V": "volts",
    "A": "amperes",
    "J": "joules",
    "W": "watts",
    "g": "grams",
    "Cel": "celsius",
    "Hz": "hertz",
    "1": "",
    "%": "percent",
}
_PER_UNIT_MAP = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week", "mo": "month", "y": "year"}


def _unit_suffixes(unit: str) -> tuple[str, str]:
    tokens = unit.split("/", 1)
    main = per = ""
    main_otel = tokens[0].strip()
    if main_otel and not any(c in main_otel for c in "{}"):
        main = _UNIT_MAP.get(main_otel, main_otel)
    if len(tokens) > 1 and tokens[1] != "":
        per_otel = tokens[1].strip()
        if per_otel and not any(c in per_otel for c in "{}"):
            per = _PER_UNIT_MAP.get(per_otel, per_otel)
        if per:
            per = "per_" + per
    return main, per


def _clean_up_unit(unit: str) -> str:
    s = re.sub(r"[^A-Za-z0-9:]", "_", unit)
    s = re.sub(r"__+", "_", s)
    return s[1:] if s.startswith("_") else s


def translate(name: str, unit: str, kind: str) -> str:
    """The Prometheus metric name of an OTel metric of ``kind`` (a catalog kind; histogram: base name)."""
    kind = _PROMETHEUS_TYPE.get(kind, kind)
    tokens = [t for t in re.split(r"[^A-Za-z0-9:]", name) if t]
    main, per = _unit_suffixes(unit)
    main, per = _clean_up_unit(main), _clean_up_unit(per)
    if main in tokens:
        main = ""
    if per == "per_":
        per = ""
    else:
        per = per[:-1] if per.endswith("_") else per
        if per in tokens:
            per = ""
    if per:
        main = main[:-1] if main.endswith("_") else main
    if main:
        tokens.append(main)
    if per:
        tokens.append(per)
    if kind == COUNTER:
        tokens = [t for t in tokens if t != "total"] + ["total"]
    if unit == "1" and kind == GAUGE:
        tokens = [t for t in tokens if t != "ratio"] + ["ratio"]
    out = "_".join(tokens)
    if out and out[0].isdigit():
        out = "_" + out
    return out


def prometheus_name(spec: InstrumentSpec) -> str:
    """The base series name of ``spec`` (a histogram adds ``_bucket``/``_sum``/``_count``)."""
    return translate(spec.name, spec.unit, spec.kind)


def series_names(spec: InstrumentSpec) -> set[str]:
    """Every series name ``spec`` produces in Prometheus."""
    base = prometheus_name(spec)
    if spec.kind == HISTOGRAM:
        return {base + "_bucket", base + "_sum", base + "_count"}
    return {base}
