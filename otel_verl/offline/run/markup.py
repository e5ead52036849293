"""How the report page puts what it read into HTML: the one escaping rule of every template.

Every value taken from a file (a name, an attribute, an id, a number) enters the page through
``esc``: shown as ``text.printable`` shows it (bounded, controls and bidirectional overrides
written as escapes) and HTML-escaped for text and quoted attributes alike. The data the script
charts enters through ``script_json``: JSON with ``<``, ``>`` and ``&`` written as ``\\u003c``
escapes, so that no text of a file can end the script element or open a comment in it, and
non-finite numbers as ``null``. ``csp_meta`` lets only the page's own script and stylesheet run,
so that markup that got through anyway could not run a script.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
from typing import Any

from otel_verl.printable import MAX_CHARS, printable


def esc(value: Any, limit: int = MAX_CHARS, newlines: bool = False) -> str:
    """``value`` as text inside HTML or a quoted attribute; at most ``limit`` characters of it shown
    (``newlines``: keep its line breaks, for a ``<pre>`` block)."""
    return html.escape(printable(value, limit, newlines), quote=True)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


_SCRIPT_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def script_json(data: Any) -> str:
    """``data`` as the text of a ``<script type="application/json">`` element (ASCII; NaN and
    infinities, which JSON has no words for, as ``null``)."""
    return json.dumps(_finite(data), allow_nan=False).translate(_SCRIPT_ESCAPES)


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def csp_meta(script: str, style: str) -> str:
    """The page's Content-Security-Policy: nothing is loaded, and the only script and stylesheet
    that apply are the inline ``script`` and ``style`` elements with exactly this text (by hash;
    no inline event handler or ``style`` attribute runs)."""
    policy = (
        f"default-src 'none'; script-src {_sha256(script)}; style-src {_sha256(style)}; "
        "base-uri 'none'; form-action 'none'"
    )
    return f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
