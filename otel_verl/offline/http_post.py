"""POST to (or GET from) an endpoint that is not trusted: urllib3, and the rules every request and answer follow.

``otel-verl replay`` sends a run's telemetry, with the user's credentials, to an endpoint whose
answers may come from anything on the way (a proxy, a load balancer, a captive portal). Each rule
lives here, once:

* **No redirects.** A 3xx is the answer (``Answer.location`` says where it pointed), never
  followed: the request and its headers, credentials among them, go to the URL given and nowhere
  else.
* **A deadline.** ``timeout`` bounds the whole request on the wall clock: connecting, sending,
  every read of the answer, and the retries with their waits. A socket timeout alone does not: each
  byte that arrives starts it again, so an endpoint that trickles its answer would hold the request
  for ever. ``NoAnswer`` when the deadline passes.
* **A bounded answer.** At most ``limit`` bytes of a body are read (``Answer.complete`` says whether
  that was all of it); the connection of a longer answer is closed unread, never drained. Bodies
  are not decompressed. http.client bounds the status line and the headers.
* **Retries of throttling answers only.** A ``retry_status`` answer is sent again up to ``retries``
  times, as urllib3's ``Retry`` decides: after the ``Retry-After`` the endpoint asks for (seconds
  or an HTTP date), else an exponential backoff. A wait that would end past the deadline is not
  started: that answer is returned (a ``Retry-After`` in ``Answer.retry_after``). Nothing else is
  retried: a request that failed once sent may have been received.
* Proxies as ``urllib.request`` finds them (``http_proxy``, ``https_proxy``, ``no_proxy``).
* **Never traced.** Each POST runs with OpenTelemetry's instrumentation suppressed: under
  ``opentelemetry-instrument`` an instrumented ``urllib3`` makes no span of a replay.

``printable`` is how text from an answer is shown: control characters escaped, length bounded.
"""

from __future__ import annotations

import http.client
import io
import time
import urllib.request
from collections.abc import Collection, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import urllib3
from opentelemetry.instrumentation.utils import suppress_instrumentation
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    InvalidHeader,
    MaxRetryError,
    NewConnectionError,
    ReadTimeoutError,
)
from urllib3.response import BaseHTTPResponse
from urllib3.util import Retry, Timeout, make_headers

MAX_ANSWER_BYTES = 64 * 1024  # an OTLP answer is a few hundred bytes; an error page a few KiB
_SEND_CHUNK = 64 * 1024  # the deadline is checked between pieces of a large body

_DEADLINE: ContextVar[float | None] = ContextVar("otel_verl_http_deadline", default=None)  # time.monotonic()


def _left() -> float | None:
    """Seconds to the current request's deadline (None outside ``Poster.post``); ``TimeoutError``
    once it has passed."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the request's deadline passed")
    return left


class _DeadlineReader(io.RawIOBase):
    """The socket's reader, each read waiting at most until the deadline."""

    def __init__(self, raw: io.RawIOBase, sock: Any) -> None:
        self._raw, self._sock = raw, sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        left = _left()
        if left is not None:
            self._sock.settimeout(left)
        return self._raw.readinto(buffer)

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        self._raw.close()  # the socket's own reader: closing it lets the socket close, as http.client expects
        super().close()


class _Response(http.client.HTTPResponse):
    """http.client's response (status line, headers, body) read through ``_DeadlineReader``."""

    def __init__(self, sock: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp = io.BufferedReader(_DeadlineReader(self.fp.detach(), sock))


class _Bounded:
    """What the deadline changes in a urllib3 connection: connecting, sending, the answer."""

    response_class = _Response
    sock: Any
    timeout: Any

    def _new_conn(self) -> Any:
        try:
            left = _left()
        except TimeoutError:
            raise ConnectTimeoutError(self, "the request's deadline passed before connecting") from None
        if left is not None and isinstance(self.timeout, (int, float)):
            self.timeout = min(self.timeout, left)  # also bounds the TLS handshake: CPython's is one deadline
        return super()._new_conn()  # type: ignore[misc]

    def send(self, data: Any) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            super().send(data)  # type: ignore[misc]
            return
        view = memoryview(data)
        for start in range(0, max(len(view), 1), _SEND_CHUNK):
            left = _left()
            if left is not None and self.sock is not None:
                self.sock.settimeout(left)
            super().send(view[start : start + _SEND_CHUNK])  # type: ignore[misc]


class _HTTPConnection(_Bounded, HTTPConnection):
    pass


class _HTTPSConnection(_Bounded, HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


@dataclass(frozen=True)
class Answer:
    """The endpoint's final answer to one request."""

    status: int
    reason: str
    body: bytes  # at most the limit
    complete: bool  # False: the body went on past the limit (the rest was not read)
    location: str | None = None  # a redirect's Location, as sent (not followed)
    retry_after: float | None = None  # the Retry-After it asked for, which did not fit in the deadline

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def excerpt(self, chars: int = 300) -> str:
        """The start of the body as text, printable."""
        return printable(self.body[: chars * 4].decode("utf-8", "replace"), chars)


class NoAnswer(Exception):
    """No complete answer: refused, not resolved, timed out, cut off. The message is one line."""


def printable(text: str, chars: int = 300) -> str:
    """``text`` as one line for a terminal: whitespace runs as one space, other control characters
    escaped (``\\x1b``), at most ``chars`` characters of it."""
    out = " ".join(text.split())
    escaped = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in out[:chars])
    return escaped + ("..." if len(out) > chars else "")


def _proxy(url: str) -> str | None:
    """The proxy ``urllib.request`` would use for ``url`` (its ``*_proxy`` variables), or None."""
    parts = urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    host = parts.hostname or ""
    if not proxy or urllib.request.proxy_bypass(f"{host}:{parts.port}" if parts.port else host):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _wait(retry: Retry, response: BaseHTTPResponse) -> tuple[float, bool]:
    """What urllib3's ``Retry.sleep`` waits before the next attempt: (``Retry-After``, True), else
    (the backoff, False)."""
    try:
        after = retry.get_retry_after(response)
    except InvalidHeader:  # neither seconds nor a date: as if it were absent
        after = None
    return (after, True) if after else (retry.get_backoff_time(), False)


def _discard(response: BaseHTTPResponse) -> None:
    """Done with ``response`` without reading the rest: its connection is closed, not drained."""
    response.close()
    response.release_conn()


def _why(exc: BaseException) -> tuple[str, bool]:
    """(one line saying why ``exc`` left no answer, whether it was a timeout)."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        if isinstance(seen, MaxRetryError) and seen.reason is not None:
            seen = seen.reason
        elif seen.args and isinstance(seen.args[-1], BaseException):  # ProtocolError("...", cause)
            seen = seen.args[-1]
        else:
            seen = seen.__cause__ or seen.__context__
    timed_out = any(
        isinstance(e, (TimeoutError, ReadTimeoutError))
        or (isinstance(e, ConnectTimeoutError) and not isinstance(e, NewConnectionError))
        for e in chain
    )
    inner = chain[-1]
    text = str(inner) or type(inner).__name__
    if isinstance(inner, http.client.BadStatusLine):
        text = f"not an HTTP answer: {text}"
    for e in chain:
        if isinstance(e, NewConnectionError):  # its str starts with the connection object's repr
            text = f"{getattr(e, '_message', e)}"
    return printable(text), timed_out


class Poster:
    """POSTs under the rules of this module; one per command (it keeps connections open)."""

    def __init__(
        self,
        retries: int,
        retry_status: Collection[int],
        backoff: float = 0.5,
        limit: int = MAX_ANSWER_BYTES,
    ) -> None:
        self.limit = limit
        self._retry = Retry(
            total=retries,
            status_forcelist=retry_status,
            allowed_methods=None,  # POST too: a throttling answer says the request was not taken
            backoff_factor=backoff,
            respect_retry_after_header=True,
        )
        self._managers: dict[str | None, urllib3.PoolManager] = {}

    def _manager(self, url: str) -> urllib3.PoolManager:
        proxy = _proxy(url)
        if proxy not in self._managers:
            if proxy is None:
                manager = urllib3.PoolManager()
            else:
                p = urlsplit(proxy)
                auth = f"{unquote(p.username)}:{unquote(p.password or '')}" if p.username else None
                headers = make_headers(proxy_basic_auth=auth) if auth else None
                manager = urllib3.ProxyManager(proxy, proxy_headers=headers)
            manager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}
            self._managers[proxy] = manager
        return self._managers[proxy]

    def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> Answer:
        """POST ``body`` to ``url``: the final answer, or ``NoAnswer``, within ``timeout`` seconds."""
        with suppress_instrumentation():
            return self._send("POST", url, body, headers, timeout)

    def get(self, url: str, headers: Mapping[str, str], timeout: float) -> Answer:
        """GET ``url`` under the same rules (a query API's answer, read up to ``limit`` bytes)."""
        with suppress_instrumentation():
            return self._send("GET", url, None, headers, timeout)

    def _send(self, method: str, url: str, body: bytes | None, headers: Mapping[str, str], timeout: float) -> Answer:
        deadline = time.monotonic() + timeout
        token = _DEADLINE.set(deadline)
        retry = self._retry
        try:
            while True:
                response = self._manager(url).urlopen(
                    method,
                    url,
                    body=body,
                    headers=urllib3.HTTPHeaderDict(headers),
                    redirect=False,  # a 3xx is the answer
                    retries=False,  # attempts are this loop's: urllib3 would drain an answer to retry
                    timeout=Timeout(connect=timeout, read=timeout),
                    preload_content=False,
                    decode_content=False,
                )
                if not retry.is_retry(method, response.status, bool(response.headers.get("Retry-After"))):
                    return self._answer(response)
                try:
                    retry = retry.increment(method, url, response=response)
                except MaxRetryError:  # retries spent: this one is the answer
                    return self._answer(response)
                wait, asked = _wait(retry, response)
                if time.monotonic() + wait >= deadline:  # no time for another attempt: this one is the answer
                    return self._answer(response, retry_after=wait if asked else None)
                _discard(response)
                time.sleep(wait)
        except (HTTPError, OSError, http.client.HTTPException) as exc:
            why, timed_out = _why(exc)
            if timed_out or time.monotonic() >= deadline:
                raise NoAnswer(f"timed out: no complete answer within {timeout:g} s") from None
            raise NoAnswer(why) from None
        finally:
            _DEADLINE.reset(token)

    def _answer(self, response: BaseHTTPResponse, retry_after: float | None = None) -> Answer:
        """``response``, its body read as far as the limit."""
        chunks: list[bytes] = []
        size, complete = 0, False
        try:
            while size <= self.limit:
                chunk = response.read(self.limit + 1 - size, decode_content=False)
                if not chunk:
                    complete = True
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            if complete:
                response.release_conn()
            else:
                _discard(response)
        location = response.headers.get("Location") if 300 <= response.status < 400 else None
        body = b"".join(chunks)[: self.limit]
        return Answer(response.status, response.reason or "", body, complete, location, retry_after)

    def close(self) -> None:
        for manager in self._managers.values():
            manager.clear()

    def __enter__(self) -> Poster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
