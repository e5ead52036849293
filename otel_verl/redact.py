"""Secret redaction for anything of the job's configuration or environment that otel-verl sends out.

Two rules, applied together by :func:`redact` to every value of a nested structure:

**Keys** (:func:`is_secret_key`). A key is split into lower-case words at every character that is
not a letter or digit and at camelCase boundaries, acronyms included (``HFToken`` -> ``hf token``,
``XApiKey`` -> ``x api key``, ``WANDB_API_KEY`` -> ``wandb api key``); a word that is a plural
of the vocabulary loses its ``s`` (``passwords``, ``tokens``, ``headers``). The key is secret when

* a word, or two adjacent words joined (``Pass Word``, ``api key``), is in :data:`SECRET_WORDS`
  (``password``, ``pass``, ``pwd``, ``secret``, ``credential``, ``auth``, ``jwt``, ``pat``,
  ``header``, ``cookie``, ``apikey``...);
* ``key`` comes right after a word of :data:`KEY_QUALIFIERS` (``api_key``, ``ssh_key``,
  ``session_key``, ``hmac_key``, ``AccountKey``, ``client_key``);
* the last word is ``token`` and no word of :data:`TOKENIZER_WORDS` precedes it (``hf_token``,
  ``access_token``, ``token``, but not ``pad_token``, ``eos_token``);
* the last word is ``tokens`` and it stands alone or after a word of :data:`KEY_QUALIFIERS`
  (``tokens``, ``access_tokens``, but not ``max_tokens``, ``num_speculative_tokens``).

Words, never substrings: ``max_token_len``, ``prompt_key``, ``tokenizer``, ``kl_loss_type``,
``bypass_mode``, ``monkey`` are ordinary keys. Under a secret key the whole value goes: a string,
a number (YAML reads ``password: 123456`` as one), a mapping or a list becomes ``[REDACTED]``;
``None``, a bool, and an empty string or container carry no secret and stay as they are.

**Values** (:func:`redact_text`). In every string, wherever it is (under an ordinary key, in a
list, the ``OTEL_*`` variables), the credential-bearing shapes of :data:`_SHAPES` are replaced:
a URL's userinfo (``https://user:pass@host``, ``postgres://u:p@h/db``), the value of a
``name=value`` or ``name: value`` pair whose name is a secret key or a credential query name
(``?api_key=``, ``&token=``, ``&sig=``, ``AccountKey=...;``, ``password=`` in a DSN), the
credentials of an ``Authorization`` scheme (``Bearer``, ``Basic``...), PEM private key blocks,
and the fixed prefixes of well-known tokens (``hf_``, ``ghp_``, ``github_pat_``, ``sk-``,
``xox?-``, ``AKIA``, JWTs).

Used for the ``verl.config`` span attribute (``otel_verl.run_config``) and for the ``OTEL_*``
variables handed to Ray's ``runtime_env`` (``hooks/ray_launch.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

REDACTED = "[REDACTED]"

SECRET_WORDS = frozenset(
    {
        "secret",
        "password",
        "passwd",
        "pass",
        "pwd",
        "passphrase",
        "credential",
        "cred",
        "creds",
        "auth",
        "authn",
        "authz",
        "authorization",
        "oauth",
        "cookie",
        "bearer",
        "jwt",
        "pat",  # personal access token (github_pat)
        "dsn",
        "header",  # OTLP/HTTP headers carry auth tokens (also a misspelt singular *_HEADER)
        # single words made of two (also matched as two words: ``api_key``, ``PassWord``)
        "apikey",
        "accesskey",
        "secretkey",
        "privatekey",
        "sessionkey",
        "apitoken",
        "accesstoken",
        "authtoken",
        "refreshtoken",
        "sessiontoken",
        "bearertoken",
        "hftoken",
    }
)
KEY_QUALIFIERS = frozenset(
    {
        "api",
        "access",
        "secret",
        "private",
        "client",
        "signing",
        "encryption",
        "decryption",
        "account",
        "auth",
        "session",
        "hmac",
        "ssh",
        "gpg",
        "pgp",
        "master",
        "license",
        "storage",
        "shared",
        "subscription",
        "app",
        "consumer",
        "deploy",
        "refresh",
        "bearer",
        "id",
        "sas",
        "x",  # X-Api-Key and friends once split
        # services whose key or token is always a credential
        "wandb",
        "openai",
        "anthropic",
        "hf",
        "huggingface",
        "github",
        "gitlab",
        "aws",
        "azure",
        "gcp",
        "swanlab",
        "mlflow",
        "comet",
        "neptune",
        "slack",
    }
)
# ``<word>_token`` names a tokenizer's special token (a visible string such as "<pad>"), not a secret
TOKENIZER_WORDS = frozenset(
    {
        "pad",
        "eos",
        "bos",
        "unk",
        "sep",
        "cls",
        "mask",
        "start",
        "end",
        "stop",
        "special",
        "image",
        "video",
        "audio",
        "eot",
        "eom",
        "think",
        "placeholder",
        "sentinel",
        "dp",  # verl's balance_dp_token
    }
)
# Pair names that are credentials only as a URL query parameter or a ``name=value`` pair.
PAIR_NAMES = frozenset({"key", "sig", "signature", "sas", "code"})

_VOCABULARY = SECRET_WORDS | KEY_QUALIFIERS | {"key", "token"}
# one word of a key: an acronym before a capitalised word (``HF`` of ``HFToken``), a
# capitalised or lower-case word (digits stay with it), or a trailing acronym
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z0-9]+")
_SPLIT = re.compile(r"[^A-Za-z0-9]+")


def _singular(word: str) -> str:
    if word.endswith("s") and word[:-1] in _VOCABULARY:
        return word[:-1]
    return word


def words(key: str) -> list[str]:
    """``"wandbApiKey"`` / ``"WANDB_API_KEY"`` / ``"wandb.api-key"`` -> ``["wandb", "api", "key"]``;
    ``"HFToken"`` -> ``["hf", "token"]``, ``"XApiKey"`` -> ``["x", "api", "key"]``."""
    return [w.lower() for part in _SPLIT.split(key) for w in _WORD.findall(part)]


def is_secret_key(key: Any) -> bool:
    """Whether a value under ``key`` is a secret (the key rule of this module's docstring)."""
    if not isinstance(key, str):
        return False
    raw = words(key)
    if not raw:
        return False
    parts = [_singular(w) for w in raw]
    for i, word in enumerate(parts):
        if word in SECRET_WORDS or (i > 0 and parts[i - 1] + word in SECRET_WORDS):
            return True
        if word == "key" and i > 0 and parts[i - 1] in KEY_QUALIFIERS:
            return True
    before = parts[-2] if len(parts) > 1 else None
    if raw[-1] == "token":
        return before is None or before not in TOKENIZER_WORDS
    if raw[-1] == "tokens":  # plural: a count (max_tokens) unless a credential's qualifier says otherwise
        return before is None or before in KEY_QUALIFIERS
    return False


@lru_cache(maxsize=4096)
def _secret_name(name: str) -> bool:
    return is_secret_key(name) or name.lower() in PAIR_NAMES


# A pair's name and separator, then (only after a secret name) its value: the value is matched
# apart so that a pair with an ordinary name never hides the pairs inside its value
# (``url=https://h/?token=...``) and a hostile long string costs linear time.
_PAIR_NAME = re.compile(r"(?<![A-Za-z0-9_.])([A-Za-z_][A-Za-z0-9_.\-]{0,127})[\"']?\s{0,8}[=:]\s{0,8}")
_PAIR_VALUE = re.compile(r"\"[^\"]{0,4096}\"|'[^']{0,4096}'|[^\s&;,#\"'<>]+")


def _pairs(text: str) -> str:
    """``name=value`` / ``name: value`` / ``"name": "value"`` with a secret name: its value replaced."""
    out: list[str] = []
    pos = 0
    while (match := _PAIR_NAME.search(text, pos)) is not None:
        out.append(text[pos : match.end()])
        pos = match.end()
        if _secret_name(match[1]):
            value = _PAIR_VALUE.match(text, pos)
            if value is not None:
                quote = value[0][0] if value[0][0] in "\"'" else ""
                out.append(f"{quote}{REDACTED}{quote}")
                pos = value.end()
    out.append(text[pos:])
    return "".join(out)


# The credential-bearing shapes of a string, in the order they are replaced. Each is bounded
# (lengths, a look-behind at the start of a run) so that a hostile long string costs linear time.
_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    # PEM private keys (the whole block)
    (
        re.compile(
            r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----.{0,65536}?-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----", re.S
        ),
        REDACTED,
    ),
    # URL userinfo, up to the last @ of the authority: https://user:pass@host, postgres://u:p@h/db, redis://:pw@h
    (
        re.compile(r"(?<![A-Za-z0-9+.\-])([A-Za-z][A-Za-z0-9+.\-]{0,40}://)[^\s/?#\"'<>]{1,4096}@"),
        rf"\1{REDACTED}@",
    ),
    # user:pass@host without a scheme (a bare gRPC endpoint); starts only after a delimiter
    (
        re.compile(
            r"(?<![^\s,;=\"'()\[\]{}<>])[^\s:/?#@,;=\"'()\[\]{}<>]{1,256}:[^\s/?#,;=\"'()\[\]{}<>]{1,4096}@(?=[A-Za-z0-9\[])"
        ),
        f"{REDACTED}@",
    ),
    # the credentials of an Authorization scheme: "Bearer <token>", "Basic <base64>"
    (
        re.compile(
            r"\b([Bb][Ee][Aa][Rr][Ee][Rr]|Basic|Digest|Negotiate|Token|ApiKey)(\s+|%20|\+)[A-Za-z0-9._~+/=\-]{4,}"
        ),
        rf"\1\2{REDACTED}",
    ),
    # well-known token formats, whatever key they are under
    (
        re.compile(
            r"\b(?:hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,}"
            r"|glpat-[A-Za-z0-9_\-]{20,}|sk-[A-Za-z0-9_\-]{20,}|xox[abposr]-[A-Za-z0-9\-]{10,}"
            r"|(?:AKIA|ASIA)[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{35}"
            r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,})"
        ),
        REDACTED,
    ),
)


def redact_text(text: str) -> str:
    """``text`` with every credential-bearing shape replaced (the value rule)."""
    for pattern, replacement in _SHAPES:
        text = pattern.sub(replacement, text)
    # name=value pairs (query strings, connection strings such as AccountKey=...;, DSNs with
    # password=..., header lists such as authorization=..., command-line flags)
    return _pairs(text)


def has_secret(text: str) -> bool:
    """Whether ``text`` holds a credential-bearing shape."""
    return redact_text(text) != text


def _is_empty(value: Any) -> bool:
    return value is None or isinstance(value, bool) or (isinstance(value, (str, Mapping, list, tuple)) and not value)


def redact(value: Any) -> Any:
    """A copy of ``value`` (nested mappings and lists) with both rules applied.

    Under a secret key the whole value is replaced (unless empty, ``None`` or a bool); every
    other string goes through :func:`redact_text`. Anything else than JSON's types becomes its
    redacted ``str``, so that nothing is turned into text after redaction.
    """
    if isinstance(value, Mapping):
        return {
            key: (REDACTED if is_secret_key(key) and not _is_empty(item) else redact(item))
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return redact_text(str(value))
