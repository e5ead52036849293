"""An HTTP endpoint on raw sockets for tests: it answers what a script says, byte by byte if need be.

``with ScriptedEndpoint(script) as ep: ... ep.url`` - for each request (any method), ``script(n,
request)`` gives the answer: bytes, or an iterable of bytes sent piece by piece (a generator can
pause between pieces, or never end: it stops when the client leaves or the endpoint closes). One
answer per connection. ``requests`` records each request as it arrived (its arrival time on this
side, method, target, lower-cased headers, body); ``sent`` the bytes written on each connection.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Request:
    at: float  # time.monotonic() when its head had arrived
    method: str
    target: str
    headers: dict[str, str]
    body: bytes = b""


@dataclass
class Sent:
    size: int = 0  # bytes written
    done: threading.Event = field(default_factory=threading.Event)  # the script ended or the client left


Script = Callable[[int, Request], "bytes | Iterable[bytes]"]


def answer(status: str, body: bytes = b"", **headers: str) -> bytes:
    """A whole HTTP/1.1 answer that closes its connection; ``Retry_After="1"`` -> ``Retry-After: 1``."""
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", "Connection: close"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass
class ScriptedEndpoint:
    script: Script
    requests: list[Request] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.closed = threading.Event()
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.getsockname()[1]}"

    def __enter__(self) -> ScriptedEndpoint:
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.closed.set()
        self._server.close()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            head, _, body = head.partition(b"\r\n\r\n")
            request_line, *lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
            while len(body) < int(headers.get("content-length", 0)):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                body += chunk
            method, target, _ = request_line.split(" ", 2)
            request = Request(time.monotonic(), method, target, headers, body)
            sent = Sent()
            with self._lock:
                self.requests.append(request)
                self.sent.append(sent)
                n = len(self.requests)
            out = self.script(n, request)
            try:
                for piece in [out] if isinstance(out, bytes) else out:
                    if self.closed.is_set():
                        break
                    conn.sendall(piece)
                    sent.size += len(piece)
            except OSError:  # the client left
                pass
            finally:
                sent.done.set()


def trickle(head: bytes, every: float, stop: threading.Event) -> Iterable[bytes]:
    """``head``, then one byte each ``every`` seconds until ``stop``."""
    yield head
    while not stop.wait(every):
        yield b"a"


def endless(head: bytes, most: int) -> Iterable[bytes]:
    """``head``, then a body of 64 KiB pieces, ``most`` bytes in all (more than any client should read)."""
    yield head
    piece = b"x" * 65536
    for _ in range(most // len(piece)):
        yield piece
