"""A reference resolved to one platform's image: its manifest and config, read and verified.

An index (or manifest list) is narrowed to one platform, never to another and never to an
attestation manifest; a single manifest is held to the platform asked for.

``index_images`` is the one filter of an index's entries, which the gate, the mirror, the
mirror's copy and ``plans bump`` (through ``resolve``) share. It keeps every entry a runtime
could select, as containerd selects them (core/images/image.go, ``Manifest``): an entry with
no ``platform`` is read from its image's config (os, architecture, variant); an annotation
(``vnd.docker.reference.type``) hides nothing; platforms are compared normalised
(``Platform.normalized``: x86_64 is amd64, linux/arm64 is linux/arm64/v8). Only an entry
whose platform is exactly unknown/unknown is an attestation manifest, and only such an entry
is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from imagekit import jsondoc
from imagekit.errors import (
    CheckFailed,
    ImageContentError,
    PlatformNotFound,
    RegistryNotFound,
    RegistryProtocolError,
)
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
from imagekit.registry.transport import MAX_MANIFEST_BYTES

DEFAULT_PLATFORM = Platform("linux", "amd64")


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


def resolve(
    session: Session,
    ref: Reference,
    platform: Platform | None = None,
    *,
    entry: Digest | None = None,
) -> ResolvedImage:
    """Resolve a reference to one platform's manifest and its verified config.

    An index (or manifest list) is narrowed to ``platform`` (default linux/amd64), or to
    its entry of digest ``entry``; entries with platform unknown/unknown, such as
    attestation manifests, are never chosen, and an entry that lists no platform is chosen
    by its config's. A single manifest is checked against ``platform`` when one is given.
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
        read = platforms_read(session, ref)
        if entry is not None:
            picked = _entry_of(index, entry, read, where=f"{ref}", ref=ref, digest=digest)
        else:
            picked = select_platform(
                index,
                want,
                where=f"{ref}",
                registry=registry,
                repository=repository,
                digest=str(digest),
                platform_of=read,
            )
        index_digest, index_media_type = digest, media_type
        index_manifests = tuple(Descriptor.from_model(m) for m in index.manifests)
        chosen = picked.platform
        desc = picked
        body, media_type, digest = get_manifest(session, ref, desc.digest, expected_size=desc.size)
        if media_type != desc.media_type:
            raise fault(
                ImageContentError,
                ref,
                f"{ref}: index entry {desc.digest} says {desc.media_type}, the manifest "
                f"is {media_type}",
                digest=str(desc.digest),
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
    if chosen is not None and not chosen.matches(own.os, own.architecture, None):
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


@dataclass(frozen=True)
class IndexImage:
    """An entry of an index that a runtime could select: its descriptor, and its platform as
    the index lists it or, where it lists none, as the image's config says (``from_config``).
    ``unreadable`` says why an entry's platform could not be told (an index nested in the
    index, a manifest that is no image, a config that names no platform); such an entry is
    never chosen, and whoever judges the index names it."""

    descriptor: Descriptor
    platform: Platform | None
    from_config: bool = False
    unreadable: str | None = None

    @property
    def digest(self) -> Digest:
        return self.descriptor.digest

    @property
    def chosen(self) -> Descriptor:
        """The entry's descriptor with its platform, read from the config where needed."""
        if self.from_config:
            return replace(self.descriptor, platform=self.platform)
        return self.descriptor

    def __str__(self) -> str:
        if self.platform is not None:
            said = f"{self.platform} (from its config)" if self.from_config else str(self.platform)
            why = f": {self.unreadable}" if self.unreadable is not None else ""
            return f"{said} {self.digest}{why}"
        return f"{self.digest}: {self.unreadable}"


#: Reads the platform of an entry the index lists none for: the platform, or why not.
PlatformOf = Callable[[Descriptor], Platform | str]


def is_attestation(desc: Descriptor) -> bool:
    """An attestation manifest: listed with the platform exactly unknown/unknown, which no
    runtime selects. An annotation (``vnd.docker.reference.type``) alone makes none: a
    runtime ignores it and would run the entry."""
    return desc.platform is not None and desc.platform.is_unknown


def index_images(
    entries: Iterable[Descriptor], platform_of: PlatformOf | None = None
) -> list[IndexImage]:
    """Every entry of an index a runtime could select (all but attestation manifests), in
    the index's order. An entry listing no platform is read by PLATFORM_OF (see
    :func:`platforms_read`); without it, such an entry is kept as unreadable. An index
    nested in the index is kept as unreadable: its images are not this index's entries."""
    found: list[IndexImage] = []
    for desc in entries:
        if is_attestation(desc):
            continue
        if desc.media_type in INDEX_TYPES:
            found.append(IndexImage(desc, desc.platform, unreadable="an index nested in the index"))
        elif desc.platform is not None:
            found.append(IndexImage(desc, desc.platform))
        elif platform_of is None:
            found.append(IndexImage(desc, None, unreadable="lists no platform (not read)"))
        else:
            read = platform_of(desc)
            if isinstance(read, str):
                found.append(IndexImage(desc, None, unreadable=read))
            elif read.is_unknown:
                continue  # its config says unknown/unknown: an attestation, as if listed
            else:
                found.append(IndexImage(desc, read, from_config=True))
    return found


def platforms_read(session: Session, ref: Reference) -> PlatformOf:
    """What :func:`index_images` reads an entry without a platform with: its manifest
    (fetched by digest, hash-checked) and its config's os, architecture and variant, as
    containerd matches such an entry. What cannot be read is said, not raised, unless the
    registry could not be asked at all."""

    def read(desc: Descriptor) -> Platform | str:
        try:
            body, media_type, digest = get_manifest(
                session, ref, desc.digest, expected_size=desc.size
            )
            if media_type not in MANIFEST_TYPES:
                return f"lists no platform and is {media_type}, not an image manifest"
            manifest = parse_manifest(
                body,
                media_type,
                registry=ref.registry,
                repository=ref.repository,
                digest=str(digest),
            )
            assert isinstance(manifest, ImageManifest)  # noqa: S101 - parse_manifest's contract
            config = fetch_blob(session, ref, Descriptor.from_model(manifest.config))
        except (CheckFailed, RegistryNotFound, RegistryProtocolError) as exc:
            return f"lists no platform and its image cannot be read ({exc.message})"
        try:
            document = jsondoc.loads(config, limit=MAX_MANIFEST_BYTES)
        except jsondoc.JsonRefused:
            document = None
        fields = document if isinstance(document, dict) else {}
        os_, arch, variant = (fields.get(k) for k in ("os", "architecture", "variant"))
        if not (isinstance(os_, str) and os_ and isinstance(arch, str) and arch):
            return "lists no platform and its config names none"
        return Platform(os_, arch, variant if isinstance(variant, str) and variant else None)

    return read


def _entry_of(
    index: ImageIndex,
    wanted: Digest,
    platform_of: PlatformOf,
    *,
    where: str,
    ref: Reference,
    digest: Digest,
) -> Descriptor:
    """The selectable entry of WANTED in INDEX (its platform read from its config where the
    index lists none); PlatformNotFound when it is none."""
    for image in index_images((Descriptor.from_model(m) for m in index.manifests), platform_of):
        if image.digest == wanted and image.unreadable is None:
            return image.chosen
    raise PlatformNotFound(
        f"{where} lists no image {wanted} a runtime could select",
        registry=ref.registry,
        repository=ref.repository,
        digest=str(digest),
    )


def select_platform(
    index: ImageIndex,
    want: Platform,
    *,
    where: str,
    registry: str,
    repository: str | None = None,
    digest: str | None = None,
    platform_of: PlatformOf | None = None,
) -> Descriptor:
    """The index entry for ``want``; never another platform, never an attestation.

    Platforms compare normalised (``Platform.matches``). An exact variant match wins; a
    request without variant takes the first entry of that os/architecture (an entry without
    variant before one with). As containerd does, an entry listing its platform is chosen
    before one that lists none, which is read by ``platform_of`` (left unchosen without it)
    and returned with the platform its config names.
    """
    descriptors = tuple(Descriptor.from_model(m) for m in index.manifests)
    listed = [
        e for e in index_images(descriptors) if e.platform is not None and e.unreadable is None
    ]
    matches = [e for e in listed if _matches(want, e)]
    if not matches and platform_of is not None:
        unlisted = [d for d in descriptors if d.platform is None]
        matches = [
            e
            for e in index_images(unlisted, platform_of)
            if e.unreadable is None and _matches(want, e)
        ]
    if not matches:
        # What a runtime could select, said as inspect says it: entries read from their
        # configs where the index lists no platform; what cannot be selected (an index nested
        # in the index, an entry whose platform could not be read) named apart, never listed
        # as available while being refused.
        entries = index_images(descriptors, platform_of)
        selectable = {str(e.platform) for e in entries if e.platform and e.unreadable is None}
        available = ", ".join(sorted(selectable)) or "none"
        refused = [str(e) for e in entries if e.unreadable is not None]
        if refused:
            available += "; not selectable: " + "; ".join(refused)
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
    return matches[0].chosen


def _matches(want: Platform, image: IndexImage) -> bool:
    platform = image.platform
    return platform is not None and want.matches(
        platform.os, platform.architecture, platform.variant
    )
