"""A reference resolved to one platform's image: its manifest and config, read and verified.

An index (or manifest list) is narrowed to one platform, never to another and never to an
attestation manifest (``index_images`` is the one filter of an index's image entries);
a single manifest is held to the platform asked for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from imagekit.errors import ImageContentError, PlatformNotFound
from imagekit.refs import Digest, Platform, Reference
from imagekit.registry.blobs import fetch_blob
from imagekit.registry.documents import get_manifest
from imagekit.registry.manifest import (
    CONFIG_TYPES,
    INDEX_TYPES,
    MANIFEST_TYPES,
    Descriptor,
    ImageConfig,
    ImageIndex,
    ImageManifest,
    parse_config,
    parse_index,
    parse_manifest,
)
from imagekit.registry.session import Session, fault

DEFAULT_PLATFORM = Platform("linux", "amd64")
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


def resolve(session: Session, ref: Reference, platform: Platform | None = None) -> ResolvedImage:
    """Resolve a reference to one platform's manifest and its verified config.

    An index (or manifest list) is narrowed to ``platform`` (default linux/amd64);
    entries with platform unknown/unknown, such as attestation manifests, are never
    chosen. A single manifest is checked against ``platform`` when one is given.
    """
    registry, repository = ref.registry, ref.repository
    body, media_type, digest = get_manifest(session, ref, ref.identifier)
    index_digest: Digest | None = None
    index_media_type: str | None = None
    index_manifests: tuple[Descriptor, ...] = ()
    chosen: Platform | None = None
    if media_type in INDEX_TYPES:
        index = parse_index(body, media_type, ref, str(digest))
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
        body, media_type, digest = get_manifest(
            session, ref, entry.digest, expected_size=entry.size
        )
        if media_type != entry.media_type:
            raise fault(
                ImageContentError,
                ref,
                f"{ref}: index entry {entry.digest} says {entry.media_type}, the manifest "
                f"is {media_type}",
                digest=str(entry.digest),
            )
    if media_type not in MANIFEST_TYPES:
        raise fault(
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
        raise fault(
            ImageContentError,
            ref,
            f"{ref}: not a container image (config media type {manifest.config.mediaType})",
            digest=str(digest),
        )
    config_desc = Descriptor.from_model(manifest.config)
    config_bytes = fetch_blob(session, ref, config_desc)
    config = parse_config(
        config_bytes, registry=registry, repository=repository, digest=str(config_desc.digest)
    )
    own = config.platform()
    if chosen is not None and (chosen.os, chosen.architecture) != (own.os, own.architecture):
        raise fault(
            ImageContentError,
            ref,
            f"{ref}: the index says {chosen} but the image config says {own}",
            digest=str(digest),
        )
    if chosen is None:
        if platform is not None and not platform.matches(own.os, own.architecture, own.variant):
            raise fault(
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
        raise fault(
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
