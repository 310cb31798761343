"""Real distribution registries (Debian's docker-registry 2.8) on loopback, for tests and demos.

Three flavours, all the real binary with configs and storage written here: anonymous, htpasswd
basic auth, and bearer-token auth. For the token flavour we run the token issuer ourselves
(the registry's `auth.token` trusts a self-signed certificate we create, and our issuer signs
ES256 JWTs with that certificate's key and puts it in the `x5c` header), so that the client's
whole challenge/token/retry flow is exercised against the real registry.
"""

from __future__ import annotations

import base64
import json
import secrets
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.support.daemons import start_logged, stop_process
from tests.support.tls import ServerCertificate

REGISTRY_BINARY = shutil.which("docker-registry") or "/usr/bin/docker-registry"
SERVICE = "imagekit-test-registry"
ISSUER = "imagekit-test-issuer"


def free_port(address: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


@dataclass
class RunningRegistry:
    host: str
    storage: Path
    auth: str = "none"
    username: str | None = None
    password: str | None = None
    realm: str | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    token_server: TokenServer | None = field(default=None, repr=False)
    log_path: Path | None = None
    tls: ServerCertificate | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}"

    def docker_auth_entry(self) -> dict[str, Any]:
        """The ~/.docker/config.json `auths` entry for this registry's credentials."""
        if not self.username or not self.password:
            return {}
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return {self.host: {"auth": token}}

    def stop(self) -> None:
        stop_process(self.process, timeout=10)
        if self.token_server is not None:
            self.token_server.stop()


class TokenServer:
    """A minimal token issuer (the `realm`) implementing Docker's token auth for one user."""

    def __init__(self, username: str, password: str, workdir: Path) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.username = username
        self.password = password
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
        now = datetime.now(UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=2))
            .sign(self.key, hashes.SHA256())
        )
        self.cert_der = cert.public_bytes(serialization.Encoding.DER)
        self.cert_path = workdir / "token-root.pem"
        self.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self.issued: list[dict[str, Any]] = []  # claims of every token issued (no secrets)
        # (username, accepted) of every Basic login the issuer was sent (no secrets)
        self.logins: list[tuple[str, bool]] = []
        server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server = server
        self.port = int(server.server_address[1])
        self.thread = threading.Thread(target=server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def make_token(self, subject: str, access: list[dict[str, Any]], ttl: int = 300) -> str:
        import jwt

        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "sub": subject,
            "aud": SERVICE,
            "exp": now + ttl,
            "nbf": now - 10,
            "iat": now,
            "jti": secrets.token_hex(8),
            "access": access,
        }
        self.issued.append({"sub": subject, "access": access})
        headers = {"x5c": [base64.b64encode(self.cert_der).decode()]}
        return jwt.encode(claims, self.key, algorithm="ES256", headers=headers)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return  # quiet: tests read the registry's behaviour, not this log

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                query = parse_qs(urlparse(self.path).query)
                subject = ""
                header = self.headers.get("Authorization", "")
                if header.startswith("Basic "):
                    try:
                        user, _, pw = base64.b64decode(header[6:]).decode().partition(":")
                    except ValueError:
                        user, pw = "", ""
                    accepted = (user, pw) == (issuer.username, issuer.password)
                    issuer.logins.append((user, accepted))
                    if not accepted:
                        self._reply(401, {"errors": [{"code": "UNAUTHORIZED"}]})
                        return
                    subject = user
                access = []
                for scope in query.get("scope", []):
                    parts = scope.split(":")
                    if len(parts) >= 3 and parts[0] == "repository" and subject:
                        name = ":".join(parts[1:-1])
                        access.append(
                            {"type": "repository", "name": name, "actions": parts[-1].split(",")}
                        )
                token = issuer.make_token(subject, access)
                self._reply(200, {"token": token, "access_token": token, "expires_in": 300})

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _config(
    storage: Path,
    port: int,
    auth: dict[str, Any] | None,
    allow_urls: bool = False,
    tls: ServerCertificate | None = None,
    client_ca: Path | None = None,
    readonly: bool = False,
    address: str = "127.0.0.1",
) -> str:
    listen = f"[{address}]" if ":" in address else address
    config: dict[str, Any] = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {
            "filesystem": {"rootdirectory": str(storage / "data")},
            "delete": {"enabled": True},
            "cache": {"blobdescriptor": "inmemory"},
        },
        "http": {"addr": f"{listen}:{port}", "secret": secrets.token_hex(16)},
    }
    if auth:
        config["auth"] = auth
    if tls is not None:
        config["http"]["tls"] = {"certificate": str(tls.chain_path), "key": str(tls.key_path)}
        if client_ca is not None:  # then every client must show a certificate it signed
            config["http"]["tls"]["clientcas"] = [str(client_ca)]
    if allow_urls:
        # Manifests naming foreign layers by URL are refused unless an allow list is set
        # (distribution's validation.manifests.urls).
        config["validation"] = {"manifests": {"urls": {"allow": ["^https?://"]}}}
    if readonly:
        # The registry's own read-only mode: pulls served, every push refused.
        config["storage"]["maintenance"] = {"readonly": {"enabled": True}}
    return json.dumps(config)  # JSON is YAML


def _wait_ready(registry: RunningRegistry, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert registry.process is not None
        if registry.process.poll() is not None:
            log = registry.log_path.read_text() if registry.log_path else ""
            raise RuntimeError(f"docker-registry exited early: {log[-2000:]}")
        context = registry.tls.client_context() if registry.tls else None
        try:
            with urllib.request.urlopen(  # noqa: S310 - our own registry on loopback
                f"{registry.url}/v2/", timeout=2, context=context
            ):
                return
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                return
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ssl.SSLError):
                return  # it answers TLS, and wants a client certificate we did not show
        except ssl.SSLError:
            return  # the same, said after the handshake (TLS 1.3)
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"docker-registry on {registry.host} did not answer in {timeout}s")


def start_registry(
    workdir: Path,
    auth: str = "none",
    *,
    username: str = "imagekit",
    password: str | None = None,
    port: int | None = None,
    allow_urls: bool = False,
    tls: ServerCertificate | None = None,
    client_ca: Path | None = None,
    readonly: bool = False,
    storage_of: Path | None = None,
    address: str = "127.0.0.1",
    name: str | None = None,
) -> RunningRegistry:
    """Start a real registry on a free 127.0.0.1 port; the caller stops it.

    ``allow_urls`` lets it accept manifests whose foreign layers carry URLs; ``tls`` makes
    it serve HTTPS with that certificate (tests/support/tls.py) instead of plain HTTP, and
    ``client_ca`` makes it require client certificates that CA signed; ``readonly`` refuses
    every push (distribution's maintenance mode); ``storage_of`` serves another registry's
    storage folder (its workdir) instead of a new one. ``address`` is where it listens
    (``::1``: loopback the engine does not count as insecure, unlike 127.0.0.0/8) and
    ``name`` the host name it is reached by (it must resolve to ``address``)."""
    if auth not in ("none", "basic", "token"):
        raise ValueError(f"unknown registry auth {auth!r}")
    workdir.mkdir(parents=True, exist_ok=True)
    password = password or ("pw-" + secrets.token_hex(12))
    token_server = None
    auth_config: dict[str, Any] | None = None
    if auth == "basic":
        htpasswd = workdir / "htpasswd"
        subprocess.run(
            ["htpasswd", "-Bbc", str(htpasswd), username, password],
            check=True,
            capture_output=True,
        )
        auth_config = {"htpasswd": {"realm": "imagekit-test", "path": str(htpasswd)}}
    elif auth == "token":
        token_server = TokenServer(username, password, workdir)
        auth_config = {
            "token": {
                "realm": token_server.realm,
                "service": SERVICE,
                "issuer": ISSUER,
                "rootcertbundle": str(token_server.cert_path),
            }
        }
    last_error: Exception | None = None
    for _ in range(3):
        chosen = port or free_port(address)
        config_path = workdir / "config.yml"
        config_path.write_text(
            _config(
                storage_of or workdir,
                chosen,
                auth_config,
                allow_urls,
                tls,
                client_ca,
                readonly,
                address,
            )
        )
        log_path = workdir / "registry.log"
        process = start_logged([REGISTRY_BINARY, "serve", str(config_path)], log_path)
        registry = RunningRegistry(
            host=f"{name or address}:{chosen}",
            storage=workdir,
            auth=auth,
            username=username if auth != "none" else None,
            password=password if auth != "none" else None,
            realm=token_server.realm if token_server else None,
            process=process,
            token_server=token_server,
            log_path=log_path,
            tls=tls,
        )
        try:
            _wait_ready(registry)
        except RuntimeError as exc:  # most likely the port was taken meanwhile
            last_error = exc
            registry.process = process
            process.kill()
            process.wait()
            continue
        return registry
    if token_server:
        token_server.stop()
    raise RuntimeError(f"could not start docker-registry: {last_error}")


# The session's ``make_registry`` fixture (tests/conftest.py): ``make_registry(AUTH, ...)``
# starts another registry; one name for its type, so the modules that ask for it do not each
# spell it out.
MakeRegistry = Callable[..., RunningRegistry]
