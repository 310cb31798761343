"""One image, wherever it is kept: the interface the stages read an image through.

As go-containerregistry's ``v1.Image`` is implemented by ``remote``, ``daemon`` and
``tarball``, an :class:`Image` is one platform's image (chosen when it was opened: an index
is never an Image) whose manifest, config, diffIDs and layers are read the same way whoever
keeps it. A :class:`Layer` is one layer streamed once, its members read as they pass and its
diffID checked when the last byte was read. The implementations: imagekit.image.remote (a
registry), imagekit.image.layout (an OCI layout) and, for the part a comparison reads
(:class:`LayerSource`), imagekit.image.engine (the engine, through `docker save`). What
reads through them: the layer index (imagekit.image.index), the merged filesystem
(imagekit.image.view: the builders' overlay guard, the base bump, the SBOM), and the
comparison of two images (imagekit.layerdiff: the nightly flow).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from imagekit.image.members import LayerScan, Member, Tap
    from imagekit.layers.media import LayerDigest, LayerLimits
    from imagekit.refs import Digest
    from imagekit.registry.manifest import Descriptor, ImageConfig, ImageManifest


class Layer(Protocol):
    """One layer of an image, streamed once."""

    @property
    def desc(self) -> Descriptor:
        """The layer as the manifest lists it (compressed digest, size, media type)."""

    @property
    def diff_id(self) -> Digest:
        """The digest of its uncompressed tar, as the image's config names it."""

    def members(
        self,
        *,
        hash_content: Callable[[str, int], bool] | None = None,
        tap: Tap | None = None,
    ) -> Generator[Member, None, None]:
        """The layer's members (imagekit.image.members.iter_members); once exhausted, the
        layer's bytes were checked: DigestMismatch when they are not the layer the image
        names, LayerFormatError when they do not decompress."""

    def result(self) -> LayerDigest:
        """What the layer was read as; only once :meth:`members` was read to its end."""


class LayerSource(Protocol):
    """The part of an image a comparison of two images reads (imagekit.layerdiff): its
    layers' diffIDs and their scans."""

    @property
    def label(self) -> str:
        """How reports name the image (the reference as it was given)."""

    @property
    def random_access(self) -> bool:
        """True when one layer can be read without streaming the ones before it."""

    def diff_ids(self) -> Sequence[Digest]:
        """The diffIDs the image's config names, bottom layer first."""

    def scan(self, indices: Sequence[int]) -> dict[int, LayerScan]:
        """Scan the layers at these positions (each verified against its diffID)."""


class Image(LayerSource, Protocol):
    """One platform's image: its manifest, config, layers and their diffIDs."""

    @property
    def name(self) -> str:
        """Where the image is kept, as a message naming a missing layer says it."""

    def digest(self) -> Digest:
        """The digest of the image's manifest."""

    def manifest(self) -> ImageManifest: ...

    def config(self) -> ImageConfig: ...

    def layers(self) -> Sequence[Descriptor]:
        """The layers as the manifest lists them, bottom layer first."""

    def layer(
        self,
        index: int,
        *,
        limits: LayerLimits | None = None,
        on_bytes: Callable[[int], None] | None = None,
    ) -> Layer:
        """The layer at INDEX (bottom first), to be streamed once."""
