"""Faults the real registry cannot be made to produce, put IN FRONT of the real registry.

DESIGN.md: a fake is only for a fault the real part cannot produce, and then it sits in front
of the real part. ``FaultProxy`` forwards every request to a real registry and can:
- cut a blob download off after N bytes (the connection drops mid-body), once;
- answer blob GETs with a 307 to another origin (``localhost`` instead of ``127.0.0.1``), the
  way registries send blobs to object stores, and serve them there, recording which headers
  arrived at that other origin.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host"}


@dataclass
class FaultProxy:
    upstream: str  # host:port of the real registry
    cut_blob_after: int | None = None  # drop the first blob GET after this many bytes
    redirect_blobs: bool = False
    #: What the "object store" uses to read from the registry (its own standing, not ours).
    offsite_authorization: str | None = None
    cuts_done: int = 0
    blob_requests: list[dict[str, str | None]] = field(default_factory=list)
    offsite_requests: list[dict[str, str | None]] = field(default_factory=list)
    port: int = 0

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _forward(self, handler: BaseHTTPRequestHandler, *, drop_auth: bool = False) -> None:
        body = b""
        length = handler.headers.get("Content-Length")
        if length:
            body = handler.rfile.read(int(length))
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP}
        if drop_auth:
            headers.pop("Authorization", None)
            if self.offsite_authorization:
                headers["Authorization"] = self.offsite_authorization
        conn = http.client.HTTPConnection(self.upstream, timeout=60)
        try:
            conn.request(handler.command, handler.path, body=body or None, headers=headers)
            upstream = conn.getresponse()
            is_blob_get = handler.command == "GET" and "/blobs/sha256:" in handler.path
            cut = (
                self.cut_blob_after
                if is_blob_get and upstream.status == 200 and self.cuts_done == 0
                else None
            )
            handler.send_response(upstream.status)
            for key, value in upstream.getheaders():
                if key.lower() not in _HOP:
                    handler.send_header(key, value)
            handler.send_header("Connection", "close")
            handler.end_headers()
            if handler.command == "HEAD":
                return
            sent = 0
            while True:
                chunk = upstream.read(64 * 1024)
                if not chunk:
                    break
                if cut is not None and sent + len(chunk) >= cut:
                    handler.wfile.write(chunk[: cut - sent])
                    handler.wfile.flush()
                    self.cuts_done += 1
                    handler.close_connection = True
                    return  # the connection closes before Content-Length bytes were sent
                handler.wfile.write(chunk)
                sent += len(chunk)
        finally:
            conn.close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

            def _any(self) -> None:
                host = self.headers.get("Host", "")
                record = {
                    "path": self.path,
                    "authorization": self.headers.get("Authorization"),
                    "range": self.headers.get("Range"),
                }
                if host.startswith("localhost"):
                    # The "object store": another origin, serving the blob without our auth.
                    proxy.offsite_requests.append(record)
                    self._offsite()
                    return
                if "/blobs/sha256:" in self.path and self.command == "GET":
                    proxy.blob_requests.append(record)
                    if proxy.redirect_blobs:
                        location = f"http://localhost:{proxy.port}{self.path}?X-Signature=presigned"
                        self.send_response(307)
                        self.send_header("Location", location)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                proxy._forward(self)

            def _offsite(self) -> None:
                # Serve the blob from the real registry with the proxy's own standing (as a
                # pre-signed URL would); the client's Authorization must not have arrived.
                self.path = self.path.split("?", 1)[0]
                proxy._forward(self, drop_auth=True)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _any  # noqa: N815

        return Handler


@contextmanager
def fault_proxy(upstream: str, **options: Any) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream, **options)
    server = ThreadingHTTPServer(("127.0.0.1", 0), proxy._handler())
    proxy.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
