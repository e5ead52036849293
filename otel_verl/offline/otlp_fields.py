"""The values of a stored OTLP JSON request that the offline readers use, each read once, where it is
used, as protobuf's ``json_format`` reads it into the opentelemetry-proto message and then as the
readers need it (``otlp_files.decode`` builds the records with these).

A value ``json_format`` refuses for its field (a string where a number goes, an integer out of its
type's range, a bool where a double goes, an id that is not base64, a message nested deeper than
``MAX_DEPTH``, two members of one ``oneof``) raises ``ValueError`` or ``TypeError`` (``decode``
names the line "not an OTLP ... request"); one the readers cannot use raises ``BadRequest`` with
its reason. Fields no reader uses (a span's kind, a scope's name, ``snake_case`` spellings of the
field names, ...) are not looked at: a line is judged by what is read from it.

Lines are parsed with ``msgspec`` (the same values as ``json.loads``); a line it refuses (a lone
surrogate escape such as ``"\\ud800"``, ``NaN`` or an infinity as a bare word, a number past the
doubles) is parsed again by ``json.loads``, which takes those, its strings holding a lone surrogate
marked ``Unpaired``: text no UTF-8 can hold, refused wherever a reader uses it as text.
"""

from __future__ import annotations

import base64
import json
import math
import re
from typing import Any

import msgspec

SURROGATE = "text that is not UTF-8 (a lone surrogate)"
NOT_A_NUMBER = "a number that is not a number"
NOT_AN_ID = "an id that is not hex of its length (32 digits for a trace, 16 for a span)"
# OTLP JSON writes ids as hex (case-insensitive); the readers keep them lowercase.
TRACE_ID = re.compile("[0-9a-f]{32}")
SPAN_ID = re.compile("[0-9a-f]{16}")
MAX_DEPTH = 100  # json_format's max_recursion_depth: a message nested deeper is refused
# The depth of an AnyValue (json_format counts each message it enters, the request being 1).
DEPTH_RESOURCE = 5  # request > ResourceSpans > Resource > KeyValue > AnyValue
DEPTH_ITEM = 6  # request > ResourceSpans > ScopeSpans > Span (or LogRecord) > KeyValue > AnyValue
DEPTH_EVENT = 7  # ... > Span > Event (or Link) > KeyValue > AnyValue
DEPTH_POINT = 8  # ... > Metric > Gauge > NumberDataPoint > KeyValue > AnyValue
DEPTH_BODY = 5  # ... > LogRecord > AnyValue
U64 = 2**64 - 1
I64 = (-(2**63), 2**63 - 1)
I32 = (-(2**31), 2**31 - 1)
_INF = math.inf
_UNPAIRED = re.compile("[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]")
_EXTENSION = re.compile(r"\[[a-zA-Z0-9\._]*\]$")  # a name json_format takes for an extension's
_DECODER = msgspec.json.Decoder()


class BadRequest(ValueError):
    """A stored request the readers do not use; the message says why (``Skipped``'s reason)."""


class Unpaired(str):
    """A string holding a lone surrogate (only ``json.loads`` makes them, from an escape)."""

    __slots__ = ()


def _marked(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return {k: Unpaired(v) if type(v) is str and _UNPAIRED.search(v) else v for k, v in pairs}


def parse(text: str) -> Any:
    """One line's JSON value, as ``json.loads`` gives it; ValueError or RecursionError: not JSON."""
    try:
        return _DECODER.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return json.loads(text, object_pairs_hook=_marked)


def text(value: Any) -> str:
    """A string field."""
    if type(value) is str:
        return value
    if isinstance(value, Unpaired):
        raise BadRequest(SURROGATE)
    raise TypeError(f"expected a string, got {type(value).__name__}")


def check_integer(value: Any, lo: int = I64[0], hi: int = I64[1]) -> None:
    """Refuse ``value`` where json_format would for an integer field of range [lo, hi] (int64's)."""
    if isinstance(value, str):
        if " " in value:
            raise ValueError("an integer with a space")
        try:
            n = int(value)
        except ValueError:
            f = float(value)
            if not f.is_integer():
                raise ValueError("not an integer") from None
            n = int(f)
    elif type(value) is int:
        n = value
    elif type(value) is float:
        if not value.is_integer():
            raise ValueError("not an integer")
        n = int(value)
    else:  # a bool, a list, an object
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    if not lo <= n <= hi:
        raise ValueError("an integer out of its range")


def nanos(value: Any) -> int:
    """A fixed64 or uint64 field (times, counts) as an int."""
    if type(value) is str and value.isascii() and value.isdigit():
        n = int(value)
        if n <= U64:
            return n
    check_integer(value, 0, U64)
    return int(value)


def nanos_of(obj: dict[str, Any], key: str) -> int:
    """``obj``'s fixed64 field ``key``; 0 when absent (null is not a number)."""
    value = obj.get(key)
    if value is None:
        if key in obj:
            raise TypeError(f"{key} is null")
        return 0
    return nanos(value)


def integer(value: Any) -> int:
    """An int64 field (an attribute's ``intValue``)."""
    check_integer(value)
    return int(value)


def _json_double(value: Any) -> None:
    """Refuse ``value`` where json_format would for a double field."""
    if type(value) is float:
        if not -_INF < value < _INF:  # NaN or an infinity: protojson writes them as strings
            raise ValueError("a bare NaN or infinity")
        return
    if value == "nan":
        raise ValueError('"nan" (protojson writes "NaN")')
    try:
        float(value)
    except ValueError:
        if value not in ("-Infinity", "Infinity", "NaN"):
            raise


def number(value: Any) -> float:
    """A number the readers keep (NaN and the infinities included: what the guard fires on)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadRequest(NOT_A_NUMBER)
    try:
        return float(value)
    except ValueError:
        raise BadRequest(NOT_A_NUMBER) from None


def double(value: Any) -> float:
    """A double field as a float."""
    if type(value) is float and -_INF < value < _INF:
        return value
    if type(value) is int:
        return float(value)
    _json_double(value)
    return number(value)


def hex_id(value: Any, pattern: re.Pattern[str], optional: bool = True) -> str:
    """A trace or span id (``pattern``: 32 or 16 hex digits), lowercase; ``""`` when ``optional`` and empty."""
    if type(value) is str:
        if pattern.fullmatch(value):  # as the exporter writes it: lowercase
            return value
        lower = value.lower()
        if pattern.fullmatch(lower) or (optional and not lower):
            return lower
        encoded = value.encode("utf-8")  # json_format reads a bytes field as base64 first
        base64.urlsafe_b64decode(encoded + b"=" * (4 - len(encoded) % 4))
        raise BadRequest(NOT_AN_ID)
    if isinstance(value, Unpaired):
        raise BadRequest(SURROGATE)
    raise TypeError(f"expected an id, got {type(value).__name__}")


def enum(value: Any, names: frozenset[str]) -> None:
    """Refuse ``value`` where json_format would for an (open) enum field whose names are ``names``;
    an unknown name is left unset, as json_format does when told to ignore unknown fields."""
    if isinstance(value, str) and value in names:
        return
    if isinstance(value, (list, dict, Unpaired)):  # json_format stopped on a lone surrogate (SystemError)
        raise TypeError("an enum that is not a name or a number")
    try:
        n = int(value)
    except ValueError:
        return  # an unknown name (or NaN)
    if not I32[0] <= n <= I32[1]:
        raise ValueError("an enum out of range")


def items(obj: dict[str, Any], key: str) -> list[Any]:
    """``obj``'s repeated field ``key``: a list (absent: empty; null is not a list)."""
    value = obj.get(key)
    if type(value) is list:
        return value
    if value is None and key not in obj:
        return []
    raise TypeError(f"{key} is not a list")


def members(value: Any, fields: frozenset[str]) -> dict[str, Any]:
    """The members json_format reads of a message-typed ``value``: an object's; a string or a list
    (which it walks as a list of names) names none of ``fields``, or is refused."""
    if type(value) is dict:
        return value
    if isinstance(value, str):
        return {}  # its characters: no field has a one-character name
    if type(value) is list:
        for name in value:
            if not isinstance(name, str) or name in fields or _EXTENSION.match(name):
                raise TypeError("a message that is a list of its fields")
        return {}
    raise TypeError(f"expected an object, got {type(value).__name__}")


# AnyValue's members, both spellings json_format takes, by kind (one at most: a oneof).
_ANY = {
    **dict.fromkeys(("stringValue", "string_value"), "string"),
    **dict.fromkeys(("boolValue", "bool_value"), "bool"),
    **dict.fromkeys(("intValue", "int_value"), "int"),
    **dict.fromkeys(("doubleValue", "double_value"), "double"),
    **dict.fromkeys(("arrayValue", "array_value"), "array"),
    **dict.fromkeys(("kvlistValue", "kvlist_value"), "kvlist"),
    **dict.fromkeys(("bytesValue", "bytes_value"), "bytes"),
}
_ANY_FIELDS = frozenset(_ANY)
_LIST_FIELDS = frozenset({"values"})
_KV_FIELDS = frozenset({"key", "value"})


def _check_any(v: dict[str, Any], depth: int) -> None:
    """Refuse an AnyValue (at message depth ``depth``) where json_format would."""
    if depth > MAX_DEPTH:
        raise ValueError("a value nested too deep")
    members_set = 0
    for key, x in v.items():
        kind = _ANY.get(key)
        if kind is None or x is None:
            continue
        members_set += 1
        if members_set > 1:
            raise ValueError("an AnyValue with two values")
        if kind == "string":
            text(x)
        elif kind == "bool":
            if not isinstance(x, bool):
                raise TypeError("a bool that is not true or false")
        elif kind == "int":
            check_integer(x)
        elif kind == "double":
            _json_double(x)
        elif kind == "bytes":
            _bytes(x)
        else:
            if depth + 1 > MAX_DEPTH:
                raise ValueError("a value nested too deep")
            for element in _repeated(members(x, _LIST_FIELDS).get("values")):
                if kind == "array":
                    _check_any(members(element, _ANY_FIELDS), depth + 2)
                    continue
                kv = members(element, _KV_FIELDS)
                if depth + 2 > MAX_DEPTH:
                    raise ValueError("a value nested too deep")
                if kv.get("key") is not None:
                    text(kv["key"])
                if kv.get("value") is not None:
                    _check_any(members(kv["value"], _ANY_FIELDS), depth + 3)


def _repeated(value: Any) -> list[Any]:
    """A repeated message field's elements as json_format takes them (null: none; no null element)."""
    if value is None:
        return []
    if type(value) is not list:
        raise TypeError("a repeated field that is not a list")
    if any(x is None for x in value):
        raise TypeError("null in a repeated field")
    return value


def _bytes(value: Any) -> None:
    if isinstance(value, Unpaired):
        raise BadRequest(SURROGATE)
    if type(value) is not str:
        raise TypeError("bytes that are not a string")
    encoded = value.encode("utf-8")
    base64.urlsafe_b64decode(encoded + b"=" * (4 - len(encoded) % 4))


def any_value(v: Any, depth: int, frozen: bool = True) -> Any:
    """An OTLP ``AnyValue`` object. ``frozen`` (attribute values): an array as a tuple and a map as
    its JSON text, so that any value can be a key (a stage, a process, a server); else a list and a dict."""
    if len(v) == 1:
        for key, x in v.items():
            if key == "stringValue":
                if type(x) is str:
                    return x
            elif key == "intValue":
                if type(x) is str and x.isascii() and (x.isdigit() or (x[:1] == "-" and x[1:].isdigit())):
                    n = int(x)
                    if I64[0] <= n <= I64[1]:
                        return n
            elif key == "doubleValue":
                if type(x) is float and -_INF < x < _INF:
                    return x
            elif key == "boolValue" and type(x) is bool:
                return x
    _check_any(v, depth)
    return _value(v, frozen)


def _value(v: Any, frozen: bool) -> Any:
    """An AnyValue json_format takes, as the readers read it (its first member when of no known kind)."""
    if "intValue" in v:
        return int(v["intValue"])  # OTLP JSON writes int64 as a string
    if "doubleValue" in v:
        return number(v["doubleValue"])
    if "arrayValue" in v:
        values = [_value(x, frozen) for x in v["arrayValue"].get("values", [])]
        return tuple(values) if frozen else values
    if "kvlistValue" in v:  # a map, e.g. a sampled generation's {prompt, response} body
        pairs = {text(a["key"]): _value(a.get("value", {}), False) for a in v["kvlistValue"].get("values") or []}
        return body_text(pairs) if frozen else pairs
    return next(iter(v.values()), None)


def attributes(entries: Any, depth: int) -> dict[str, Any]:
    """Attributes (a list of KeyValue, its AnyValues at ``depth``): each value a str, int, float,
    bool, bytes' base64 text, tuple of those, or a map's JSON text."""
    if entries is None:
        return {}
    if type(entries) is not list:
        raise TypeError("attributes that are not a list")
    out: dict[str, Any] = {}
    for a in entries:
        if type(a) is not dict:
            raise TypeError("an attribute that is not an object")
        key = a["key"]
        if type(key) is not str:
            key = text(key)
        v = a.get("value")
        if type(v) is dict:
            if len(v) == 1:  # the usual value, as the exporter writes it, read here (no call)
                ((kind, x),) = v.items()
                if kind == "intValue":
                    if type(x) is str and len(x) < 19 and x.isascii() and x.isdigit():
                        out[key] = int(x)
                        continue
                elif kind == "stringValue":
                    if type(x) is str:
                        out[key] = x
                        continue
                elif kind == "doubleValue":
                    if type(x) is float and -_INF < x < _INF:
                        out[key] = x
                        continue
                elif kind == "boolValue" and type(x) is bool:
                    out[key] = x
                    continue
            out[key] = any_value(v, depth)
        elif v is None and "value" not in a:
            out[key] = None
        else:
            raise TypeError("an attribute value that is not an object")
    return out


def body_text(value: Any) -> str:
    """A log body as text: strings as they are, a map or a list (structured bodies) as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, default=str)
    return "" if value is None else str(value)


def optional_message(value: Any) -> dict[str, Any] | None:
    """A message-typed field the readers take as ``value or {}`` (a span's status, a log's body):
    None when empty (null, ``""``, ``[]``, ``{}``), the object otherwise; refused when json_format
    refuses it (a number, a bool) or the readers cannot read it (a string, a list)."""
    if type(value) is dict:
        return value or None
    if value is None or (type(value) in (str, list) and not value):
        return None
    raise TypeError("expected an object")
