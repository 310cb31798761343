"""HTTP to registries: scheme choice, redirects, size limits, and the httpx boundary.

This is the one place where httpx exceptions become imagekit errors, and where a failure is
judged worth another attempt (:class:`Transient`: network errors, 408, 429 and 5xx);
imagekit.registry.retry is the one place that retries (docs/ARCHITECTURE.md, the outside
layer): bounded attempts, exponential backoff with jitter, ``Retry-After`` honoured.

Cookies are never kept: Harbor starts a session with a cookie on the first answer and then
refuses every write that carries it without its CSRF token (403 "CSRF token invalid"), and
no registry API needs one (the Docker CLI and containerd send none).

Redirects are followed here, by hand, because registries send blob downloads to object stores
on other hosts (S3, GCS, CDNs) with pre-signed URLs: the registry's ``Authorization`` header
must never travel with them (moby/moby#21008; containerd strips it the same way), and an
``https`` registry must never be downgraded to plain ``http`` by a redirect.
"""

from __future__ import annotations

import http.cookiejar
import ipaddress
import re
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

import httpx

from imagekit import jsondoc
from imagekit.errors import RegistryError, RegistryProtocolError, RegistryTLSError
from imagekit.registry.retry import RetryPolicy, Transient, parse_retry_after, rate_limits
from imagekit.registry.tls import TLSSettings
from imagekit.registry.wire import StdlibTransport

MiB = 1 << 20
#: Manifests, indexes and image configs larger than this are refused (containerd and
#: containers/image use the same 4 MiB ceiling for manifests).
MAX_MANIFEST_BYTES = 4 * MiB
#: Error bodies and token answers larger than this are refused.
MAX_SMALL_BODY_BYTES = 1 * MiB
MAX_REDIRECTS = 5
_DIGITS = re.compile(r"[0-9]{1,19}")
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504}) | frozenset(range(505, 600))

#: What the caller sends as Authorization to each URL a request visits (its redirects
#: included): a header value for the request's own origin only, or a function of the URL
#: (per-host logins: a registry that redirects its API to another registry with its own
#: login, as lscr.io does to ghcr.io).
Authorize = str | Callable[[httpx.URL], str | None] | None
#: Bytes of a retryable answer's body read for its error message (Docker Hub's 429 says why).
_ERROR_PEEK = 16 * 1024
#: A request body: bytes, or a callable that yields the body afresh for each attempt (so a
#: streamed upload can still be retried or re-sent after a 401).
Content = bytes | Callable[[], Iterable[bytes]] | None


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost, with or without a port."""
    name = host
    if name.startswith("["):
        name = name[1 : name.find("]")] if "]" in name else name
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def api_host(registry: str) -> str:
    """The host that serves the registry API: Docker Hub's API lives on registry-1.docker.io."""
    return "registry-1.docker.io" if registry == "docker.io" else registry


def excerpt(body: bytes, limit: int = 120) -> str:
    """A short, printable excerpt of what a server answered, for error messages."""
    text = body[: limit * 4].decode("utf-8", errors="replace")
    text = " ".join(text.split())
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text[:limit] + ("..." if len(text) > limit else "")


def error_detail(body: bytes) -> str:
    """``CODE: message`` from a distribution error body, else a short excerpt."""
    try:
        document = jsondoc.loads(body, limit=MAX_SMALL_BODY_BYTES)
    except jsondoc.JsonRefused:
        return excerpt(body)
    errors = document.get("errors") if isinstance(document, dict) else None
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        code, message = errors[0].get("code"), errors[0].get("message")
        return excerpt(f"{code}: {message}".encode(), 160)
    return excerpt(body)


def _ssl_context() -> ssl.SSLContext:
    # The system trust store (and SSL_CERT_FILE/SSL_CERT_DIR), not certifi: users behind a
    # TLS-intercepting proxy have its CA in the system store, never in certifi's bundle.
    return ssl.create_default_context()


class _ProxiedByHost(httpx.BaseTransport):
    """httpx's proxy transport, one per registry host, each with that host's TLS context.

    Through an HTTPS_PROXY the registry's TLS runs end to end inside the CONNECT tunnel, so
    it must be verified (and a client certificate shown) exactly as without the proxy:
    ``--ca-file``, certs.d and ``--insecure`` for that host. One httpx transport takes one
    SSL context, hence one transport per host. The proxy's own TLS (an ``https://`` proxy
    URL) is verified against the system store, where users keep their proxy's CA.
    """

    def __init__(self, proxy: str, context_for: Callable[[str], ssl.SSLContext]) -> None:
        secure = httpx.URL(proxy).scheme == "https"
        self._proxy = httpx.Proxy(proxy, ssl_context=_ssl_context() if secure else None)
        self._context_for = context_for
        self._by_host: dict[str, httpx.HTTPTransport] = {}
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host if request.url.port in (None, 443) else netloc(request.url)
        with self._lock:
            transport = self._by_host.get(host)
            if transport is None:
                # Plain HTTP never opens a context (a forward request, no tunnel).
                verify: ssl.SSLContext | bool = (
                    self._context_for(host) if request.url.scheme == "https" else True
                )
                transport = httpx.HTTPTransport(proxy=self._proxy, verify=verify)
                self._by_host[host] = transport
        return transport.handle_request(request)

    def close(self) -> None:
        with self._lock:
            for transport in self._by_host.values():
                transport.close()
            self._by_host.clear()


def _proxy_mounts(
    context_for: Callable[[str], ssl.SSLContext],
) -> dict[str, httpx.BaseTransport | None]:
    """httpx transports for the proxies the environment names (HTTP(S)_PROXY, ALL_PROXY,
    NO_PROXY), in front of the stdlib transport.

    httpx reads those variables only when it builds its own default transport, so with ours
    they must be mounted here, by httpx's own rules (its ``get_environment_proxies``; httpx
    is pinned below 0.29, and tests/integration/registry/test_wire.py checks the proxy is
    used). A NO_PROXY host maps to None: our transport, no proxy. Without any proxy nothing
    is built. Each registry's TLS through the proxy is its own (:class:`_ProxiedByHost`).
    """
    from httpx._utils import get_environment_proxies

    proxies = get_environment_proxies()
    return {
        pattern: None if url is None else _ProxiedByHost(url, context_for)
        for pattern, url in proxies.items()
    }


class Transport:
    """One httpx client for all registries, and the scheme, redirect and error rules."""

    def __init__(
        self,
        *,
        insecure: Iterable[str] = (),
        transport: httpx.BaseTransport | None = None,
        policy: RetryPolicy | None = None,
        timeout: float = 60.0,
        tls: TLSSettings | None = None,
    ) -> None:
        self.tls = tls or TLSSettings.from_env(insecure=insecure)
        self.insecure = self.tls.insecure
        self.policy = policy or RetryPolicy()
        # Insecure hosts found not to speak TLS at all: plain HTTP from then on.
        self._plain: set[str] = set()
        self._plain_lock = threading.Lock()
        self.http = httpx.Client(
            transport=transport or StdlibTransport(_ssl_context, per_host=self._context_for),
            mounts=_proxy_mounts(self._context_for) if transport is None else None,
            follow_redirects=False,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 15.0)),
            headers={"User-Agent": "imagekit"},
            cookies=_no_cookies(),
        )

    def close(self) -> None:
        self.http.close()

    def _context_for(self, host: str) -> ssl.SSLContext:
        return self.tls.context(host, verify=host not in self.insecure)

    def scheme_for(self, host: str) -> str:
        """HTTPS, except: loopback hosts without a certs.d folder, and insecure hosts that
        turned out not to speak TLS (imagekit.registry.tls)."""
        if host in self._plain:
            return "http"
        if host in self.insecure or self.tls.host_dir(host) is not None:
            return "https"
        return "http" if is_loopback(host) else "https"

    def base_url(self, host: str) -> str:
        return f"{self.scheme_for(host)}://{host}"

    def send(
        self,
        method: str,
        url: str,
        *,
        registry: str,
        headers: Mapping[str, str] | None = None,
        authorization: Authorize = None,
        content: Content = None,
        origin_headers: Sequence[tuple[str, str]] = (),
    ) -> httpx.Response:
        """One attempt: send, follow redirects by hand, raise Transient on retryable faults.

        ``authorization`` as a string goes only to the origin of ``url``; a redirect to
        another origin drops it. As a function it is asked for each URL visited, and decides.
        ``origin_headers`` (a mirror's, from hosts.toml) go only to the origin of ``url``,
        under the request's own headers.
        The response is returned with its body unread (the caller closes it); its
        ``request.url`` is where it came from.
        """
        origin = httpx.URL(url)
        current = origin
        for _ in range(MAX_REDIRECTS + 1):
            request_headers = dict(headers or {})
            if origin_headers and _same_origin(current, origin):
                own = {name.lower() for name in request_headers}
                extra: dict[str, str] = {}
                for name, given in origin_headers:
                    if name.lower() not in own:
                        extra[name] = f"{extra[name]}, {given}" if name in extra else given
                request_headers = {**extra, **request_headers}
            value = (
                authorization(current)
                if callable(authorization)
                else authorization
                if _same_origin(current, origin)
                else None
            )
            if value:
                request_headers["Authorization"] = value
            body = content() if callable(content) else content
            request = self.http.build_request(
                method, current, headers=request_headers, content=body
            )
            try:
                response = self._send_mapped(request, registry=registry)
            except _NotTLS:
                # An insecure host that does not speak TLS: plain HTTP, as Docker falls back.
                plain = current.copy_with(scheme="http")
                origin = plain if _same_origin(current, origin) else origin
                current = plain
                continue
            if response.status_code in (301, 302, 303, 307, 308):
                location = response.headers.get("Location")
                response.close()
                if not location:
                    raise RegistryProtocolError(
                        f"{registry} answered {response.status_code} without a Location",
                        registry=registry,
                        status=response.status_code,
                        url=_public_url(current),
                    )
                try:
                    target = current.join(location)
                except httpx.InvalidURL as exc:
                    raise RegistryProtocolError(
                        f"{registry} redirected to an invalid URL",
                        registry=registry,
                        url=_public_url(current),
                    ) from exc
                if target.scheme not in ("http", "https") or (
                    current.scheme == "https" and target.scheme == "http"
                ):
                    raise RegistryProtocolError(
                        f"{registry} redirected to a {target.scheme} URL; refused",
                        registry=registry,
                        url=_public_url(target),
                        hint="a registry reached over https must not redirect to plain http",
                    )
                if response.status_code == 303:
                    method, content = "GET", None
                current = target
                continue
            if response.status_code in RETRYABLE_STATUSES:
                status = response.status_code
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
                raise Transient(
                    f"{method} {_public_url(current)} answered {status}",
                    retry_after=retry_after if status in (429, 503) else None,
                    status=status,
                    said=_peek_detail(response),
                    limits=rate_limits(response.headers),
                )
            return response
        raise RegistryProtocolError(
            f"{registry}: more than {MAX_REDIRECTS} redirects for {_public_url(origin)}",
            registry=registry,
            url=_public_url(origin),
        )

    def _send_mapped(self, request: httpx.Request, *, registry: str) -> httpx.Response:
        """The httpx boundary: network errors become Transient, TLS and URL errors final."""
        try:
            return self.http.send(request, stream=True)
        except httpx.ConnectError as exc:
            cause = exc.__cause__ or exc.__context__
            host = netloc(request.url)
            if request.url.scheme == "https" and host in self.insecure:
                if isinstance(cause, ssl.SSLError | ConnectionResetError):
                    with self._plain_lock:
                        self._plain.add(host)
                    raise _NotTLS from exc
            elif isinstance(cause, ssl.SSLCertVerificationError) or (
                "CERTIFICATE_VERIFY_FAILED" in str(exc)
            ):
                reason = getattr(cause, "verify_message", None) or "verification failed"
                raise RegistryTLSError(
                    f"{registry}: the TLS certificate of {host} could not be verified ({reason})",
                    registry=registry,
                    url=_public_url(request.url),
                    hint=self.tls.trust_hint(host),
                ) from exc
            elif isinstance(cause, ssl.SSLError):
                raise RegistryTLSError(
                    f"{registry}: the TLS handshake with {host} failed "
                    f"({getattr(cause, 'reason', None) or cause})",
                    registry=registry,
                    url=_public_url(request.url),
                    hint="check the client certificate in "
                    f"{self.tls.certs_dir}/{host}/ (client.cert, client.key) and the "
                    "registry's TLS settings; " + self.tls.trust_hint(host),
                ) from exc
            raise Transient(f"cannot connect to {request.url.netloc.decode()}: {exc}") from exc
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            cause = exc.__cause__
            if isinstance(cause, ssl.SSLError) and "ALERT" in str(cause.reason or "").upper():
                # TLS 1.3 refuses a client certificate (or its absence) after the handshake,
                # as an alert in place of the answer: the same request gets the same alert.
                host = netloc(request.url)
                raise RegistryTLSError(
                    f"{registry}: {host} refused the TLS session ({cause.reason})",
                    registry=registry,
                    url=_public_url(request.url),
                    hint="it may want a client certificate: put client.cert and client.key in "
                    f"{self.tls.certs_dir}/{host}/",
                ) from exc
            raise Transient(
                f"{request.method} {_public_url(request.url)}: {type(exc).__name__}: {exc}"
            ) from exc
        except httpx.HTTPError as exc:  # invalid URL, unsupported protocol, proxy errors
            raise RegistryError(
                f"{request.method} {_public_url(request.url)} failed: {exc}",
                registry=registry,
                url=_public_url(request.url),
            ) from exc


class _NotTLS(Exception):
    """An insecure host answered a TLS handshake with something else: try plain HTTP."""


def _peek_detail(response: httpx.Response) -> str:
    """What a retryable answer's body says (``CODE: message``); closes the response."""
    body = b""
    try:
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) >= _ERROR_PEEK:
                break
    except httpx.HTTPError:
        pass  # the status says enough
    finally:
        response.close()
    return error_detail(body[:_ERROR_PEEK]) if body.strip() else ""


def _no_cookies() -> http.cookiejar.CookieJar:
    """A cookie jar that keeps nothing (an empty allow-list of domains)."""
    return http.cookiejar.CookieJar(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))


def netloc(url: httpx.URL) -> str:
    """``host[:port]`` of a URL, as registries are named in references (IPv6 bracketed)."""
    return url.netloc.decode("ascii")


def _same_origin(a: httpx.URL, b: httpx.URL) -> bool:
    return (a.scheme, a.host, a.port) == (b.scheme, b.host, b.port)


def _public_url(url: httpx.URL) -> str:
    """A URL without its query (pre-signed URLs carry credentials in the query)."""
    return str(url.copy_with(query=None, fragment=None))


public_url = _public_url


def content_length(response: httpx.Response) -> int | None:
    """The Content-Length as an int, or None when absent or not plain ASCII digits."""
    value = response.headers.get("Content-Length", "").strip()
    return int(value) if _DIGITS.fullmatch(value) else None


def read_limited(response: httpx.Response, limit: int, *, registry: str, what: str) -> bytes:
    """Read a (decoded) body of at most ``limit`` bytes; more is a protocol error.

    The body is also left on ``response`` (``response.content``) for callers that want it.
    """
    declared = content_length(response)
    if declared is not None and declared > limit:
        response.close()
        raise RegistryProtocolError(
            f"{registry}: {what} of {declared} bytes is over the {limit}-byte limit",
            registry=registry,
            status=response.status_code,
            url=_public_url(response.request.url),
        )
    chunks: list[bytes] = []
    total = 0
    try:
        for chunk in response.iter_bytes():
            total += len(chunk)
            if total > limit:
                raise RegistryProtocolError(
                    f"{registry}: {what} is over the {limit}-byte limit",
                    registry=registry,
                    status=response.status_code,
                    url=_public_url(response.request.url),
                )
            chunks.append(chunk)
    except httpx.HTTPError as exc:
        raise Transient(f"reading {what} from {registry}: {type(exc).__name__}: {exc}") from exc
    finally:
        response.close()
    body = b"".join(chunks)
    response._content = body  # noqa: SLF001 - let .content/.json() work on a streamed body
    return body
