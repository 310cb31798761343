"""An image in an OCI image layout (go-containerregistry's ``layout``): the layout's Image.

A layout is a folder: ``oci-layout`` (its version), ``index.json`` (the images it holds) and
``blobs/ALG/HEX`` (every manifest, config and layer by its digest), as skopeo (``oci:DIR``),
BuildKit (``--output type=oci``) and the engine's ``docker save`` from Docker 25 on write it
(https://github.com/opencontainers/image-spec/blob/main/image-layout.md). ``index.json`` may
list the image's manifests itself or one index that does (one level of nesting, as BuildKit
and skopeo write it); the platform is chosen there as the registry's resolve chooses it
(imagekit.registry.resolve.select_platform: never an attestation, an entry without a
platform read from its config). Every blob is read by its digest and checked against it and
its size: a manifest or config that is not the bytes its descriptor names is refused, and a
layer's compressed digest is checked as it streams past, its diffID when it ends.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from imagekit import jsondoc
from imagekit.errors import DigestMismatch, ImageContentError
from imagekit.image.layer import LayerStream, scan_blob
from imagekit.image.members import LayerScan
from imagekit.layers.media import LayerLimits
from imagekit.refs import Digest, Platform
from imagekit.registry.manifest import (
    INDEX_TYPES,
    MANIFEST_TYPES,
    OCI_INDEX,
    Descriptor,
    ImageConfig,
    ImageIndex,
    ImageManifest,
    parse_config,
    parse_manifest,
)
from imagekit.registry.resolve import DEFAULT_PLATFORM, select_platform

_CHUNK = 1 << 20
#: The most bytes of a manifest, an index or a config read from a layout (layers stream).
MAX_DOCUMENT_BYTES = 4 << 20


@dataclass(frozen=True)
class _Blobs:
    """The layout's ``blobs/`` folder: each blob read by its digest and checked against it."""

    root: Path

    def path(self, desc: Descriptor) -> Path:
        return self.root / "blobs" / desc.digest.algorithm / desc.digest.hex

    def document(self, desc: Descriptor) -> bytes:
        """A small blob (a manifest, an index, a config), whole, checked."""
        if desc.size > MAX_DOCUMENT_BYTES:
            raise self._refused(desc, f"is {desc.size} bytes, more than a document may be")
        return b"".join(self.stream(desc))

    def stream(self, desc: Descriptor) -> Iterator[bytes]:
        """A blob's bytes as they are read; DigestMismatch at the end when they are not the
        blob the descriptor names (its digest and size)."""
        hasher = hashlib.new(desc.digest.algorithm)
        size = 0
        try:
            with open(self.path(desc), "rb") as blob:
                while chunk := blob.read(_CHUNK):
                    size += len(chunk)
                    hasher.update(chunk)
                    yield chunk
        except FileNotFoundError:
            raise self._refused(desc, "is not in the layout") from None
        actual = Digest(f"{desc.digest.algorithm}:{hasher.hexdigest()}")
        if actual != desc.digest or size != desc.size:
            raise DigestMismatch(
                f"{self.root}: blob {desc.digest} holds {size} bytes hashing to {actual}, "
                f"its descriptor says {desc.size} bytes",
                expected=str(desc.digest),
                actual=str(actual),
                registry=str(self.root),
                hint="the layout is not self-consistent; do not use it",
            )

    def _refused(self, desc: Descriptor, problem: str) -> ImageContentError:
        return ImageContentError(
            f"{self.root}: blob {desc.digest} {problem}", registry=str(self.root)
        )


def _index_of(root: Path) -> ImageIndex:
    """The layout's ``index.json`` (after its ``oci-layout`` marker), as an index model."""
    where = str(root)
    try:
        marker = jsondoc.loads((root / "oci-layout").read_bytes(), limit=MAX_DOCUMENT_BYTES)
        body = (root / "index.json").read_bytes()
    except FileNotFoundError as exc:
        raise ImageContentError(
            f"{root}: not an OCI image layout (no {Path(exc.filename).name})",
            registry=where,
            hint="an OCI layout has oci-layout, index.json and blobs/",
        ) from None
    if not isinstance(marker, dict) or "imageLayoutVersion" not in marker:
        raise ImageContentError(f"{root}: oci-layout names no imageLayoutVersion", registry=where)
    index = parse_manifest(body, OCI_INDEX, registry=where)
    assert isinstance(index, ImageIndex)  # noqa: S101 - parse_manifest's contract
    return index


@dataclass(frozen=True)
class LayoutImage:
    """One platform's image in an OCI layout; any layer can be read on its own."""

    root: Path
    manifest_desc: Descriptor
    image_manifest: ImageManifest
    image_config: ImageConfig
    label: str
    random_access: bool = True
    limits: LayerLimits = field(default_factory=LayerLimits)

    @classmethod
    def open(cls, root: Path, platform: Platform | None = None) -> LayoutImage:
        """The image of PLATFORM (default linux/amd64) the layout at ROOT holds."""
        blobs, where = _Blobs(root), str(root)
        index = _index_of(root)
        entries = [Descriptor.from_model(m) for m in index.manifests]
        if len(entries) == 1 and entries[0].media_type in INDEX_TYPES:
            nested = parse_manifest(
                blobs.document(entries[0]), entries[0].media_type, registry=where,
                digest=str(entries[0].digest),
            )  # fmt: skip
            assert isinstance(nested, ImageIndex)  # noqa: S101 - parse_manifest's contract
            index = nested

        def platform_of(desc: Descriptor) -> Platform | str:
            if desc.media_type not in MANIFEST_TYPES:
                return f"a {desc.media_type}, not an image manifest"
            return cls._read(root, desc).image_config.platform()

        chosen = select_platform(
            index, platform or DEFAULT_PLATFORM, where=where, registry=where,
            platform_of=platform_of,
        )  # fmt: skip
        return cls._read(root, chosen)

    @classmethod
    def _read(cls, root: Path, desc: Descriptor) -> LayoutImage:
        blobs, where = _Blobs(root), str(root)
        manifest = parse_manifest(
            blobs.document(desc), desc.media_type, registry=where, digest=str(desc.digest)
        )
        if not isinstance(manifest, ImageManifest):
            raise ImageContentError(
                f"{root}: {desc.digest} is not an image manifest", registry=where
            )
        config_desc = Descriptor.from_model(manifest.config)
        config = parse_config(
            blobs.document(config_desc), registry=where, digest=str(config_desc.digest)
        )
        if len(config.rootfs.diff_ids) != len(manifest.layers):
            raise ImageContentError(
                f"{root}: the manifest {desc.digest} has {len(manifest.layers)} layers but the "
                f"config lists {len(config.rootfs.diff_ids)} diff_ids",
                registry=where,
            )
        return cls(root, desc, manifest, config, f"oci:{os.fspath(root)}")

    @property
    def name(self) -> str:
        return str(self.root)

    def digest(self) -> Digest:
        return self.manifest_desc.digest

    def manifest(self) -> ImageManifest:
        return self.image_manifest

    def config(self) -> ImageConfig:
        return self.image_config

    def layers(self) -> Sequence[Descriptor]:
        return tuple(Descriptor.from_model(layer) for layer in self.image_manifest.layers)

    def diff_ids(self) -> Sequence[Digest]:
        return tuple(self.image_config.rootfs.diff_ids)

    def layer(
        self,
        index: int,
        *,
        limits: LayerLimits | None = None,
        on_bytes: Callable[[int], None] | None = None,
    ) -> LayerStream:
        desc = self.layers()[index]
        return LayerStream(
            lambda: _Blobs(self.root).stream(desc),
            desc,
            self.diff_ids()[index],
            registry=str(self.root),
            limits=limits,
            on_bytes=on_bytes,
        )

    def scan(self, indices: Sequence[int]) -> dict[int, LayerScan]:
        layers, diff_ids = self.layers(), self.diff_ids()
        return {
            index: scan_blob(
                _Blobs(self.root).stream(layers[index]),
                layers[index],
                diff_ids[index],
                where=f"layer {index} ({{digest}}) of {self.label}",
                limits=self.limits,
            )
            for index in indices
        }
