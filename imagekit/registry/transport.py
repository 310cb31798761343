"""HTTP to registries: scheme choice, redirects, size limits, retries, and the httpx boundary.

This is the one place where httpx and tenacity exceptions become imagekit errors, and the one
place that retries (docs/ARCHITECTURE.md, the outside layer): bounded attempts, exponential
backoff with jitter, ``Retry-After`` honoured, and only network errors, 408, 429 and 5xx
retried.

Redirects are followed here, by hand, because registries send blob downloads to object stores
on other hosts (S3, GCS, CDNs) with pre-signed URLs: the registry's ``Authorization`` header
must never travel with them (moby/moby#21008; containerd strips it the same way), and an
``https`` registry must never be downgraded to plain ``http`` by a redirect.
"""

from __future__ import annotations

import ipaddress
import math
import random
import re
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TypeVar

import httpx
import tenacity

from imagekit.errors import RegistryError, RegistryProtocolError, RetriesExhausted
from imagekit.registry.wire import StdlibTransport

T = TypeVar("T")

MiB = 1 << 20
#: Manifests, indexes and image configs larger than this are refused (containerd and
#: containers/image use the same 4 MiB ceiling for manifests).
MAX_MANIFEST_BYTES = 4 * MiB
#: Error bodies and token answers larger than this are refused.
MAX_SMALL_BODY_BYTES = 1 * MiB
MAX_REDIRECTS = 5
_DIGITS = re.compile(r"[0-9]{1,19}")
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504}) | frozenset(range(505, 600))

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


class Transient(Exception):
    """A failure worth another attempt; carries the server's Retry-After when it sent one."""

    def __init__(self, description: str, *, retry_after: float | None = None) -> None:
        super().__init__(description)
        self.description = description
        self.retry_after = retry_after


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if _DIGITS.fullmatch(value):
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry; ``sleep`` is replaceable so tests need not wait."""

    max_attempts: int = 5
    initial_wait: float = 0.5
    max_wait: float = 20.0
    #: A server asking for a longer pause than this gets this long (the attempts stay bounded).
    max_retry_after: float = 60.0
    sleep: Callable[[float], None] = field(default=time.sleep)

    def backoff(self, attempt: int) -> float:
        """Exponential backoff with "equal jitter": half fixed, half random, capped."""
        ceiling = min(self.max_wait, math.ldexp(self.initial_wait, max(0, attempt - 1)))
        return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - not for security

    def run(
        self,
        action: Callable[[], T],
        *,
        registry: str,
        what: str,
        repository: str | None = None,
        digest: str | None = None,
    ) -> T:
        """Call ``action`` until it stops raising Transient or the attempts run out."""

        def wait(state: tenacity.RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            if isinstance(exc, Transient) and exc.retry_after is not None:
                return min(exc.retry_after, self.max_retry_after)
            return self.backoff(state.attempt_number)

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(max(1, self.max_attempts)),
            wait=wait,
            retry=tenacity.retry_if_exception_type(Transient),
            sleep=self.sleep,
            reraise=False,
        )
        try:
            return retrying(action)
        except tenacity.RetryError as exc:
            last = exc.last_attempt.exception()
            detail = last.description if isinstance(last, Transient) else repr(last)
            raise RetriesExhausted(
                f"{what}: gave up after {self.max_attempts} attempts; last: {detail}",
                registry=registry,
                repository=repository,
                digest=digest,
                hint=f"check that {registry} is reachable and healthy, then try again",
            ) from exc


def _ssl_context() -> ssl.SSLContext:
    # The system trust store (and SSL_CERT_FILE/SSL_CERT_DIR), not certifi: users behind a
    # TLS-intercepting proxy have its CA in the system store, never in certifi's bundle.
    return ssl.create_default_context()


def _proxy_mounts() -> dict[str, httpx.BaseTransport | None]:
    """httpx transports for the proxies the environment names (HTTP(S)_PROXY, ALL_PROXY,
    NO_PROXY), in front of the stdlib transport.

    httpx reads those variables only when it builds its own default transport, so with ours
    they must be mounted here, by httpx's own rules (its ``get_environment_proxies``; httpx
    is pinned below 0.29, and tests/integration/registry/test_wire.py checks the proxy is
    used). A NO_PROXY host maps to None: our transport, no proxy. Without any proxy nothing
    is built, and the CA bundle is loaded only on the first https connection.
    """
    from httpx._utils import get_environment_proxies

    proxies = get_environment_proxies()
    if not proxies:
        return {}
    context = _ssl_context()
    return {
        pattern: None if url is None else httpx.HTTPTransport(proxy=url, verify=context)
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
    ) -> None:
        self.insecure = frozenset(insecure)
        self.policy = policy or RetryPolicy()
        self.http = httpx.Client(
            transport=transport or StdlibTransport(_ssl_context),
            mounts=_proxy_mounts() if transport is None else None,
            follow_redirects=False,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 15.0)),
            headers={"User-Agent": "imagekit"},
        )

    def close(self) -> None:
        self.http.close()

    def scheme_for(self, host: str) -> str:
        """Plain HTTP only for loopback hosts and hosts the user listed as insecure."""
        return "http" if is_loopback(host) or host in self.insecure else "https"

    def base_url(self, host: str) -> str:
        return f"{self.scheme_for(host)}://{host}"

    def send(
        self,
        method: str,
        url: str,
        *,
        registry: str,
        headers: Mapping[str, str] | None = None,
        authorization: str | None = None,
        content: Content = None,
    ) -> httpx.Response:
        """One attempt: send, follow redirects by hand, raise Transient on retryable faults.

        ``authorization`` goes only to the origin of ``url``; a redirect to another origin
        drops it. The response is returned with its body unread (the caller closes it).
        """
        origin = httpx.URL(url)
        current = origin
        for _ in range(MAX_REDIRECTS + 1):
            request_headers = dict(headers or {})
            if authorization and _same_origin(current, origin):
                request_headers["Authorization"] = authorization
            body = content() if callable(content) else content
            request = self.http.build_request(
                method, current, headers=request_headers, content=body
            )
            response = self._send_mapped(request, registry=registry)
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
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
                response.close()
                raise Transient(
                    f"{method} {_public_url(current)} answered {response.status_code}",
                    retry_after=retry_after if response.status_code in (429, 503) else None,
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
            if "CERTIFICATE_VERIFY_FAILED" in str(exc) or isinstance(
                exc.__context__, ssl.SSLCertVerificationError
            ):
                raise RegistryError(
                    f"TLS certificate of {request.url.host} could not be verified",
                    registry=registry,
                    url=_public_url(request.url),
                    hint="install the registry's CA in the system trust store; plain HTTP is "
                    "only used for loopback hosts and hosts passed as --insecure",
                ) from exc
            raise Transient(f"cannot connect to {request.url.netloc.decode()}: {exc}") from exc
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise Transient(
                f"{request.method} {_public_url(request.url)}: {type(exc).__name__}: {exc}"
            ) from exc
        except httpx.HTTPError as exc:  # invalid URL, unsupported protocol, proxy errors
            raise RegistryError(
                f"{request.method} {_public_url(request.url)} failed: {exc}",
                registry=registry,
                url=_public_url(request.url),
            ) from exc


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
