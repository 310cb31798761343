"""Manifests and indexes as a registry serves them: the exact bytes, checked.

``get_manifest`` returns a document's bytes, media type and digest only once the bytes hash to
the digest asked for (and to any Docker-Content-Digest the registry announced) and the media
type is unambiguous; ``head_manifest`` asks what a tag serves now with one HEAD where it can.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from imagekit.errors import (
    DigestMismatch,
    ReferenceFormatError,
    RegistryNotFound,
    RegistryProtocolError,
)
from imagekit.refs import Digest, Reference, is_tag
from imagekit.registry.manifest import ACCEPT, detect_media_type
from imagekit.registry.session import Session, fault
from imagekit.registry.transport import MAX_MANIFEST_BYTES, content_length, excerpt, read_limited


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


def get_manifest(
    session: Session,
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
            raise fault(
                RegistryProtocolError,
                ref,
                f"{ref.name}: manifest {asked} is declared as {expected_size} bytes, over "
                f"the {MAX_MANIFEST_BYTES}-byte limit",
                digest=str(wanted),
            )
        limit = expected_size

    def fetch() -> tuple[bytes, httpx.Headers]:
        response = session.request(
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

    body, response_headers = session.policy.run(
        fetch,
        registry=registry,
        what=f"GET manifest {asked} from {ref.name}",
        repository=repository,
        digest=str(wanted) if wanted else None,
    )
    if wanted is not None:
        actual = _digest_of(body, wanted.algorithm)
        if actual != wanted:
            raise fault(
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
            raise fault(
                RegistryProtocolError,
                ref,
                f"{ref.name}: malformed Docker-Content-Digest header {excerpt(header.encode())}",
            ) from exc
        actual = _digest_of(body, announced.algorithm)
        if actual != announced:
            raise fault(
                DigestMismatch,
                ref,
                f"{ref.name}: Docker-Content-Digest says {announced} but the manifest bytes "
                f"of {asked} hash to {actual}",
                expected=str(announced),
                actual=str(actual),
            )
    if expected_size is not None and len(body) != expected_size:
        raise fault(
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
    session: Session, ref: Reference, tag_or_digest: str, *, accept: Sequence[str] = ACCEPT
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
    ``Session.request``.
    """
    if ":" in tag_or_digest:
        Digest(tag_or_digest)  # refuses a malformed digest before any URL is formed
    elif not is_tag(tag_or_digest):
        raise ReferenceFormatError(f"malformed tag {tag_or_digest!r}")
    try:
        response = session.request(
            "HEAD", ref, f"manifests/{tag_or_digest}", headers={"Accept": ", ".join(accept)}
        )
    except RegistryNotFound:
        body, served_type, digest = get_manifest(session, ref, tag_or_digest, accept=accept)
        return ManifestHead(digest, served_type, len(body), from_get=True)
    header = (response.headers.get("Docker-Content-Digest") or "").strip()
    media_type = (response.headers.get("Content-Type") or "").split(";")[0].strip() or None
    size = content_length(response)
    if header:
        try:
            return ManifestHead(Digest(header), media_type, size, from_get=False)
        except ReferenceFormatError as exc:
            raise fault(
                RegistryProtocolError,
                ref,
                f"{ref.name}: malformed Docker-Content-Digest header on HEAD of "
                f"{tag_or_digest}: {excerpt(header.encode())}",
            ) from exc
    body, media_type, digest = get_manifest(session, ref, tag_or_digest, accept=accept)
    return ManifestHead(digest, media_type, len(body), from_get=True)


def _digest_of(body: bytes, algorithm: str) -> Digest:
    return Digest(f"{algorithm}:{hashlib.new(algorithm, body).hexdigest()}")
