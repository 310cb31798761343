"""RegistryClient: the OCI distribution API, read side, with every byte checked.

Reads go ``resolve`` -> ``get_manifest`` -> ``stream_blob``; each returns only bytes whose
digest and size were verified against what was asked for. ``request`` is the documented
low-level entry (auth, retries, redirects and error mapping) that the push side
(``imagekit.registry.upload``) builds on.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import httpx

from imagekit.errors import (
    DigestMismatch,
    ImageContentError,
    PlatformNotFound,
    ReferenceFormatError,
    RegistryError,
    RegistryNotFound,
    RegistryProtocolError,
    RegistryUnauthorized,
    RetriesExhausted,
)
from imagekit.refs import Digest, Platform, Reference, is_tag
from imagekit.registry.auth import Authenticator, repository_scope
from imagekit.registry.credentials import CredentialStore
from imagekit.registry.manifest import (
    ACCEPT,
    CONFIG_TYPES,
    INDEX_TYPES,
    MANIFEST_TYPES,
    Descriptor,
    ImageConfig,
    ImageIndex,
    ImageManifest,
    detect_media_type,
    parse_config,
    parse_manifest,
)
from imagekit.registry.mirrors import HUB, hub_mirrors, mirrors_log
from imagekit.registry.tls import TLSSettings
from imagekit.registry.transport import (
    MAX_MANIFEST_BYTES,
    MAX_SMALL_BODY_BYTES,
    Content,
    RetryPolicy,
    Transient,
    Transport,
    api_host,
    content_length,
    error_detail,
    excerpt,
    netloc,
    public_url,
    read_limited,
)

DEFAULT_PLATFORM = Platform("linux", "amd64")
# The errors that name a registry and repository (see _fault).
_E = TypeVar("_E", RegistryError, DigestMismatch, ImageContentError)
_DIGEST_IN_PATH = re.compile(r"/(?:manifests|blobs)/(sha(?:256|512):[0-9a-f]+)$")
#: The pause before a manifest PUT refused during another writer's blob commit is sent again.
_RACE_PAUSE_S = 0.5
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
# Attestation manifests (BuildKit provenance/SBOM) sit in indexes as platform unknown/unknown:
# https://docs.docker.com/build/metadata/attestations/attestation-storage/
_ATTESTATION_ANNOTATION = "vnd.docker.reference.type"


@dataclass(frozen=True)
class ResolvedImage:
    """One image, resolved to a single platform manifest, with its config read and verified."""

    reference: Reference
    index_digest: Digest | None
    index_media_type: str | None
    platform: Platform | None
    manifest_digest: Digest
    manifest_media_type: str
    manifest_bytes: bytes
    manifest: ImageManifest
    config_digest: Digest
    config_bytes: bytes
    config: ImageConfig
    layers: tuple[Descriptor, ...]
    diff_ids: tuple[Digest, ...]
    #: every entry of the index the image was chosen from (each platform's manifest, and any
    #: attestation manifests), as the index lists them; empty for a single manifest
    index_manifests: tuple[Descriptor, ...] = ()

    # Only an image whose manifest and config matched their digests is ever resolved.
    ok: ClassVar[bool] = True
    exit_code: ClassVar[int] = 0

    @property
    def compressed_layer_bytes(self) -> int:
        return sum(layer.size for layer in self.layers)

    @property
    def pinned_reference(self) -> Reference:
        """``registry/repo@manifest_digest``: this exact platform image."""
        return self.reference.pinned_only(self.manifest_digest)

    def to_json(self) -> dict[str, Any]:
        """The fields of an image lock entry (as in the public MiniMax-M3 lock), and more."""
        return {
            "source_tag": self.reference.familiar,
            "reference": str(self.reference),
            "index_digest": str(self.index_digest) if self.index_digest else None,
            "index_media_type": self.index_media_type,
            "platform": str(self.platform) if self.platform else None,
            "manifest_digest": str(self.manifest_digest),
            "manifest_media_type": self.manifest_media_type,
            "config_digest": str(self.config_digest),
            "config_media_type": self.manifest.config.mediaType,
            "compressed_layer_bytes": self.compressed_layer_bytes,
            "layer_digests": [str(layer.digest) for layer in self.layers],
            "layers": [layer.to_json() for layer in self.layers],
            "diff_ids": [str(d) for d in self.diff_ids],
            "index_manifests": [entry.to_json() for entry in self.index_manifests],
        }


@dataclass(frozen=True)
class BlobProbe:
    """A blob as the registry serves it, without reading it: its size and first bytes."""

    digest: Digest
    size: int
    head: bytes


@dataclass(frozen=True)
class ManifestHead:
    """A manifest's identity as a registry announces it: digest, media type and size.

    ``from_get`` is true when the registry's HEAD answer named no digest and the manifest
    itself was fetched and hashed instead.
    """

    digest: Digest
    media_type: str | None
    size: int | None
    from_get: bool


class RegistryClient:
    """A client for OCI distribution registries.

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
        self._policy = policy
        self._auth = Authenticator(self._transport, CredentialStore(docker_config))

    def __repr__(self) -> str:
        return f"RegistryClient(insecure={sorted(self._transport.insecure)!r})"

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._transport.close()

    # ------------------------------------------------------------------ low level

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
            response = self._policy.run(
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
            json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise RegistryProtocolError(
                f"{registry_host} does not answer as a registry at /v2/: {excerpt(body)}",
                registry=registry_host,
                status=response.status_code,
                hint="check the host and port of the registry",
            ) from None

    # ------------------------------------------------------------------ manifests

    def get_manifest(
        self,
        ref: Reference,
        reference_or_digest: str | Digest,
        *,
        expected_size: int | None = None,
        accept: Sequence[str] = ACCEPT,
    ) -> tuple[bytes, str, Digest]:
        """Fetch a manifest or index: its exact bytes, media type and digest, all checked.

        When asked by digest, the sha256 of the bytes received must equal it; a
        Docker-Content-Digest header must agree with the bytes too; the media type must be
        unambiguous (see :func:`detect_media_type`). ``expected_size`` (from a descriptor)
        caps what is read at that size and must equal the length received.
        """
        asked = str(reference_or_digest)
        wanted: Digest | None = None
        if isinstance(reference_or_digest, Digest) or ":" in asked or "@" in asked:
            wanted = Digest(asked)  # refuses malformed digests before any URL is formed
        elif not is_tag(asked):
            raise ReferenceFormatError(f"malformed tag {asked!r}")
        registry, repository = ref.registry, ref.repository
        limit = MAX_MANIFEST_BYTES
        if expected_size is not None:
            if expected_size > MAX_MANIFEST_BYTES:
                raise _fault(
                    RegistryProtocolError,
                    ref,
                    f"{ref.name}: manifest {asked} is declared as {expected_size} bytes, over "
                    f"the {MAX_MANIFEST_BYTES}-byte limit",
                    digest=str(wanted),
                )
            limit = expected_size

        def fetch() -> tuple[bytes, httpx.Headers]:
            response = self.request(
                "GET",
                ref,
                f"manifests/{asked}",
                headers={"Accept": ", ".join(accept)},
                stream=True,
            )
            # A body cut off mid-way raises Transient here, so the GET is tried again.
            return read_limited(response, limit, registry=registry, what=f"manifest {asked}"), (
                response.headers
            )

        body, response_headers = self._policy.run(
            fetch,
            registry=registry,
            what=f"GET manifest {asked} from {ref.name}",
            repository=repository,
            digest=str(wanted) if wanted else None,
        )
        if wanted is not None:
            actual = _digest_of(body, wanted.algorithm)
            if actual != wanted:
                raise _fault(
                    DigestMismatch,
                    ref,
                    f"{ref.name}: the manifest served for {wanted} has digest {actual}",
                    expected=str(wanted),
                    actual=str(actual),
                    hint="the registry served other bytes than the digest names; do not use it",
                )
        header = response_headers.get("Docker-Content-Digest")
        if header:
            try:
                announced = Digest(header.strip())
            except ReferenceFormatError as exc:
                raise _fault(
                    RegistryProtocolError,
                    ref,
                    f"{ref.name}: malformed Docker-Content-Digest header "
                    f"{excerpt(header.encode())}",
                ) from exc
            actual = _digest_of(body, announced.algorithm)
            if actual != announced:
                raise _fault(
                    DigestMismatch,
                    ref,
                    f"{ref.name}: Docker-Content-Digest says {announced} but the manifest bytes "
                    f"of {asked} hash to {actual}",
                    expected=str(announced),
                    actual=str(actual),
                )
        if expected_size is not None and len(body) != expected_size:
            raise _fault(
                RegistryProtocolError,
                ref,
                f"{ref.name}: manifest {asked} is {len(body)} bytes, its descriptor says "
                f"{expected_size}",
                digest=str(wanted),
            )
        media_type = detect_media_type(
            body,
            response_headers.get("Content-Type"),
            registry=registry,
            repository=repository,
            digest=str(wanted) if wanted else None,
        )
        return body, media_type, wanted or Digest.of_bytes(body)

    def head_manifest(
        self, ref: Reference, tag_or_digest: str, *, accept: Sequence[str] = ACCEPT
    ) -> ManifestHead:
        """What the registry serves under a tag now, asked with one HEAD where it can be.

        The digest is the registry's own ``Docker-Content-Digest`` for the document it would
        serve to ``accept`` (an index stays an index: it is never narrowed to a platform), so
        a tag that did not move costs one HEAD request. A registry whose HEAD names no digest
        (the distribution spec says it SHOULD, not MUST) is asked with a GET, and the digest
        is then the sha256 of the bytes received. Raises RegistryNotFound only when a GET
        says 404 too: Nexus and Artifactory proxy repositories answer HEAD with 404 for a
        manifest they have not cached yet and serve the same manifest to a GET, so a HEAD
        404 alone would call a living tag gone. The other errors are those of
        :meth:`request`.
        """
        if ":" in tag_or_digest:
            Digest(tag_or_digest)  # refuses a malformed digest before any URL is formed
        elif not is_tag(tag_or_digest):
            raise ReferenceFormatError(f"malformed tag {tag_or_digest!r}")
        try:
            response = self.request(
                "HEAD", ref, f"manifests/{tag_or_digest}", headers={"Accept": ", ".join(accept)}
            )
        except RegistryNotFound:
            body, served_type, digest = self.get_manifest(ref, tag_or_digest, accept=accept)
            return ManifestHead(digest, served_type, len(body), from_get=True)
        header = (response.headers.get("Docker-Content-Digest") or "").strip()
        media_type = (response.headers.get("Content-Type") or "").split(";")[0].strip() or None
        size = content_length(response)
        if header:
            try:
                return ManifestHead(Digest(header), media_type, size, from_get=False)
            except ReferenceFormatError as exc:
                raise _fault(
                    RegistryProtocolError,
                    ref,
                    f"{ref.name}: malformed Docker-Content-Digest header on HEAD of "
                    f"{tag_or_digest}: {excerpt(header.encode())}",
                ) from exc
        body, media_type, digest = self.get_manifest(ref, tag_or_digest, accept=accept)
        return ManifestHead(digest, media_type, len(body), from_get=True)

    # ------------------------------------------------------------------ blobs

    def probe_blob(self, ref: Reference, digest: Digest | str, head: int = 16) -> BlobProbe:
        """The blob's size and first bytes as the registry serves them, with one ranged GET.

        ``Range: bytes=0-N`` is asked for; a 206 names the whole size in its Content-Range,
        a registry that ignores Range answers 200 with the size in Content-Length, and only
        the first ``head`` bytes are read either way. A size the answer does not state is a
        RegistryProtocolError: nothing is assumed.
        """
        checked = Digest(str(digest))
        response = self.request(
            "GET",
            ref,
            f"blobs/{checked}",
            headers={"Range": f"bytes=0-{head - 1}", "Accept-Encoding": "identity"},
            stream=True,
        )
        try:
            size: int | None
            if response.status_code == 206:
                match = _CONTENT_RANGE.fullmatch(
                    (response.headers.get("Content-Range") or "").strip()
                )
                total = match.group(3) if match and match.group(1) == "0" else "*"
                size = None if total == "*" else int(total)
            else:
                size = content_length(response)
            if size is None:
                raise _fault(
                    RegistryProtocolError,
                    ref,
                    f"{ref.name}: blob {checked}: the answer to a ranged GET states no size "
                    f"(HTTP {response.status_code}, Content-Range "
                    f"{response.headers.get('Content-Range')!r})",
                    digest=str(checked),
                )
            first = b""
            for chunk in response.iter_raw():
                first += chunk
                if len(first) >= head:
                    break
        finally:
            response.close()
        return BlobProbe(checked, size, first[:head])

    def blob_exists(self, ref: Reference, digest: Digest | str) -> bool:
        """HEAD the blob: True on 200, False on 404; other answers raise."""
        checked = Digest(str(digest))
        response = self.request("HEAD", ref, f"blobs/{checked}", allow_status=(404,))
        return response.status_code != 404

    def fetch_blob(
        self, ref: Reference, desc: Descriptor, *, limit: int = MAX_MANIFEST_BYTES
    ) -> bytes:
        """A small blob (a config) in memory, verified; refused when over ``limit``."""
        if desc.size > limit:
            raise _fault(
                RegistryProtocolError,
                ref,
                f"{ref.name}: blob {desc.digest} is {desc.size} bytes, over the {limit}-byte "
                "limit for documents",
                digest=str(desc.digest),
            )
        return b"".join(self.stream_blob(ref, desc))

    def stream_blob(
        self,
        ref: Reference,
        desc: Descriptor,
        chunk_size: int = 1 << 20,
        *,
        on_restart: Callable[[], None] | None = None,
    ) -> Iterator[bytes]:
        """Yield a blob's raw bytes as they arrive, verifying size and digest on the way.

        The bytes hashed are the bytes on the wire (``iter_raw``; ``Accept-Encoding:
        identity`` is asked for), so a Content-Encoding can never change them. More bytes
        than ``desc.size`` stop the download at once; fewer, or a wrong digest at the end,
        raise after the last chunk (DigestMismatch for the digest). A dropped connection is
        resumed with ``Range: bytes=N-``, accepted only as a 206 whose Content-Range starts
        at N. When the digest is wrong after a resume, or the registry ignores the Range, the
        blob is restarted once from byte 0, if ``on_restart`` is given: it is called first so
        the consumer can throw away what it got (bytes already yielded cannot be taken back;
        without it those cases raise instead).
        """
        digest = Digest(str(desc.digest))
        where = f"{ref.name}@{digest}"

        def refused(problem: str) -> RegistryError:
            return _fault(RegistryProtocolError, ref, f"{where}: {problem}", digest=str(digest))

        hasher = digest.new_hasher()
        received = 0
        drops = 0
        resumed = False
        restarted = False

        def restart() -> None:
            nonlocal hasher, received, resumed, restarted
            assert on_restart is not None  # noqa: S101 - guarded by callers
            restarted, resumed, received = True, False, 0
            hasher = digest.new_hasher()
            on_restart()

        while True:
            headers = {"Accept-Encoding": "identity"}
            if received:
                headers["Range"] = f"bytes={received}-"
            response = self.request("GET", ref, f"blobs/{digest}", headers=headers, stream=True)
            try:
                if received:
                    start = _range_start(response.headers.get("Content-Range"), desc.size)
                    if response.status_code == 206 and start == received:
                        resumed = True
                    elif response.status_code == 200 and on_restart is not None and not restarted:
                        restart()  # the registry ignored Range: this answer is the whole blob
                    else:
                        raise refused(
                            f"resuming at byte {received} got HTTP {response.status_code} with "
                            f"Content-Range {response.headers.get('Content-Range')!r}; refused"
                        )
                elif response.status_code != 200:
                    raise refused(f"expected HTTP 200 for the blob, got {response.status_code}")
                declared = content_length(response)
                if declared is not None and received + declared > desc.size:
                    raise refused(
                        f"the registry announces {received + declared} bytes, the descriptor "
                        f"says {desc.size}"
                    )
                try:
                    # No chunk_size here: httpx would buffer up to it, and bytes still in
                    # its buffer when the connection drops would be lost to the resume.
                    for chunk in _split(response.iter_raw(), chunk_size):
                        if received + len(chunk) > desc.size:
                            raise refused(
                                f"the blob is longer than its descriptor's {desc.size} bytes; "
                                "refused"
                            )
                        hasher.update(chunk)
                        received += len(chunk)
                        yield chunk
                except httpx.TransportError as exc:
                    drops += 1
                    if drops >= self._policy.max_attempts:
                        raise _fault(
                            RetriesExhausted,
                            ref,
                            f"{where}: the download broke off {drops} times; last at byte "
                            f"{received}: {type(exc).__name__}",
                            digest=str(digest),
                        ) from exc
                    continue
            finally:
                response.close()
            if received < desc.size:
                raise refused(f"the blob ended after {received} of {desc.size} bytes")
            actual = Digest.from_hasher(hasher)
            if actual == digest:
                return
            if resumed and not restarted and on_restart is not None:
                restart()
                continue
            raise _fault(
                DigestMismatch,
                ref,
                f"{where}: the blob's bytes hash to {actual}"
                + (" (after a resumed download)" if resumed else ""),
                expected=str(digest),
                actual=str(actual),
                hint="the registry served other bytes than the digest names; do not use it",
            )

    # ------------------------------------------------------------------ resolve

    def resolve(self, ref: Reference, platform: Platform | None = None) -> ResolvedImage:
        """Resolve a reference to one platform's manifest and its verified config.

        An index (or manifest list) is narrowed to ``platform`` (default linux/amd64);
        entries with platform unknown/unknown, such as attestation manifests, are never
        chosen. A single manifest is checked against ``platform`` when one is given.
        """
        registry, repository = ref.registry, ref.repository
        body, media_type, digest = self.get_manifest(ref, ref.identifier)
        index_digest: Digest | None = None
        index_media_type: str | None = None
        index_manifests: tuple[Descriptor, ...] = ()
        chosen: Platform | None = None
        if media_type in INDEX_TYPES:
            index = parse_manifest(
                body, media_type, registry=registry, repository=repository, digest=str(digest)
            )
            assert isinstance(index, ImageIndex)  # noqa: S101 - parse_manifest's contract
            want = platform or DEFAULT_PLATFORM
            entry = select_platform(
                index,
                want,
                where=f"{ref}",
                registry=registry,
                repository=repository,
                digest=str(digest),
            )
            index_digest, index_media_type = digest, media_type
            index_manifests = tuple(Descriptor.from_model(m) for m in index.manifests)
            chosen = entry.platform
            body, media_type, digest = self.get_manifest(
                ref, entry.digest, expected_size=entry.size
            )
            if media_type != entry.media_type:
                raise _fault(
                    ImageContentError,
                    ref,
                    f"{ref}: index entry {entry.digest} says {entry.media_type}, the manifest "
                    f"is {media_type}",
                    digest=str(entry.digest),
                )
        if media_type not in MANIFEST_TYPES:
            raise _fault(
                ImageContentError,
                ref,
                f"{ref}: expected an image manifest, got {media_type} (nested indexes are not "
                "supported)",
                digest=str(digest),
            )
        manifest = parse_manifest(
            body, media_type, registry=registry, repository=repository, digest=str(digest)
        )
        assert isinstance(manifest, ImageManifest)  # noqa: S101 - parse_manifest's contract
        if manifest.config.mediaType not in CONFIG_TYPES:
            raise _fault(
                ImageContentError,
                ref,
                f"{ref}: not a container image (config media type {manifest.config.mediaType})",
                digest=str(digest),
            )
        config_desc = Descriptor.from_model(manifest.config)
        config_bytes = self.fetch_blob(ref, config_desc)
        config = parse_config(
            config_bytes, registry=registry, repository=repository, digest=str(config_desc.digest)
        )
        own = config.platform()
        if chosen is not None and (chosen.os, chosen.architecture) != (own.os, own.architecture):
            raise _fault(
                ImageContentError,
                ref,
                f"{ref}: the index says {chosen} but the image config says {own}",
                digest=str(digest),
            )
        if chosen is None:
            if platform is not None and not platform.matches(own.os, own.architecture, own.variant):
                raise _fault(
                    PlatformNotFound,
                    ref,
                    f"no matching manifest for {platform} in {ref}: it is a single-platform "
                    f"image for {own}",
                    digest=str(digest),
                    hint=f"use --platform {own} or another reference",
                )
            chosen = own
        layers = tuple(Descriptor.from_model(layer) for layer in manifest.layers)
        diff_ids = tuple(config.rootfs.diff_ids)
        if len(diff_ids) != len(layers):
            raise _fault(
                ImageContentError,
                ref,
                f"{ref}: the manifest has {len(layers)} layers but the config lists "
                f"{len(diff_ids)} diff_ids",
                digest=str(digest),
            )
        return ResolvedImage(
            reference=ref,
            index_digest=index_digest,
            index_media_type=index_media_type,
            platform=chosen,
            manifest_digest=digest,
            manifest_media_type=media_type,
            manifest_bytes=body,
            manifest=manifest,
            config_digest=config_desc.digest,
            config_bytes=config_bytes,
            config=config,
            layers=layers,
            diff_ids=diff_ids,
            index_manifests=index_manifests,
        )


def _blob_link_race(method: str, url: httpx.URL, status: int, body: bytes) -> bool:
    """A manifest PUT refused 400 DIGEST_INVALID. imagekit sends manifests whose digest it
    computed from the very bytes sent, and blobs it uploaded before; distribution answers so
    when its check of a blob reads the blob's link file while another writer's commit of the
    same blob rewrites it (truncate, then write: imagekit.registry.upload.blob_write keeps
    this process's writers apart, not other processes'). One more PUT settles it either way:
    the registry checks everything again."""
    return (
        method == "PUT"
        and "/manifests/" in url.path
        and status == 400
        and b"DIGEST_INVALID" in body
    )


def is_attestation(desc: Descriptor) -> bool:
    """Entries that are never an image: unknown/unknown platforms and attestation manifests."""
    if desc.annotations and _ATTESTATION_ANNOTATION in desc.annotations:
        return True
    return desc.platform is not None and (desc.platform.os, desc.platform.architecture) == (
        "unknown",
        "unknown",
    )


def index_images(entries: Iterable[Descriptor]) -> list[Descriptor]:
    """The entries of an index that are images: those with a platform that are no
    attestation manifest, in the index's order."""
    return [e for e in entries if e.platform is not None and not is_attestation(e)]


def select_platform(
    index: ImageIndex,
    want: Platform,
    *,
    where: str,
    registry: str,
    repository: str | None = None,
    digest: str | None = None,
) -> Descriptor:
    """The index entry for ``want``; never another platform, never an attestation.

    An exact variant match wins; a request without variant takes the first entry of that
    os/architecture (an entry without variant before one with).
    """
    usable = index_images(Descriptor.from_model(m) for m in index.manifests)
    matches = [
        e
        for e in usable
        if e.platform is not None
        and want.matches(e.platform.os, e.platform.architecture, e.platform.variant)
    ]
    if not matches:
        available = ", ".join(sorted({str(e.platform) for e in usable})) or "none"
        raise PlatformNotFound(
            f"no matching manifest for {want} in {where} (available: {available})",
            registry=registry,
            repository=repository,
            digest=digest,
            hint="pick one of the available platforms with --platform",
        )
    matches.sort(
        key=lambda e: 0 if e.platform is not None and e.platform.variant == want.variant else 1
    )
    return matches[0]


def _split(pieces: Iterator[bytes], size: int) -> Iterator[bytes]:
    """Pass pieces through as they arrive, cutting any larger than ``size``."""
    for piece in pieces:
        if len(piece) <= size:
            yield piece
            continue
        for start in range(0, len(piece), size):
            yield piece[start : start + size]


def _fault(kind: type[_E], ref: Reference, message: str, **fields: Any) -> _E:
    """An error of ``kind`` about ``ref``, its registry and repository filled in from it."""
    return kind(message, registry=ref.registry, repository=ref.repository, **fields)


def _digest_of(body: bytes, algorithm: str) -> Digest:
    return Digest(f"{algorithm}:{hashlib.new(algorithm, body).hexdigest()}")


def _range_start(header: str | None, size: int) -> int | None:
    """The first byte of a ``Content-Range: bytes START-END/TOTAL``; None when malformed."""
    if not header:
        return None
    match = _CONTENT_RANGE.fullmatch(header.strip())
    if not match:
        return None
    start, end, total = int(match.group(1)), int(match.group(2)), match.group(3)
    if end < start or end >= size or (total != "*" and int(total) != size):
        return None
    return start
