"""A fault-injecting HTTP proxy on loopback, IN FRONT OF a real registry.

The house rule (docs/ARCHITECTURE.md, Tests): a fake is only for a fault the real part cannot
be made to produce, and then it sits in front of the real part. The registry is real; only
faults it cannot be made to produce are added here, each on the requests a rule matches and
only as many times as the rule says, so a test can prove both that the fault fired
(``proxy.fired``) and what the client made of it:

- ``drop``: forward the headers and ``after`` body bytes, then cut the connection.
- ``status``: answer ``status`` (503, 429, ...) with an optional Retry-After, upstream untouched.
- ``drip``: forward the body in ``piece``-byte pieces with ``delay`` seconds between them.
- ``truncate``: forward only ``after`` body bytes with a Content-Length that says so (a clean,
  short answer: no transport error to retry).
- ``flip``: flip the byte at ``offset`` of the body (same length, other bytes).
- ``wrong_digest``: replace the Docker-Content-Digest header with another digest (``digest``,
  or one of zeros), as a converting proxy or a lying registry would.
- ``reset``: forward the request (the registry acts on it), then close the connection
  without an answer, as a relay that dies after an upload chunk went through.
- ``no_mount``: forward a cross-repository mount request (``POST .../uploads/?mount=&from=``)
  without its query, so the real registry opens a plain upload session (202) instead, as a
  registry that does not mount (or refuses this one) answers.
- ``redirect``: answer 307 to another origin (``localhost`` instead of ``127.0.0.1``, the
  same port), the way registries send blob downloads to an object store; the registry here
  keeps blobs on its filesystem and never does. That origin is the "object store": it serves
  the request from the registry on its own standing (``offsite_authorization``, as a
  pre-signed URL would), and the log says which Authorization header arrived there.

The quirks of the public registries (tests/integration/registry/test_quirks.py), each the
way that registry behaves, in front of the real one:

- ``status`` with ``body`` and ``headers``: Docker Hub's 429 TOOMANYREQUESTS with its
  ``RateLimit-*`` headers; Nexus's and Artifactory's HEAD 404 for a manifest a GET serves;
  Harbor's and Nexus's 401/403 to a cross-repository mount (``path=r"mount="``).
- ``chunk_limit``: GHCR's 416 "request body is too large, max size is 4.00MiB" to a PATCH
  of more than ``limit`` bytes, with ``limit`` in GHCR's words (:func:`ghcr_too_large`), or
  ``body`` when one is given; the registry never sees it.
- ``header``: add ``headers`` to the answer (``OCI-Chunk-Min-Length`` on a POST that opens
  an upload).
- ``replace_header``: the answer's headers named in ``headers`` replaced by those values (a
  proxy that serves every manifest as ``Content-Type: application/json``).
- ``csrf``: Harbor's session cookie: every answer sets one, and a write (POST, PUT, PATCH,
  DELETE) that sends a Cookie back is refused 403 "CSRF token invalid".
- ``redirect`` with ``target``: answer 307 to the same path on another origin (lscr.io
  sends its whole API to ghcr.io, a registry with its own login).

``method="*"`` matches every method. ``proxy.max_in_flight`` is the most requests whose
``METHOD path`` matches ``proxy.count_in_flight`` (a regex) that were in flight at once (under
``drip``, until its last piece is sent, not until its handler returns).

``after`` and ``offset`` move to the middle of a body shorter than them, so a fault that
fired (counted in ``Fault.fired``) always changed something.

Everything else passes through unchanged, Range and Authorization headers included. Each
request goes into ``proxy.log`` as an ``Exchange`` once its status is known, before its body.
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
OFFSITE_HOST = "localhost"  # the name a ``redirect`` sends the client to; ours is 127.0.0.1


def ghcr_too_large(limit: int) -> bytes:
    """GHCR's 416 body for a PATCH over ``limit`` bytes, its size printed as GHCR prints it."""
    return (
        b'{"errors":[{"code":"SIZE_INVALID","message":"request body is too large, max size is '
        + f"{limit / (1 << 20):.2f}MiB".encode()
        + b'"}]}'
    )


GHCR_TOO_LARGE = ghcr_too_large(4 << 20)  # ...max size is 4.00MiB"
HARBOR_CSRF = b'{"errors":[{"code":"FORBIDDEN","message":"CSRF token invalid"}]}'
_WRITES = {"POST", "PUT", "PATCH", "DELETE"}
_ANSWERED = {"status", "redirect", "chunk_limit", "csrf"}  # answered here, never forwarded


@dataclass
class Fault:
    # drop | status | drip | truncate | flip | wrong_digest | reset | redirect | no_mount |
    # chunk_limit | header | replace_header | csrf
    kind: str
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
    digest: str = WRONG_DIGEST  # wrong_digest: the digest the header names instead
    body: bytes = b""  # status: the answer's body
    headers: dict[str, str] = field(default_factory=dict)  # status, header: added headers
    limit: int = 4 * 1024 * 1024  # chunk_limit: the largest PATCH body taken
    target: str | None = None  # redirect: host:port of the other origin
    fired: int = 0

    def matches(self, method: str, path: str, headers: Any) -> bool:
        if self.times >= 0 and self.fired >= self.times:
            return False
        if self.only_full and headers.get("Range"):
            return False
        if self.kind == "chunk_limit" and int(headers.get("Content-Length") or 0) <= self.limit:
            return False
        if self.kind == "csrf" and not (method in _WRITES and headers.get("Cookie")):
            return False
        return self.method in ("*", method) and re.search(self.path, path) is not None


@dataclass(frozen=True)
class Exchange:
    """One request as the proxy saw it and the status it answered."""

    method: str
    path: str
    status: int  # 0: the connection was reset without an answer
    fault: str  # the kind of the fault that fired on it, or '-'
    range: str | None  # the Range header that arrived
    authorization: str | None  # the Authorization header that arrived
    offsite: bool = False  # it arrived at the "object store" a ``redirect`` points to
    length: int = 0  # the request body's Content-Length
    cookie: str | None = None  # the Cookie header that arrived
    headers: tuple[tuple[str, str], ...] = ()  # every header that arrived, names lowercased


@dataclass
class FaultProxy:
    upstream: str  # host:port of the real registry
    faults: list[Fault] = field(default_factory=list)
    #: What the "object store" uses to read from the registry (its own standing, not ours).
    offsite_authorization: str | None = None
    log: list[Exchange] = field(default_factory=list)
    count_in_flight: str = r"^GET .*/blobs/sha256:"
    max_in_flight: int = 0
    _in_flight: int = 0
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

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

    def _sets_cookie(self) -> bool:
        """Harbor's session: every answer sets a cookie while a ``csrf`` rule is on."""
        with self._lock:
            return any(f.kind == "csrf" for f in self.faults)

    def _flight(self, request: str, delta: int) -> None:
        if re.search(self.count_in_flight, request):
            with self._lock:
                self._in_flight += delta
                self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return None

            def _record(self, status: int, fault: Fault | None, offsite: bool) -> None:
                proxy.log.append(
                    Exchange(
                        self.command,
                        self.path,
                        status,
                        fault.kind if fault else "-",
                        self.headers.get("Range"),
                        self.headers.get("Authorization"),
                        offsite,
                        int(self.headers.get("Content-Length") or 0),
                        self.headers.get("Cookie"),
                        tuple((k.lower(), v) for k, v in self.headers.items()),
                    )
                )

            def _handle(self) -> None:
                request = f"{self.command} {self.path}"
                proxy._flight(request, 1)
                self._landing = False
                try:
                    self._handle_counted()
                finally:
                    self._land()

            def _land(self) -> None:
                """This request stops counting as in flight (once): its last piece is about
                to go, or its handler returned. Counted until the handler returned, a client
                that had its last byte and started the next request was seen as one request
                too many whenever this thread waited for a core (two workers, two cores)."""
                if not self._landing:
                    self._landing = True
                    proxy._flight(f"{self.command} {self.path}", -1)

            def _handle_counted(self) -> None:
                offsite = self.headers.get("Host", "").startswith(f"{OFFSITE_HOST}:")
                # The object store has no faults (a redirect there would send it back again).
                fault = None if offsite else proxy._pick(self.command, self.path, self.headers)
                if fault is not None and fault.kind in _ANSWERED:
                    length = int(self.headers.get("Content-Length") or 0)
                    if length:
                        self.rfile.read(length)
                    self._answer(fault)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                # The client's Host stays: the registry builds upload Locations from it, so
                # they point back at this proxy and every request of an upload passes here.
                path = self.path
                if fault is not None and fault.kind == "no_mount":
                    path = path.split("?", 1)[0]
                if offsite:
                    # A pre-signed URL: the store checks its query, never the client's
                    # Authorization, and reads the registry on its own standing.
                    path = path.split("?", 1)[0]
                    headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
                    if proxy.offsite_authorization:
                        headers["Authorization"] = proxy.offsite_authorization
                upstream = http.client.HTTPConnection(proxy.upstream, timeout=60)
                try:
                    upstream.request(self.command, path, body=body, headers=headers)
                    response = upstream.getresponse()
                    data = response.read() if self.command != "HEAD" else b""
                    if fault is not None and fault.kind == "reset":
                        self._record(0, fault, offsite)
                        self.close_connection = True
                        self.connection.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                        )
                        self.connection.close()
                        return
                    self._record(response.status, fault, offsite)
                    self._reply(response, data, fault)
                finally:
                    upstream.close()

            def _answer(self, fault: Fault) -> None:
                """Answer on the registry's behalf without asking it: ``status``, ``redirect``,
                ``chunk_limit``, ``csrf``."""
                status, body = {
                    "redirect": (307, b""),
                    "chunk_limit": (416, fault.body or ghcr_too_large(fault.limit)),
                    "csrf": (403, HARBOR_CSRF),
                }.get(fault.kind, (fault.status, fault.body))
                self._record(status, fault, False)
                self.send_response(status)
                if fault.kind == "redirect" and fault.target is not None:
                    self.send_header("Location", f"http://{fault.target}{self.path}")
                elif fault.kind == "redirect":
                    location = f"http://{OFFSITE_HOST}:{proxy.port}{self.path}"
                    self.send_header("Location", f"{location}?X-Signature=presigned")
                if fault.retry_after is not None:
                    self.send_header("Retry-After", fault.retry_after)
                for key, value in fault.headers.items():
                    self.send_header(key, value)
                if body:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                if body and self.command != "HEAD":
                    self.wfile.write(body)

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
                replaced = (
                    {k.lower() for k in fault.headers}
                    if fault is not None and kind == "replace_header"
                    else set()
                )
                for key, value in response.getheaders():
                    lower = key.lower()
                    if lower in _HOP or lower == "content-length" or lower in replaced:
                        continue
                    if lower == "docker-content-digest" and kind == "wrong_digest":
                        assert fault is not None  # noqa: S101 - kind comes from it
                        value = fault.digest
                    self.send_header(key, value)
                if fault is not None and kind in ("header", "replace_header"):
                    for key, value in fault.headers.items():
                        self.send_header(key, value)
                if proxy._sets_cookie():
                    self.send_header("Set-Cookie", "sid=harbor-session; Path=/; HttpOnly")
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
                        if start:
                            time.sleep(fault.delay)
                        if start + fault.piece >= len(data):
                            self._land()
                        self.wfile.write(data[start : start + fault.piece])
                        self.wfile.flush()
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

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
