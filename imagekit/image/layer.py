"""One layer of an image, streamed once wherever the image is kept: :class:`LayerStream`,
the :class:`~imagekit.image.interface.Layer` every implementation hands out."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator

from imagekit.errors import DigestMismatch, LayerFormatError
from imagekit.image.members import LayerScan, Member, Tap, iter_members, scan_layer
from imagekit.layers.media import LayerDigest, LayerLimits
from imagekit.layers.reader import UncompressedReader, open_uncompressed
from imagekit.refs import Digest
from imagekit.registry.manifest import Descriptor


class LayerStream:
    """One layer streamed once from where its image is kept (BLOB gives its compressed bytes,
    checked against the descriptor's digest by whoever keeps it), its members read as they
    pass; its diffID checked when the last byte was read (the index and the SBOM read layers
    so). ``registry`` and ``repository`` name the place in a refusal."""

    def __init__(
        self,
        blob: Callable[[], Iterable[bytes]],
        desc: Descriptor,
        diff_id: Digest,
        *,
        registry: str,
        repository: str | None = None,
        limits: LayerLimits | None = None,
        on_bytes: Callable[[int], None] | None = None,
    ) -> None:
        self._blob, self._desc, self._diff_id = blob, desc, diff_id
        self._registry, self._repository = registry, repository
        self._limits, self._on_bytes = limits, on_bytes
        self._result: LayerDigest | None = None

    @property
    def desc(self) -> Descriptor:
        return self._desc

    @property
    def diff_id(self) -> Digest:
        return self._diff_id

    def _chunks(self) -> Iterator[bytes]:
        for chunk in self._blob():
            if self._on_bytes is not None:
                self._on_bytes(len(chunk))
            yield chunk

    def members(
        self,
        *,
        hash_content: Callable[[str, int], bool] | None = None,
        tap: Tap | None = None,
    ) -> Generator[Member, None, None]:
        """The layer's members (see imagekit.image.members.iter_members); once exhausted, the
        layer's bytes were checked: DigestMismatch when they are not the layer the image
        names, LayerFormatError when they do not decompress."""
        stream = UncompressedReader(
            self._chunks(), media_type=self._desc.media_type, limits=self._limits
        )
        try:
            # The reader itself, not a buffer over it: content no one asked to hash is
            # passed over without being copied (iter_members, UncompressedReader.skip).
            yield from iter_members(stream, hash_content=hash_content, tap=tap)
            result = stream.result()
        finally:
            stream.close()
        if result.diff_id != self._diff_id:
            raise DigestMismatch(
                f"layer {self._desc.digest} decompresses to {result.diff_id}, but the image's "
                f"config names {self._diff_id}",
                expected=str(self._diff_id),
                actual=str(result.diff_id),
                registry=self._registry,
                repository=self._repository,
                hint="the image is not self-consistent; do not use it",
            )
        self._result = result

    def result(self) -> LayerDigest:
        """What the layer was read as; only once :meth:`members` was read to its end."""
        if self._result is None:  # pragma: no cover - a caller's mistake
            raise LayerFormatError(f"layer {self._desc.digest} was not read to its end")
        return self._result


def scan_blob(
    chunks: Iterable[bytes],
    desc: Descriptor,
    diff_id: Digest,
    *,
    where: str,
    limits: LayerLimits,
) -> LayerScan:
    """The scan of one layer's compressed CHUNKS (imagekit.image.members.scan_layer),
    checked against its DIFF_ID; a layer that does not decompress is named by its digest
    and WHERE (``layer 3 (sha256:...) of IMAGE``)."""
    # closing the stream stops its reader thread, which closes a download
    with open_uncompressed(chunks, media_type=desc.media_type, limits=limits) as stream:
        try:
            return scan_layer(stream, expected=diff_id)
        except (OSError, EOFError) as exc:
            raise LayerFormatError(
                f"{where.format(digest=desc.digest)} does not decompress: {exc}"
            ) from exc
