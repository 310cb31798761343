"""HTTP/1.1 on the wire for registry traffic: an httpx transport over the standard library.

Why not httpx's own transport (httpcore + h11)? Blob bodies. httpcore reads the socket
64 KiB at a time and runs h11's event parser, in Python, for every piece: about 0.3 s of
CPU per 160 MB blob on the machines of evidence/bench/, time taken from the one or two cores
that must inflate and hash the same bytes. ``http.client`` reads a counted body straight
from the socket into 1 MiB buffers (``BufferedReader.read``), about a quarter of that CPU.
Verification is CPU-bound, so this is most of the gap between imagekit and the machine's
limit.

Everything above the wire stays httpx: requests, responses, URLs, redirects, auth, retries
(:mod:`imagekit.registry.transport`). This module only moves bytes, and raises httpx's own
exceptions (``ConnectError``, ``ReadTimeout``, ``RemoteProtocolError``...) so that the one
boundary in transport.py keeps mapping them. Proxies from the environment are not handled
here: transport.py mounts httpx's own proxy transports in front of this one for the URLs
they cover (httpx would silently ignore the variables once given a transport).

What it does, as httpcore does: keep-alive connections pooled per origin (a pooled
connection the server closed meanwhile is noticed before reuse; a request that fails on a
reused connection before any answer arrived is sent once more on a fresh one, as urllib3 does,
when its body can be sent again), TLS with the caller's ``SSLContext`` and SNI, the request's
connect/read/write timeouts, chunked request bodies, an answer the server sent before it
read the request body (a 401 or 413 to an upload) returned rather than the failed send, and a
body that ends before its Content-Length is an error (``http.client`` alone would return a
short body as if complete).
"""

from __future__ import annotations

import http.client
import selectors
import ssl
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import httpx

#: Bytes per read of a response body: large enough that per-chunk Python work is noise next
#: to inflating and hashing a chunk, small enough to keep a few in flight per layer.
READ_BYTES = 1 << 20
#: Idle keep-alive connections kept per origin (one per verify or copy worker is enough).
MAX_IDLE_PER_ORIGIN = 8

Origin = tuple[str, str, int]


def _timeouts(request: httpx.Request) -> dict[str, float | None]:
    timeout = request.extensions.get("timeout", {})
    return {key: timeout.get(key) for key in ("connect", "read", "write")}


def _still_usable(conn: http.client.HTTPConnection) -> bool:
    """False when an idle connection has something to read: the server closed it (EOF)."""
    sock = conn.sock
    if sock is None:
        return False
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return False
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        return not selector.select(timeout=0)


class _Body(httpx.SyncByteStream):
    """A response body read in READ_BYTES pieces; the connection goes back to the pool at
    the end if the server allows it, and is closed if the reader stops early."""

    def __init__(
        self,
        owner: StdlibTransport,
        origin: Origin,
        conn: http.client.HTTPConnection,
        response: http.client.HTTPResponse,
        *,
        reusable: bool = True,
    ) -> None:
        self._reusable = reusable
        self._owner = owner
        self._origin = origin
        self._conn: http.client.HTTPConnection | None = conn
        self._response = response

    def __iter__(self) -> Iterator[bytes]:
        # read1 returns what one recv brings (about 100 KiB on loopback); pieces are joined
        # into chunks of exactly READ_BYTES (the last may be shorter), so per-chunk Python
        # work stays negligible and no consumer has to cut them again. One read of
        # READ_BYTES would block until all of it came and lose what did come if the
        # connection then broke; this way everything received is handed on before the error,
        # and a resume (Range) starts right after it.
        response = self._response
        pieces: list[bytes] = []
        held = 0
        while self._conn is not None:
            try:
                data = response.read1(READ_BYTES - held)
            except TimeoutError as exc:
                error: httpx.TransportError = httpx.ReadTimeout(
                    f"reading the body timed out: {exc}"
                )
                error.__cause__ = exc
            except (http.client.HTTPException, ValueError) as exc:
                # IncompleteRead (a chunked body cut off), a malformed chunk size line
                error = httpx.RemoteProtocolError(f"malformed or cut-off body: {exc!r}")
                error.__cause__ = exc
            except OSError as exc:
                error = httpx.ReadError(f"reading the body failed: {exc!r}")
                error.__cause__ = exc
            else:
                if data:
                    pieces.append(data)
                    held += len(data)
                    if held >= READ_BYTES:
                        yield pieces[0] if len(pieces) == 1 else b"".join(pieces)
                        pieces, held = [], 0
                    continue
                if pieces:
                    yield b"".join(pieces)
                    pieces, held = [], 0
                if response.length:  # a counted body that ended early
                    self.close()
                    raise httpx.RemoteProtocolError(
                        f"server closed the connection with {response.length} body bytes "
                        "still to come"
                    )
                self._release()
                return
            self.close()
            if pieces:
                yield b"".join(pieces)
            raise error

    def _release(self) -> None:
        """The body was read to its end: the connection may carry the next request."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        # read1 leaves a counted body "open" at its end; closing the answer tells
        # http.client the connection is free (the socket stays with the connection).
        self._response.close()
        if self._response.will_close or not self._reusable:
            self._owner.discard(conn)
        else:
            self._owner.put_idle(self._origin, conn)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            # Unread body bytes would be taken for the next answer: never reuse this one.
            self._response.close()
            self._owner.discard(conn)


class StdlibTransport(httpx.BaseTransport):
    """An httpx transport that speaks HTTP/1.1 through ``http.client``."""

    def __init__(
        self,
        ssl_context: ssl.SSLContext | Callable[[], ssl.SSLContext],
        *,
        per_host: Callable[[str], ssl.SSLContext] | None = None,
    ) -> None:
        """``ssl_context`` may be a factory, called on the first https connection: loading
        the system's CA bundle takes about 50 ms, which plain-HTTP (loopback) registries
        need not pay. ``per_host``, when given, gives the context for ``host[:port]``
        instead (its own CAs and client certificate: imagekit.registry.tls)."""
        self._per_host = per_host
        self._ssl_source = ssl_context
        self._ssl_context = ssl_context if isinstance(ssl_context, ssl.SSLContext) else None
        self._idle: dict[Origin, list[http.client.HTTPConnection]] = {}
        # Every open connection, idle (None) or lent to the answer it is reading, so that
        # close() closes them all, even those of answers their readers never closed (after
        # `Connection: close` the answer, not the connection, holds the socket).
        self._open: dict[http.client.HTTPConnection, http.client.HTTPResponse | None] = {}
        self._lock = threading.Lock()
        self._closed = False

    # ------------------------------------------------------------------ pool

    def put_idle(self, origin: Origin, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if conn in self._open:
                self._open[conn] = None
            idle = self._idle.setdefault(origin, [])
            if not self._closed and len(idle) < MAX_IDLE_PER_ORIGIN:
                idle.append(conn)
                return
        self.discard(conn)

    def discard(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            response = self._open.pop(conn, None)
        if response is not None:
            response.close()
        conn.close()

    def _take_idle(self, origin: Origin) -> http.client.HTTPConnection | None:
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                conn = idle.pop() if idle else None
            if conn is None or _still_usable(conn):
                return conn
            self.discard(conn)

    def _tls(self) -> ssl.SSLContext:
        with self._lock:
            if self._ssl_context is None:
                source = self._ssl_source
                assert callable(source)  # noqa: S101 - a context was not given, a factory was
                self._ssl_context = source()
            return self._ssl_context

    def _connect(self, origin: Origin, timeouts: dict[str, float | None]) -> Any:
        scheme, host, port = origin
        conn: http.client.HTTPConnection
        if scheme == "https":
            named = f"[{host}]" if ":" in host else host
            context = (
                self._per_host(named if port == 443 else f"{named}:{port}")
                if self._per_host is not None
                else self._tls()
            )
            conn = http.client.HTTPSConnection(
                host, port, timeout=timeouts["connect"], context=context
            )
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeouts["connect"])
        try:
            conn.connect()
        except TimeoutError as exc:
            conn.close()
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out") from exc
        except OSError as exc:  # refused, unreachable, DNS, TLS handshake and verification
            conn.close()
            raise httpx.ConnectError(f"connecting to {host}:{port}: {exc}") from exc
        with self._lock:
            self._open[conn] = None
        return conn

    def close(self) -> None:
        with self._lock:
            self._closed = True
            everything = list(self._open.items())
            self._open.clear()
            self._idle.clear()
        for conn, response in everything:
            if response is not None:
                response.close()
            conn.close()

    # ------------------------------------------------------------------ requests

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        origin: Origin = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        timeouts = _timeouts(request)
        # A body of known bytes can be sent again; a streamed one cannot.
        replayable = isinstance(request.stream, httpx.ByteStream)
        conn = self._take_idle(origin)
        if conn is not None:
            try:
                return self._exchange(origin, conn, request, timeouts)
            except _Unanswered as exc:
                # The server closed the kept-alive connection as we used it and answered
                # nothing, so it did not process the request: send it once more on a fresh
                # connection (RFC 9112, 9.3.1), when its body can be sent again.
                if not replayable:
                    raise exc.error from exc.__cause__
        try:
            return self._exchange(origin, self._connect(origin, timeouts), request, timeouts)
        except _Unanswered as exc:
            raise exc.error from exc.__cause__

    def _exchange(
        self,
        origin: Origin,
        conn: http.client.HTTPConnection,
        request: httpx.Request,
        timeouts: dict[str, float | None],
    ) -> httpx.Response:
        sock = conn.sock
        assert sock is not None  # noqa: S101 - connected by _connect or taken from the pool
        what = f"{request.method} {request.url.host}"
        send_error: OSError | None = None
        try:
            try:
                sock.settimeout(timeouts["write"])
                conn.putrequest(
                    request.method,
                    request.url.raw_path.decode("ascii"),
                    skip_host=True,
                    skip_accept_encoding=True,
                )
                chunked = False
                for name, value in request.headers.raw:
                    conn.putheader(name, value)
                    if name.lower() == b"transfer-encoding" and value.lower() == b"chunked":
                        chunked = True
                conn.endheaders()
                _send_body(conn, request.stream, chunked=chunked)
            except TimeoutError as exc:
                raise httpx.WriteTimeout(f"{what}: sending the request timed out") from exc
            except OSError as exc:
                # A server may refuse a request before reading its body (a 401 or 413 to a
                # large upload), answer and close; the answer still waits in our receive
                # buffer. Read it, as httpcore does: only without one is this a write error.
                send_error = exc
            try:
                sock.settimeout(timeouts["read"])
                response = conn.getresponse()
            except TimeoutError as exc:
                raise httpx.ReadTimeout(f"{what}: no answer in time") from exc
            except (http.client.RemoteDisconnected, ConnectionResetError) as exc:
                if send_error is not None:
                    raise _Unanswered(
                        httpx.WriteError(f"{what}: sending failed: {send_error!r}")
                    ) from send_error
                raise _Unanswered(
                    httpx.RemoteProtocolError(f"{what}: closed without an answer: {exc!r}")
                ) from exc
            except http.client.HTTPException as exc:  # an answer, but not HTTP/1.x
                raise httpx.RemoteProtocolError(f"{what}: malformed answer: {exc!r}") from exc
            except OSError as exc:
                raise httpx.ReadError(f"{what}: reading the answer failed: {exc!r}") from exc
        except BaseException:
            self.discard(conn)
            raise
        with self._lock:
            self._open[conn] = response
        return httpx.Response(
            response.status,
            headers=response.getheaders(),
            # After a failed send the connection is in an unknown state: never reused.
            stream=_Body(self, origin, conn, response, reusable=send_error is None),
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": response.reason.encode("ascii", "replace"),
            },
        )


class _Unanswered(Exception):  # noqa: N818 - a signal inside this module, not an error type
    """The connection broke before any byte of an answer: the server did not process the
    request, which may be sent again. Carries the httpx error to raise when it is not."""

    def __init__(self, error: httpx.TransportError) -> None:
        super().__init__(str(error))
        self.error = error


def _send_body(
    conn: http.client.HTTPConnection, stream: Iterable[bytes] | Any, *, chunked: bool
) -> None:
    for piece in stream:
        if not piece:
            continue
        if chunked:
            conn.send(b"%x\r\n" % len(piece))
            conn.send(piece)
            conn.send(b"\r\n")
        else:
            conn.send(piece)
    if chunked:
        conn.send(b"0\r\n\r\n")
