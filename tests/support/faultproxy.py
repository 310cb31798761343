"""A fault-injecting HTTP proxy on loopback, IN FRONT OF a real registry.

The registry is real; only faults it cannot be made to produce are added here, each on the
requests a rule matches and only as many times as the rule says, so a test can prove both
that the fault fired (``proxy.fired``) and what the client made of it:

- ``drop``: forward the headers and ``after`` body bytes, then cut the connection.
- ``status``: answer ``status`` (503, 429, ...) with an optional Retry-After, upstream untouched.
- ``drip``: forward the body in ``piece``-byte pieces with ``delay`` seconds between them.
- ``truncate``: forward only ``after`` body bytes with a Content-Length that says so (a clean,
  short answer: no transport error to retry).
- ``flip``: flip the byte at ``offset`` of the body (same length, other bytes).

``after`` and ``offset`` move to the middle of a body shorter than them, so a fault that
fired (counted in ``Fault.fired``) always changed something.
- ``wrong_digest``: replace the Docker-Content-Digest header with another digest.
- ``reset``: forward the request (the registry acts on it), then close the connection
  without an answer, as a relay that dies after an upload chunk went through.

Everything else passes through unchanged, Range and Authorization headers included.
"""

from __future__ import annotations

import http.client
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te"}
WRONG_DIGEST = "sha256:" + "0" * 64


@dataclass
class Fault:
    kind: str  # drop | status | drip | truncate | flip | wrong_digest | reset
    path: str = r"/blobs/sha256:"  # regex searched in the request path
    method: str = "GET"
    times: int = 1  # how many matching requests get the fault; -1: all of them
    after: int = 0  # drop / truncate: body bytes forwarded first
    status: int = 503
    retry_after: str | None = None
    piece: int = 4096
    delay: float = 0.01
    offset: int = 100
    only_full: bool = False  # only requests without a Range header
    fired: int = 0

    def matches(self, method: str, path: str, headers: Any) -> bool:
        if self.times >= 0 and self.fired >= self.times:
            return False
        if self.only_full and headers.get("Range"):
            return False
        return method == self.method and re.search(self.path, path) is not None


@dataclass
class FaultProxy:
    upstream: str  # host:port of the real registry
    faults: list[Fault] = field(default_factory=list)
    # (method, path, status, fault kind or '-', Range header or '')
    log: list[tuple[str, str, int, str, str]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def host(self) -> str:
        assert self._server is not None
        return f"127.0.0.1:{self._server.server_address[1]}"

    def fired(self, kind: str | None = None) -> int:
        return sum(f.fired for f in self.faults if kind is None or f.kind == kind)

    def set_faults(self, *faults: Fault) -> None:
        with self._lock:
            self.faults = list(faults)

    def _pick(self, method: str, path: str, headers: Any) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, path, headers):
                    fault.fired += 1
                    return fault
        return None

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return None

            def _handle(self) -> None:
                fault = proxy._pick(self.command, self.path, self.headers)
                kind = fault.kind if fault else "-"
                if fault is not None and fault.kind == "status":
                    self.send_response(fault.status)
                    if fault.retry_after is not None:
                        self.send_header("Retry-After", fault.retry_after)
                    self.send_header("Content-Length", "0")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.close_connection = True
                    proxy.log.append(
                        (self.command, self.path, fault.status, kind, self.headers.get("Range", ""))
                    )
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                # The client's Host stays: the registry builds upload Locations from it, so
                # they point back at this proxy and every request of an upload passes here.
                upstream = http.client.HTTPConnection(proxy.upstream, timeout=60)
                try:
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    data = response.read() if self.command != "HEAD" else b""
                    if fault is not None and fault.kind == "reset":
                        self.close_connection = True
                        self.connection.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                        )
                        self.connection.close()
                        proxy.log.append(
                            (self.command, self.path, 0, kind, self.headers.get("Range", ""))
                        )
                        return
                    self._reply(response, data, fault)
                finally:
                    upstream.close()
                proxy.log.append(
                    (self.command, self.path, response.status, kind, self.headers.get("Range", ""))
                )

            def _reply(
                self, response: http.client.HTTPResponse, data: bytes, fault: Fault | None
            ) -> None:
                kind = fault.kind if fault else None
                # A fault that fired always bites: on a short body (a config) it moves inside.
                if fault is not None and kind == "flip" and data:
                    flipped = bytearray(data)
                    flipped[min(fault.offset, len(data) // 2)] ^= 0xFF
                    data = bytes(flipped)
                if fault is not None and kind == "truncate":
                    data = data[: min(fault.after, len(data) // 2)]
                self.send_response(response.status)
                for key, value in response.getheaders():
                    lower = key.lower()
                    if lower in _HOP or lower == "content-length":
                        continue
                    if lower == "docker-content-digest" and kind == "wrong_digest":
                        value = WRONG_DIGEST
                    self.send_header(key, value)
                if self.command == "HEAD":
                    self.send_header("Content-Length", response.getheader("Content-Length") or "0")
                else:
                    self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                if self.command == "HEAD":
                    return
                if fault is not None and kind == "drop":
                    self.wfile.write(data[: min(fault.after, len(data) // 2)])
                    self.wfile.flush()
                    # An abrupt close (RST) mid-body, as a dying relay or load balancer does.
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                    )
                    self.connection.close()
                    return
                if fault is not None and kind == "drip":
                    for start in range(0, len(data), fault.piece):
                        self.wfile.write(data[start : start + fault.piece])
                        self.wfile.flush()
                        time.sleep(fault.delay)
                    return
                self.wfile.write(data)

            do_GET = _handle  # noqa: N815 - http.server's naming
            do_HEAD = _handle  # noqa: N815
            do_PUT = _handle  # noqa: N815
            do_POST = _handle  # noqa: N815
            do_PATCH = _handle  # noqa: N815
            do_DELETE = _handle  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
