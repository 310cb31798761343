"""StdlibTransport (imagekit.registry.wire) on real sockets.

Every server here is real: a scripted HTTP/1.1 server on a loopback port (socketserver
threads writing the exact bytes each case needs, so that cut-off bodies, idle closes and
silent servers can be produced on purpose), the same server behind TLS with a certificate
from a throwaway CA, and the real docker-registry from the session fixtures. Connections are
counted on the server side, so "reused" and "closed" are what the server saw.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import http.server
import io
import os
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Literal

import httpx
import pytest

from imagekit.errors import CouldNotFinish, RegistryError, RegistryTLSError
from imagekit.registry.transport import Transport
from imagekit.registry.wire import READ_BYTES, StdlibTransport
from tests.support.registries import RunningRegistry, free_port
from tests.support.tls import ServerCertificate, make_server_certificate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

Framing = Literal["length", "chunked", "none"]


# ---------------------------------------------------------------------------- the server


@dataclass(frozen=True)
class Received:
    """One request as the server read it off the wire."""

    conn: int  # which accepted connection (0, 1, ...) carried it
    method: str
    target: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    chunk_sizes: tuple[int, ...] | None  # the chunks of a chunked body, in order


def _read_request(reader: io.BufferedReader, conn: int) -> Received | None:
    """Parse one request from a buffered socket reader; None when the client closed."""
    line = reader.readline(65537)
    if not line:
        return None
    method, target, _version = line.decode("latin-1").split()
    headers: dict[str, str] = {}
    while (field := reader.readline(65537)) not in (b"\r\n", b"\n", b""):
        name, _, value = field.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    chunk_sizes: list[int] | None = None
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunk_sizes, pieces = [], []
        while size := int(reader.readline(65537).split(b";")[0], 16):
            pieces.append(reader.read(size))
            chunk_sizes.append(size)
            reader.readline(65537)  # the CRLF after the chunk
        while reader.readline(65537) not in (b"\r\n", b"\n", b""):  # trailer fields
            pass
        body = b"".join(pieces)
    else:
        body = reader.read(int(headers.get("content-length", "0")))
    sizes = tuple(chunk_sizes) if chunk_sizes is not None else None
    return Received(conn, method, target, headers, body, sizes)


def answer(
    sock: socket.socket,
    body: bytes = b"",
    *,
    status: int = 200,
    framing: Framing = "length",
    headers: tuple[tuple[str, str], ...] = (),
    chunk: int = 100_000,
) -> None:
    """Write one HTTP/1.1 answer; ``framing="none"`` writes the head and ``body`` as given."""
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    lines += [f"{name}: {value}" for name, value in headers]
    payload = body
    if framing == "length":
        lines.append(f"Content-Length: {len(body)}")
    elif framing == "chunked":
        lines.append("Transfer-Encoding: chunked")
        pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)]
        payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload)


def body_for(request: Received) -> bytes:
    """A body unique to each request, so an answer read from the wrong place shows."""
    return f"{request.method} {request.target} on connection {request.conn}\n".encode() * 50


#: What the server does with each request: answer on the socket, return False to close.
Respond = Callable[["WireServer", Received, socket.socket], bool]


def replies(framing: Framing) -> Respond:
    def respond(server: WireServer, request: Received, sock: socket.socket) -> bool:
        answer(sock, body_for(request), framing=framing)
        return True

    return respond


class WireServer:
    """An HTTP/1.1 server on a free 127.0.0.1 port, one thread per connection, that hands
    each request to ``respond`` and records requests, connections and how they ended."""

    def __init__(self, respond: Respond, *, tls: ssl.SSLContext | None = None) -> None:
        self.respond = respond
        self.scheme = "http" if tls is None else "https"
        self.requests: list[Received] = []
        self.connections = 0
        self.client_closed: set[int] = set()  # connections on which the server read EOF
        self.ended: set[int] = set()  # connections whose server side is done
        self.stopping = threading.Event()
        self._changed = threading.Condition()
        self._sockets: list[socket.socket] = []
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True

            def get_request(self) -> tuple[Any, Any]:
                sock, address = super().get_request()
                if tls is not None:
                    sock.settimeout(5)
                    try:
                        sock = tls.wrap_socket(sock, server_side=True)
                    except BaseException:
                        sock.close()
                        raise
                    sock.settimeout(None)
                return sock, address

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def url(self, path: str = "/", *, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"

    def _serve(self, sock: socket.socket) -> None:
        with self._changed:
            conn = self.connections
            self.connections += 1
            self._sockets.append(sock)
        reader = sock.makefile("rb")
        try:
            while not self.stopping.is_set():
                request = _read_request(reader, conn)
                if request is None:
                    with self._changed:
                        self.client_closed.add(conn)
                    return
                with self._changed:
                    self.requests.append(request)
                    self._changed.notify_all()
                if not self.respond(self, request, sock):
                    return
        except (OSError, ValueError):
            pass  # the client went away mid-exchange, or stop() shut the socket
        finally:
            reader.close()
            # socketserver closes the socket only after handle() returns, which is after
            # `ended` would be set: send the FIN here first, so that a test waiting on
            # `ended` sees a connection the client can already tell is closed.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with self._changed:
                self.ended.add(conn)
                self._changed.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
        with self._changed:
            return self._changed.wait_for(predicate, timeout)

    def conns(self) -> list[int]:
        """The connection of each request so far, in order."""
        with self._changed:
            return [request.conn for request in self.requests]

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        with self._changed:
            sockets = list(self._sockets)
        for sock in sockets:  # wake handlers blocked on a client that stays silent
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
        self._server.server_close()  # joins the connection threads
        self._thread.join()


@pytest.fixture
def serve() -> Iterator[Callable[..., WireServer]]:
    """Start WireServers: serve(respond, tls=None); all are stopped after the test."""
    started: list[WireServer] = []

    def start(respond: Respond, *, tls: ssl.SSLContext | None = None) -> WireServer:
        server = WireServer(respond, tls=tls)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def http_client(context: ssl.SSLContext | None = None, **timeouts: float) -> httpx.Client:
    """An httpx client on a StdlibTransport (the environment's proxies ignored)."""
    context = context or ssl.create_default_context()
    return httpx.Client(
        transport=StdlibTransport(context),
        trust_env=False,
        timeout=httpx.Timeout(10.0, **timeouts),
    )


# ---------------------------------------------------------------------------- keep-alive


# Keep-alive must not depend on how http.client's read1() leaves a finished answer: before
# python/cpython#113199 it never marks a counted body closed, and for HEAD no version does.
@pytest.mark.parametrize("framing", ["chunked", "length"])
def test_requests_share_one_kept_alive_connection(
    serve: Callable[..., WireServer], framing: Framing
) -> None:
    server = serve(replies(framing))
    with http_client() as client:
        for n in range(5):
            response = client.get(server.url(f"/r{n}"))
            assert response.status_code == 200
            assert response.content == f"GET /r{n} on connection 0\n".encode() * 50
    assert server.connections == 1
    assert server.conns() == [0] * 5


def test_response_closed_unread_is_not_reused_and_leaks_nothing(
    serve: Callable[..., WireServer],
) -> None:
    big = os.urandom(256 * 1024)

    def respond(server: WireServer, request: Received, sock: socket.socket) -> bool:
        if request.target == "/big":
            answer(sock, big, framing="chunked")
        else:
            answer(sock, body_for(request), framing="chunked")
        return True

    server = serve(respond)
    with http_client() as client:
        assert client.get(server.url("/first")).status_code == 200
        with client.stream("GET", server.url("/big")) as response:
            assert response.status_code == 200  # the body is left unread
        after = client.get(server.url("/after"))
    # /big went over the kept-alive connection 0; closing it unread retired that connection.
    assert server.conns() == [0, 0, 1]
    assert after.content == b"GET /after on connection 1\n" * 50
    assert big[:64] not in after.content
    assert server.wait_for(lambda: 0 in server.ended)


@pytest.mark.parametrize("streamed", [False, True], ids=["get", "streamed-put"])
def test_idle_connection_closed_by_server_is_replaced(
    serve: Callable[..., WireServer], streamed: bool
) -> None:
    def respond(server: WireServer, request: Received, sock: socket.socket) -> bool:
        answer(sock, body_for(request), framing="chunked")
        # After its second answer connection 0 is closed while idle, as a server's idle
        # timeout does: no `Connection: close`, the client learns it from the FIN.
        return not (request.conn == 0 and request.target == "/2")

    def upload() -> Iterator[bytes]:
        yield b"sent once"

    server = serve(respond)
    with http_client() as client:
        assert client.get(server.url("/1")).status_code == 200
        assert client.get(server.url("/2")).status_code == 200
        assert server.wait_for(lambda: 0 in server.ended)
        # A streamed body cannot be sent twice: this one succeeds only if the closed
        # connection is noticed before use, not by failing on it and re-sending.
        if streamed:
            response = client.put(server.url("/3"), content=upload())
        else:
            response = client.get(server.url("/3"))
    assert response.status_code == 200
    method = "PUT" if streamed else "GET"
    assert response.content == f"{method} /3 on connection 1\n".encode() * 50
    assert server.conns() == [0, 0, 1]
    assert server.requests[-1].body == (b"sent once" if streamed else b"")


def _drop_second_request_on(*dropping: int) -> Respond:
    """Answer connection 0's first request; then close without an answer every request on
    the connections in ``dropping`` (connection 0's second one included)."""

    def respond(server: WireServer, request: Received, sock: socket.socket) -> bool:
        first_on_0 = request.conn == 0 and server.conns().count(0) == 1
        if request.conn in dropping and not first_on_0:
            return False
        answer(sock, body_for(request) + request.body, framing="chunked")
        return True

    return respond


def test_request_dropped_on_reused_connection_is_sent_again_once(
    serve: Callable[..., WireServer],
) -> None:
    server = serve(_drop_second_request_on(0))
    payload = os.urandom(5000)
    with http_client() as client:
        assert client.get(server.url("/1")).status_code == 200
        response = client.put(server.url("/2"), content=payload)
    assert response.status_code == 200
    assert response.content == b"PUT /2 on connection 1\n" * 50 + payload
    assert [(r.conn, r.target, r.body) for r in server.requests] == [
        (0, "/1", b""),
        (0, "/2", payload),
        (1, "/2", payload),
    ]


def test_request_dropped_again_on_the_fresh_connection_fails(
    serve: Callable[..., WireServer],
) -> None:
    server = serve(_drop_second_request_on(0, 1))
    with http_client() as client:
        assert client.get(server.url("/1")).status_code == 200
        with pytest.raises(httpx.RemoteProtocolError):
            client.get(server.url("/2"))
    assert [(r.conn, r.target) for r in server.requests] == [(0, "/1"), (0, "/2"), (1, "/2")]


def test_streamed_body_dropped_on_reused_connection_is_not_sent_again(
    serve: Callable[..., WireServer],
) -> None:
    server = serve(_drop_second_request_on(0))

    def upload() -> Iterator[bytes]:
        yield b"streamed "
        yield b"once"

    with http_client() as client:
        assert client.get(server.url("/1")).status_code == 200
        with pytest.raises(httpx.RemoteProtocolError):
            client.put(server.url("/2"), content=upload())
    assert [(r.conn, r.target, r.body) for r in server.requests] == [
        (0, "/1", b""),
        (0, "/2", b"streamed once"),
    ]


# ---------------------------------------------------------------------------- bodies


@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_body_cut_short_yields_what_came_then_fails(
    serve: Callable[..., WireServer], framing: Framing
) -> None:
    # Enough for two pieces (a piece is handed on once READ_BYTES have come, so it holds
    # less than 2 * READ_BYTES), announced as more than was sent.
    sent = os.urandom(2 * READ_BYTES + READ_BYTES // 2)
    announced = 4 * READ_BYTES

    def respond(server: WireServer, request: Received, sock: socket.socket) -> bool:
        if framing == "length":
            head = f"Content-Length: {announced}"
            payload = sent
        else:  # one chunk, cut off inside it
            head = "Transfer-Encoding: chunked"
            payload = b"%x\r\n" % announced + sent
        sock.sendall(f"HTTP/1.1 200 OK\r\n{head}\r\n\r\n".encode() + payload)
        return False  # close with the body unfinished

    server = serve(respond)
    received: list[bytes] = []
    with http_client() as client, client.stream("GET", server.url("/blob")) as response:
        with pytest.raises(httpx.RemoteProtocolError):
            for piece in response.iter_raw():
                received.append(piece)  # noqa: PERF402 - keep what came before the error
    assert b"".join(received) == sent
    assert len(received) >= 2  # the first READ_BYTES were handed on as they came


def test_counted_body_comes_in_pieces_of_read_bytes(serve: Callable[..., WireServer]) -> None:
    blob = os.urandom(3 * READ_BYTES + 12345)

    def respond(server: WireServer, request: Received, sock: socket.socket) -> bool:
        answer(sock, blob)
        return True

    server = serve(respond)
    with http_client() as client, client.stream("GET", server.url("/blob")) as response:
        pieces = list(response.iter_raw())
    assert b"".join(pieces) == blob
    assert all(READ_BYTES <= len(piece) < 2 * READ_BYTES for piece in pieces[:-1])
    assert 0 < len(pieces[-1]) < 2 * READ_BYTES


def test_chunked_response_is_decoded(serve: Callable[..., WireServer]) -> None:
    blob = os.urandom(READ_BYTES + 777)

    def respond(server: WireServer, request: Received, sock: socket.socket) -> bool:
        answer(sock, blob, framing="chunked", chunk=65_521)  # chunks of an odd size
        return True

    server = serve(respond)
    with http_client() as client:
        response = client.get(server.url("/chunked"))
    assert response.status_code == 200
    assert response.headers["Transfer-Encoding"] == "chunked"
    assert response.content == blob


def test_streamed_request_body_arrives_chunked_and_intact(
    serve: Callable[..., WireServer],
) -> None:
    def respond(server: WireServer, request: Received, sock: socket.socket) -> bool:
        answer(sock, hashlib.sha256(request.body).hexdigest().encode())
        return True

    pieces = [os.urandom(100_000), b"", os.urandom(1), os.urandom(READ_BYTES)]

    def upload() -> Iterator[bytes]:
        yield from pieces

    server = serve(respond)
    with http_client() as client:
        response = client.put(server.url("/upload"), content=upload())
    expected = b"".join(pieces)
    assert response.text == hashlib.sha256(expected).hexdigest()
    (request,) = server.requests
    assert request.headers["transfer-encoding"] == "chunked"
    assert "content-length" not in request.headers
    assert request.body == expected
    # An empty piece must not be sent: a zero-size chunk would end the body there.
    assert request.chunk_sizes == tuple(len(piece) for piece in pieces if piece)


# ---------------------------------------------------------------------------- failures


def test_server_that_never_answers_is_a_read_timeout(serve: Callable[..., WireServer]) -> None:
    def respond(server: WireServer, request: Received, sock: socket.socket) -> bool:
        server.stopping.wait(30)  # read the request, then say nothing until the test ends
        return False

    server = serve(respond)
    started = time.monotonic()
    with http_client(read=0.3) as client, pytest.raises(httpx.ReadTimeout):
        client.get(server.url("/silent"))
    assert time.monotonic() - started < 2.0
    assert server.conns() == [0]  # connected and sent: the wait was for the answer


def test_body_that_stalls_is_a_read_timeout_after_what_came(
    serve: Callable[..., WireServer],
) -> None:
    def respond(server: WireServer, request: Received, sock: socket.socket) -> bool:
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 400)
        server.stopping.wait(30)
        return False

    server = serve(respond)
    received: list[bytes] = []
    with (
        http_client(read=0.3) as client,
        client.stream("GET", server.url("/stall")) as response,
        pytest.raises(httpx.ReadTimeout),
    ):
        for piece in response.iter_raw():
            received.append(piece)  # noqa: PERF402 - keep what came before the error
    assert b"".join(received) == b"x" * 400


def test_closed_port_is_a_connect_error() -> None:
    port = free_port()
    with http_client() as client, pytest.raises(httpx.ConnectError, match=f"127.0.0.1:{port}"):
        client.get(f"http://127.0.0.1:{port}/")


# ---------------------------------------------------------------------------- HEAD


def _head_then_get(server: WireServer, request: Received, sock: socket.socket) -> bool:
    if request.method == "HEAD":
        # The length of the body a GET would get, and no body.
        answer(sock, framing="none", headers=(("Content-Length", "123456"),))
    else:
        answer(sock, body_for(request))
    return True


def test_head_reads_no_body(serve: Callable[..., WireServer]) -> None:
    server = serve(_head_then_get)
    with http_client(read=2.0) as client:
        head = client.head(server.url("/blob"))
        after = client.get(server.url("/after"))
    assert head.status_code == 200
    assert head.headers["Content-Length"] == "123456"
    assert head.content == b""
    # Had the client waited for 123456 body bytes it would have timed out; had it read any,
    # they would be missing from the next answer.
    assert after.content.startswith(b"GET /after on connection ")
    assert after.content == body_for(server.requests[-1])


def test_head_leaves_connection_reusable(serve: Callable[..., WireServer]) -> None:
    server = serve(_head_then_get)
    with http_client(read=2.0) as client:
        assert client.head(server.url("/blob")).status_code == 200
        after = client.get(server.url("/after"))
    assert after.content == b"GET /after on connection 0\n" * 50
    assert server.conns() == [0, 0]


# ---------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> ServerCertificate:
    return make_server_certificate(tmp_path_factory.mktemp("tls"))


def _v2(server: WireServer, request: Received, sock: socket.socket) -> bool:
    answer(
        sock,
        b"{}",
        framing="chunked",
        headers=(
            ("Content-Type", "application/json"),
            ("Docker-Distribution-API-Version", "registry/2.0"),
        ),
    )
    return True


def test_tls_untrusted_certificate_is_a_connect_error(
    serve: Callable[..., WireServer], certificate: ServerCertificate
) -> None:
    server = serve(_v2, tls=certificate.server_context())
    with (
        http_client() as client,
        pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        client.get(server.url("/v2/"))
    assert server.requests == []


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_tls_trusted_ca_succeeds_and_keeps_alive(
    serve: Callable[..., WireServer], certificate: ServerCertificate, host: str
) -> None:
    server = serve(_v2, tls=certificate.server_context())
    with http_client(certificate.client_context()) as client:
        responses = [client.get(server.url("/v2/", host=host)) for _ in range(3)]
    assert [(r.status_code, r.content) for r in responses] == [(200, b"{}")] * 3
    assert server.requests[0].headers["host"] == f"{host}:{server.port}"
    assert server.conns() == [0, 0, 0]


def test_transport_maps_untrusted_tls_to_registry_error(
    serve: Callable[..., WireServer], certificate: ServerCertificate
) -> None:
    server = serve(_v2, tls=certificate.server_context())
    host = f"127.0.0.1:{server.port}"
    transport = Transport()
    try:
        with pytest.raises(RegistryError) as caught:
            transport.send("GET", f"https://{host}/v2/", registry=host)
    finally:
        transport.close()
    error = caught.value
    assert type(error) is RegistryTLSError  # final: not retried, not a RetriesExhausted
    assert error.message == (
        f"{host}: the TLS certificate of {host} could not be verified "
        "(self-signed certificate in certificate chain)"
    )
    assert error.exit_code == CouldNotFinish.exit_code == 3
    assert error.registry == host
    assert error.url == f"https://{host}/v2/"
    assert error.hint is not None and "trust store" in error.hint
    assert "--ca-file" in error.hint and f"--insecure {host}" in error.hint
    assert isinstance(error.__cause__, httpx.ConnectError)
    assert server.requests == []


def test_transport_trusts_ca_from_ssl_cert_file(
    serve: Callable[..., WireServer],
    certificate: ServerCertificate,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate.ca_path))
    server = serve(_v2, tls=certificate.server_context())
    host = f"127.0.0.1:{server.port}"
    transport = Transport()
    try:
        response = transport.send("GET", f"https://{host}/v2/", registry=host)
        try:
            assert response.status_code == 200
            assert response.read() == b"{}"
        finally:
            response.close()
    finally:
        transport.close()
    (request,) = server.requests
    assert request.headers["user-agent"] == "imagekit"


# ---------------------------------------------------------------------------- close()


def test_close_closes_connections_of_responses_nobody_closed(
    serve: Callable[..., WireServer],
) -> None:
    def respond(server: WireServer, request: Received, sock: socket.socket) -> bool:
        # /close announces `Connection: close` but the server keeps its side open, so only
        # the client can end that connection; both then wait for the client's EOF.
        extra = (("Connection", "close"),) if request.target == "/close" else ()
        answer(sock, body_for(request), headers=extra)
        return True

    server = serve(respond)
    transport = StdlibTransport(ssl.create_default_context())
    client = httpx.Client(transport=transport, trust_env=False)
    unread = [
        client.send(client.build_request("GET", server.url(path)), stream=True)
        for path in ("/keep", "/close")
    ]
    assert [r.status_code for r in unread] == [200, 200]
    assert server.connections == 2
    time.sleep(0.2)
    assert server.client_closed == set()  # both connections are still held by the answers

    client.close()  # closes the transport; the responses are still referenced, never closed
    assert server.wait_for(lambda: server.client_closed == {0, 1})
    assert all(not r.is_closed for r in unread)  # it was the transport, not the responses


# ---------------------------------------------------------------------------- real registry


class CountingRelay:
    """A plain TCP relay in front of a real server, counting the connections made through
    it (the registry cannot tell us how many connections it accepted)."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.connections = 0
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with socket.create_connection((host, int(port)), timeout=10) as far:
                    with outer._lock:
                        outer.connections += 1
                        outer._sockets += [self.request, far]
                    back = threading.Thread(target=_pump, args=(far, self.request))
                    back.start()
                    _pump(self.request, far)
                    back.join()

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._server.server_close()
        self._thread.join()


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(1 << 16):
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


@pytest.fixture
def relay(registry: RunningRegistry) -> Iterator[CountingRelay]:
    relay = CountingRelay(registry.host)
    try:
        yield relay
    finally:
        relay.stop()


def test_real_registry_requests_share_one_connection(relay: CountingRelay) -> None:
    with http_client() as client:
        for _ in range(3):
            response = client.get(f"http://{relay.host}/v2/")
            assert response.status_code == 200
            assert response.headers["Docker-Distribution-API-Version"] == "registry/2.0"
    assert relay.connections == 1


def test_real_registry_blob_round_trip(registry: RunningRegistry) -> None:
    """A streamed (chunked) upload to the real registry, then HEAD and GET of that blob."""
    blob = os.urandom(2 * READ_BYTES + 4321)
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    repo = f"imagekit-test/wire-{os.urandom(3).hex()}"
    base = registry.url

    def upload() -> Iterator[bytes]:
        for start in range(0, len(blob), 300_000):
            yield blob[start : start + 300_000]

    with http_client() as client:
        started = client.post(f"{base}/v2/{repo}/blobs/uploads/")
        assert started.status_code == 202, started.text
        # The upload URL carries the registry's `_state`; `params=` would replace it.
        location = httpx.URL(base).join(started.headers["Location"])
        put = client.put(
            location.copy_merge_params({"digest": digest}),
            content=upload(),
            headers={"Content-Type": "application/octet-stream"},
        )
        assert put.status_code == 201, put.text
        assert put.headers["Docker-Content-Digest"] == digest

        head = client.head(f"{base}/v2/{repo}/blobs/{digest}")
        assert head.status_code == 200
        assert head.headers["Content-Length"] == str(len(blob))
        assert head.content == b""

        with client.stream("GET", f"{base}/v2/{repo}/blobs/{digest}") as response:
            assert response.status_code == 200
            pieces = list(response.iter_raw())
    assert b"".join(pieces) == blob
    assert all(len(piece) >= READ_BYTES for piece in pieces[:-1])


def test_garbled_answer_on_reused_connection_is_not_sent_again(
    serve: Callable[..., WireServer],
) -> None:
    # The server answered (badly), so it may have acted on the request: no second send.
    def respond(server: WireServer, request: Received, sock: socket.socket) -> bool:
        if request.target == "/1":
            answer(sock, body_for(request))
            return True
        sock.sendall(b"this is not HTTP\r\n\r\n")
        return False

    server = serve(respond)
    with http_client() as client:
        assert client.get(server.url("/1")).status_code == 200
        with pytest.raises(httpx.RemoteProtocolError, match="malformed answer"):
            client.put(server.url("/2"), content=b"replayable bytes")
    assert [(r.conn, r.target) for r in server.requests] == [(0, "/1"), (0, "/2")]


def test_server_that_never_reads_is_a_write_timeout() -> None:
    # A listener that accepts and never reads: the request body fills the socket buffers.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        held: list[socket.socket] = []
        accepter = threading.Thread(target=lambda: held.append(listener.accept()[0]))
        accepter.start()
        started = time.monotonic()
        try:
            with http_client(write=0.3) as client, pytest.raises(httpx.WriteTimeout):
                client.put(f"http://127.0.0.1:{port}/big", content=b"\0" * (64 << 20))
        finally:
            accepter.join(timeout=5)
            for sock in held:
                sock.close()
    assert time.monotonic() - started < 5.0


class _ForwardProxy(http.server.ThreadingHTTPServer):
    """A plain HTTP forward proxy on loopback (absolute-URI GET/HEAD), recording targets."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                outer.seen.append(f"{self.command} {self.path}")
                url = httpx.URL(self.path)  # a forward proxy receives the absolute URI
                upstream = http.client.HTTPConnection(url.host, url.port, timeout=10)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "proxy-connection"}
                upstream.request(self.command, url.raw_path.decode(), headers=headers)
                answer = upstream.getresponse()
                body = answer.read()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                upstream.close()

            do_GET = do_HEAD = _forward  # noqa: N815 - http.server's naming

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return None

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.mark.parametrize("no_proxy", [None, "127.0.0.1"])
def test_environment_proxy_is_used_in_front_of_the_stdlib_transport(
    registry: RunningRegistry, monkeypatch: pytest.MonkeyPatch, no_proxy: str | None
) -> None:
    # httpx ignores the proxy variables once it is given a transport of ours; Transport
    # mounts them itself, by httpx's rules: HTTP_PROXY is used, NO_PROXY hosts go direct.
    proxy = _ForwardProxy()
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
        if no_proxy is not None:
            monkeypatch.setenv("NO_PROXY", no_proxy)
        transport = Transport()
        try:
            response = transport.send("GET", f"http://{registry.host}/v2/", registry=registry.host)
            assert response.status_code == 200
            response.close()
        finally:
            transport.close()
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert proxy.seen == ([] if no_proxy else [f"GET http://{registry.host}/v2/"])


def test_answer_sent_before_the_body_was_read_is_returned_not_a_write_error() -> None:
    # A server may refuse an upload after its headers (401, 413), answer and close without
    # reading the body; the client's send then fails, but the answer is what it must see.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def refuse() -> None:
            sock, _ = listener.accept()
            with sock:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += sock.recv(65536)
                sock.sendall(
                    b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 9\r\n"
                    b"Connection: close\r\n\r\ntoo large"
                )
                time.sleep(0.3)  # then close with the body unread: the client's send fails

        server = threading.Thread(target=refuse)
        server.start()
        try:
            with http_client() as client:
                response = client.put(f"http://127.0.0.1:{port}/big", content=b"\0" * (64 << 20))
        finally:
            server.join(timeout=5)
    assert response.status_code == 413
    assert response.content == b"too large"
