"""One conversation with registries: TLS and mirrors, auth, retries, redirects, and an HTTP
status turned into one of our errors.

``Session.request`` is the documented low-level entry that everything else builds on: the
reads (imagekit.registry.documents, blobs, resolve) and the push side
(imagekit.registry.upload). ``fault`` makes an error about a reference, its registry and
repository filled in, for the modules that check what a registry served.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

import httpx

from imagekit import jsondoc
from imagekit.errors import (
    DigestMismatch,
    ImageContentError,
    ReferenceNotFound,
    RegistryError,
    RegistryNotFound,
    RegistryProtocolError,
    RegistryUnauthorized,
)
from imagekit.refs import Reference
from imagekit.registry.auth import Authenticator, repository_scope
from imagekit.registry.credentials import CredentialStore
from imagekit.registry.mirrors import HUB, hub_mirrors, mirrors_log
from imagekit.registry.retry import RetryPolicy, Transient
from imagekit.registry.tls import TLSSettings
from imagekit.registry.transport import (
    MAX_MANIFEST_BYTES,
    MAX_SMALL_BODY_BYTES,
    Content,
    Transport,
    api_host,
    error_detail,
    excerpt,
    netloc,
    public_url,
    read_limited,
)

# The errors that name a registry and repository (see fault).
_E = TypeVar("_E", RegistryError, DigestMismatch, ImageContentError)
_DIGEST_IN_PATH = re.compile(r"/(?:manifests|blobs)/(sha(?:256|512):[0-9a-f]+)$")
#: The pause before a manifest PUT refused during another writer's blob commit is sent again.
_RACE_PAUSE_S = 0.5


class Session:
    """What every request to a registry goes through: which scheme and trust a host gets,
    Docker Hub's mirrors, the credentials and tokens, and the bounded retries.

    Loopback hosts (127.0.0.0/8, ::1, localhost) are spoken to over plain HTTP unless
    Docker's certs.d has a folder for them; hosts in ``insecure`` over TLS without
    verification, or plain HTTP when they do not speak TLS; everything else over HTTPS
    verified against the system trust store, ``ca_file`` and certs.d
    (imagekit.registry.tls; the process's settings and the environment's are added).
    Credentials come from the docker config (``docker_config`` is its directory, default
    ``$DOCKER_CONFIG`` or ``~/.docker``). ``transport`` replaces the
    network (tests use httpx.MockTransport).
    """

    def __init__(
        self,
        *,
        insecure: Sequence[str] = (),
        docker_config: Path | None = None,
        transport: httpx.BaseTransport | None = None,
        max_attempts: int = 5,
        timeout: float = 60.0,
        retry_policy: RetryPolicy | None = None,
        ca_file: Path | None = None,
        registry_mirrors: Sequence[str] = (),
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._mirrors = hub_mirrors(registry_mirrors)
        self._log = log if log is not None else mirrors_log()
        self._served_by: set[str] = set()
        policy = retry_policy or RetryPolicy(max_attempts=max_attempts)
        unverified = [m.host for m in self._mirrors if m.skip_verify]  # hosts.toml's say
        self._transport = Transport(
            transport=transport,
            policy=policy,
            timeout=timeout,
            tls=TLSSettings.from_env(
                insecure=[*insecure, *unverified], ca_file=ca_file
            ).with_host_files(
                {m.host: (m.cas, m.clients) for m in self._mirrors if m.cas or m.clients}
            ),
        )
        #: the bounded attempts every request, and every read that is sent again, runs under
        self.policy = policy
        self._auth = Authenticator(self._transport, CredentialStore(docker_config))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(insecure={sorted(self._transport.insecure)!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._transport.close()

    def request(
        self,
        method: str,
        ref_or_host: Reference | str,
        path: str,
        *,
        scope_actions: Sequence[str] = ("pull",),
        extra_scopes: Sequence[str] = (),
        headers: Mapping[str, str] | None = None,
        content: Content = None,
        stream: bool = False,
        allow_status: Sequence[int] = (),
    ) -> httpx.Response:
        """Send one registry API request with auth, retries, redirects and error mapping.

        ``path`` is relative to ``/v2/<repository>/`` for a Reference (``blobs/uploads/``),
        to ``/v2/`` for a bare host, absolute when it starts with ``/`` (``/v2/x/y``), or a
        full URL (an upload ``Location``; the Authorization header goes only to the
        registry's own origin). The bearer token asked for covers
        ``repository:<repo>:<scope_actions>`` plus ``extra_scopes`` (for a cross-repository
        mount add ``repository:<source>:pull``). ``content`` is bytes or a zero-argument
        callable returning a fresh iterable of bytes each time it is called (so streamed
        uploads can be re-sent after a 401 or a retry).

        Returns the response for any 2xx, and for statuses in ``allow_status``; with
        ``stream`` the body is unread (close the response), otherwise it is read (4 MiB at
        most). Raises RegistryUnauthorized (401/403), RegistryNotFound (404),
        RegistryError (other statuses), RetriesExhausted (network errors, 408, 429, 5xx
        after the last attempt), RegistryProtocolError (malformed answers).
        """
        if isinstance(ref_or_host, Reference):
            registry = ref_or_host.registry
            repository: str | None = ref_or_host.repository
            scopes = [repository_scope(ref_or_host.repository, scope_actions), *extra_scopes]
            prefix = f"/v2/{ref_or_host.repository}/"
        else:
            registry, repository, scopes, prefix = ref_or_host, None, list(extra_scopes), "/v2/"
        host = api_host(registry)
        origin = httpx.URL(self._transport.base_url(host))
        relative = not path.startswith(("http://", "https://"))
        if registry == HUB and repository and relative and method in ("GET", "HEAD"):
            # Docker Hub's reads go to its mirrors first (imagekit.registry.mirrors).
            for mirror in self._mirrors:
                where = mirror.url(path if path.startswith("/") else prefix + path)
                try:
                    answer = self._send(
                        method, where, mirror.origin, registry, repository, scopes,
                        headers, content, stream, allow_status, mirror.headers,
                    )  # fmt: skip
                except RegistryError as exc:
                    self._say(f"{HUB}: mirror {mirror.host} failed ({exc.message}); next")
                    continue
                if 200 <= answer.status_code < 300:
                    if mirror.host not in self._served_by:
                        self._served_by.add(mirror.host)
                        self._say(f"{HUB}: reading through the mirror {mirror.host}")
                    return answer
                answer.close()
                self._say(
                    f"{HUB}: mirror {mirror.host} answered HTTP {answer.status_code} for "
                    f"{method} {public_url(where)}; asking the next"
                )
            if self._mirrors:
                self._say(f"{HUB}: no mirror served {method} {path}; falling back to {host}")
        if path.startswith(("http://", "https://")):
            url = httpx.URL(path)
        elif path.startswith("/"):
            url = origin.join(path)
        else:
            url = origin.join(prefix + path)
        return self._send(
            method, url, origin, registry, repository, scopes, headers, content, stream,
            allow_status,
        )  # fmt: skip

    def _say(self, text: str) -> None:
        if self._log is not None:
            self._log(text)

    def _send(
        self,
        method: str,
        url: httpx.URL,
        origin: httpx.URL,
        registry: str,
        repository: str | None,
        scopes: Sequence[str],
        headers: Mapping[str, str] | None,
        content: Content,
        stream: bool,
        allow_status: Sequence[int],
        origin_headers: Sequence[tuple[str, str]] = (),
    ) -> httpx.Response:
        """:meth:`request` once its URL and the origin that answers for the registry are
        known (the registry's own, or a mirror's, with ORIGIN_HEADERS: hosts.toml's, sent to
        that origin only, never after a redirect elsewhere)."""
        what = f"{method} {public_url(url)}"
        own_host = netloc(origin)

        def attempt() -> httpx.Response:
            # Logins are per host, as the Docker CLI keeps them: each URL the request visits
            # (its redirects included) gets the Authorization of its own host's challenge,
            # made from that host's own credentials; a host that never challenged us (an
            # object store behind a redirect) gets none. At most five sends: without auth
            # (learning a challenge), with a cached token (which may have expired), with a
            # token fetched just now, and the same again for a host a redirect led to. A
            # 401 to credentials used just now is final, unless the credential helper has
            # a new secret by now (rotated while we ran).
            sent: dict[str, tuple[str | None, bool]] = {}
            renewed: set[str] = set()

            def authorize(target: httpx.URL) -> str | None:
                host = netloc(target)
                if host != own_host and not self._auth.challenged(host):
                    return None
                value, fresh = self._auth.authorization(host, scopes)
                sent[host] = (value, fresh)
                return value

            for sends_left in range(4, -1, -1):
                sent.clear()
                response = self._transport.send(
                    method,
                    str(url),
                    registry=registry,
                    headers=headers,
                    authorization=authorize,
                    content=content,
                    origin_headers=origin_headers,
                )
                if response.status_code == 401:
                    host = netloc(response.request.url)
                    value, fresh = sent.get(host, (None, True))
                    if not (value is not None and fresh):
                        retry = self._auth.on_unauthorized(host, response, scopes)
                    elif host not in renewed:
                        renewed.add(host)
                        retry = self._auth.renew_credential(host)
                    else:
                        retry = False
                    if retry and sends_left:
                        response.close()
                        continue
                ok = 200 <= response.status_code < 300 or response.status_code in allow_status
                # A HEAD answer has no body but announces the GET body's Content-Length
                # (RFC 9110, 9.3.2): reading it would refuse every blob over the limit.
                if ok and not stream and method == "HEAD":
                    response.read()  # no body: this hands the connection back to the pool
                elif ok and not stream:
                    # Inside the attempt: a body cut off mid-way (Transient) is sent again.
                    read_limited(response, MAX_MANIFEST_BYTES, registry=registry, what="answer")
                return response
            raise AssertionError("unreachable")  # pragma: no cover

        named = _DIGEST_IN_PATH.search(url.path)
        for again in (False, True):
            response = self.policy.run(
                attempt,
                registry=registry,
                what=what,
                repository=repository,
                digest=named.group(1) if named else None,
            )
            status = response.status_code
            if 200 <= status < 300 or status in allow_status:
                return response
            body = b""
            if method != "HEAD":
                try:
                    body = read_limited(
                        response, MAX_SMALL_BODY_BYTES, registry=registry, what="error body"
                    )
                except Transient:
                    body = b""  # the status says enough; a cut-off error body is no retry
            response.close()
            if not again and _blob_link_race(method, url, status, body):
                self._say(
                    f"{registry}: {what} was refused DIGEST_INVALID although imagekit hashed "
                    "the manifest it sent: a registry answers so while another writer commits "
                    "one of the manifest's blobs; sending it once more"
                )
                time.sleep(_RACE_PAUSE_S)
                continue
            break
        error = self._status_error(status, body, registry, repository, url)
        error.digest = named.group(1) if named else None
        raise error

    def _status_error(
        self, status: int, body: bytes, registry: str, repository: str | None, url: httpx.URL
    ) -> RegistryError:
        where = f"{registry}/{repository}" if repository else registry
        detail = error_detail(body) if body else ""
        suffix = f": {detail}" if detail else ""
        login = f"log in with `docker login {registry}` (imagekit reads the docker config)"
        cls: type[RegistryError] = RegistryError
        hint: str | None = None
        if status == 401:
            cls, hint = RegistryUnauthorized, login
            if self._auth.has_credentials(registry):
                message = f"{registry} refused the credentials from the docker config (HTTP 401)"
            else:
                message = f"{registry} requires authentication and no credentials were found"
        elif status == 403:
            cls, hint = RegistryUnauthorized, f"check your permissions on {where}; {login}"
            message = f"{where}: access denied (HTTP 403)"
        elif status == 404 and "/manifests/" in url.path and repository:
            # A manifest asked for by tag or digest: the reference names nothing here.
            named = url.path.rsplit("/manifests/", 1)[1]
            given = f"{where}{'@' if named.startswith('sha256:') else ':'}{named}"
            missing = "repository" if "NAME_UNKNOWN" in detail else "tag or digest"
            cls, message = (
                ReferenceNotFound,
                (f"{given}: the reference names nothing here (HTTP 404{suffix})"),
            )
            hint = (
                f"check the {missing} in {given} (a registry answers 404 alike for a tag, a "
                "digest or a repository it does not hold); this is not a fault to retry"
            )
            suffix = ""
        elif status == 404:
            cls, message = RegistryNotFound, f"{where}: not found (HTTP 404)"
        else:
            message = f"{where}: {public_url(url)} answered HTTP {status}"
        return cls(
            message + suffix,
            registry=registry,
            repository=repository,
            status=status,
            url=public_url(url),
            hint=hint,
        )

    def ping(self, registry_host: str) -> None:
        """Check that ``/v2/`` answers as a registry and that our credentials are accepted."""
        response = self.request("GET", registry_host, "")
        body = response.content
        version = response.headers.get("Docker-Distribution-API-Version", "")
        if version.startswith("registry/2"):
            return
        try:
            jsondoc.loads(body, limit=MAX_MANIFEST_BYTES)
        except jsondoc.JsonRefused:
            raise RegistryProtocolError(
                f"{registry_host} does not answer as a registry at /v2/: {excerpt(body)}",
                registry=registry_host,
                status=response.status_code,
                hint="check the host and port of the registry",
            ) from None


def _blob_link_race(method: str, url: httpx.URL, status: int, body: bytes) -> bool:
    """A manifest PUT refused 400 DIGEST_INVALID. imagekit sends manifests whose digest it
    computed from the very bytes sent, and blobs it uploaded before; distribution answers so
    when its check of a blob reads the blob's link file while another writer's commit of the
    same blob rewrites it (truncate, then write: imagekit.registry.blob_write keeps
    this process's writers apart, not other processes'). One more PUT settles it either way:
    the registry checks everything again."""
    return (
        method == "PUT"
        and "/manifests/" in url.path
        and status == 400
        and b"DIGEST_INVALID" in body
    )


def fault(kind: type[_E], ref: Reference, message: str, **fields: Any) -> _E:
    """An error of ``kind`` about ``ref``, its registry and repository filled in from it."""
    return kind(message, registry=ref.registry, repository=ref.repository, **fields)
