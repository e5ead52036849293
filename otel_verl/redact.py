"""Secret redaction for anything of the job's configuration or environment that otel-verl sends out.

A key looks secret when its words (split at ``_ . - /``, spaces and camelCase, case-insensitive)
contain one of :data:`SECRET_WORDS` (``password``, ``secret``, ``credential``, ``auth``...), or
``key`` right after :data:`KEY_QUALIFIERS` (``api_key``, ``wandb_api_key``, ``access_key``,
``private_key``), or end with ``token`` (``hf_token``, ``access_token``, ``token``) unless a
tokenizer word precedes it (``pad_token``, ``eos_token``). Words only, never substrings:
``max_token_len``, ``num_speculative_tokens``, ``prompt_key``, ``kl_loss_type``, ``tokenizer``
are not secrets. Only string values (and lists of strings) are replaced: a number or a bool under
such a key carries no secret.

Used for the ``verl.config`` span attribute (``otel_verl.run_config``) and for the ``OTEL_*``
variables handed to Ray's ``runtime_env`` (``hooks/ray_launch.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

REDACTED = "[REDACTED]"

SECRET_WORDS = frozenset(
    {
        "secret",
        "secrets",
        "password",
        "passwd",
        "passphrase",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "apikey",
        "accesskey",
        "secretkey",
        "privatekey",
        "cookie",
        "bearer",
        "headers",  # OTLP/HTTP headers carry auth tokens
    }
)
KEY_QUALIFIERS = frozenset({"api", "access", "secret", "private", "client", "signing", "encryption", "account", "auth"})
# ``<word>_token`` names a tokenizer's special token (a visible string such as "<pad>"), not a secret
TOKENIZER_WORDS = frozenset(
    {"pad", "eos", "bos", "unk", "sep", "cls", "mask", "start", "end", "stop", "special", "image", "video", "audio"}
)

_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SPLIT = re.compile(r"[^A-Za-z0-9]+")


def words(key: str) -> list[str]:
    """``"wandbApiKey"`` / ``"WANDB_API_KEY"`` / ``"wandb.api-key"`` -> ``["wandb", "api", "key"]``."""
    return [w for w in _SPLIT.split(_CAMEL.sub(r"\1_\2", key).lower()) if w]


def is_secret_key(key: Any) -> bool:
    if not isinstance(key, str):
        return False
    parts = words(key)
    for i, word in enumerate(parts):
        if word in SECRET_WORDS:
            return True
        if word == "key" and i > 0 and parts[i - 1] in KEY_QUALIFIERS:
            return True
    if parts and parts[-1] == "token" and (len(parts) == 1 or parts[-2] not in TOKENIZER_WORDS):
        return True
    return False


def _is_text(value: Any) -> bool:
    return isinstance(value, str) or (
        isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, str) for v in value)
    )


def redact(value: Any) -> Any:
    """A copy of ``value`` (nested mappings and lists) with the text under secret keys replaced."""
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if is_secret_key(key) and _is_text(item) and item:
                out[key] = REDACTED
            else:
                out[key] = redact(item)
        return out
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value
