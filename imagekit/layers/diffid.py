"""A layer's diffID from its compressed chunk stream: decompressed and hashed as it arrives.

The push path, which `imagekit mirror` verifies copies with; the pull path (a readable
stream, for tar parsers) is reader.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from imagekit.errors import LayerFormatError
from imagekit.layers.inflate import SNIFF_BYTES, Hasher, Inflater, start_inflater
from imagekit.layers.media import (
    Compression,
    LayerDigest,
    LayerLimits,
    MediaTypePolicy,
    layer_media_type,
)
from imagekit.layers.stages import ChunkReader, Restart


def diff_id_of_stream(
    chunks: Iterable[bytes | Restart],
    *,
    media_type: str,
    limits: LayerLimits | None = None,
    policy: MediaTypePolicy = MediaTypePolicy.DETECT,
    on_progress: Callable[[int], None] | None = None,
    threaded: bool = True,
) -> LayerDigest:
    """Decompress a layer's compressed byte stream and return its diffID.

    ``chunks`` is the blob as it arrives (e.g. ``RegistryClient.stream_blob``, which checks
    the compressed digest itself and raises at the end if it is wrong); it is consumed on a
    reader thread unless ``threaded`` is false. A :data:`RESTART` item throws away what was
    hashed so far. ``on_progress`` gets the number of compressed bytes in each chunk (minus
    all of them at a restart), called from the hashing thread. Raises LayerFormatError for
    unknown media types, lying media types under the strict policy, corrupt or truncated
    streams, over-wide zstd windows and layers over the size limit.
    """
    limits = limits or LayerLimits()
    known = layer_media_type(media_type)
    if known is None:
        raise LayerFormatError(
            f"unknown layer media type {media_type!r}",
            hint="only docker v2s2 and OCI tar layers (plain, gzip, zstd) can be verified",
        )
    declared = known[0]
    hasher = Hasher(limits.max_uncompressed_bytes)
    reader = ChunkReader(chunks, limits.queue_chunks) if threaded else None
    source: Iterable[bytes | Restart] = reader if reader is not None else chunks
    compressed = 0
    held: list[bytes] = []  # chunks seen before the first SNIFF_BYTES arrived
    inflater: Inflater | None = None
    detected = Compression.NONE
    notes: list[str] = []
    try:
        for chunk in source:
            if isinstance(chunk, Restart):
                if on_progress is not None:
                    on_progress(-compressed)
                hasher = Hasher(limits.max_uncompressed_bytes)
                compressed, inflater, detected = 0, None, Compression.NONE
                held.clear()
                continue
            compressed += len(chunk)
            if on_progress is not None:
                on_progress(len(chunk))
            if inflater is None:
                held.append(chunk)
                if compressed < SNIFF_BYTES:
                    continue
                inflater, detected = start_inflater(
                    b"".join(held)[:SNIFF_BYTES], declared, media_type, policy, hasher, limits
                )
                for earlier in held:
                    inflater.feed(memoryview(earlier))
                held.clear()
                continue
            inflater.feed(memoryview(chunk))
        if inflater is None:
            # a blob shorter than the sniff window: decide on what there is
            head = b"".join(held)
            inflater, detected = start_inflater(head, declared, media_type, policy, hasher, limits)
            inflater.feed(memoryview(head))
        inflater.finish()
    finally:
        if reader is not None:
            reader.stop()
    if detected != declared:
        notes.append(
            f"media type {media_type} says {declared} but the bytes are {detected}; "
            f"decompressed as {detected}, as the Docker engine and containerd would"
        )
    return LayerDigest(
        diff_id=hasher.digest(),
        compressed_bytes=compressed,
        uncompressed_bytes=hasher.size,
        declared=declared,
        detected=detected,
        notes=tuple(notes),
    )
