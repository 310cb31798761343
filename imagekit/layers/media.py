"""What a layer says it is: its media type's compression, the policy when the bytes disagree,
the bounds on decompressing it, and what hashing it found.

Apart from the inflaters and the streams (imagekit/layers/inflate.py, diffid.py, reader.py)
because every caller that only chooses limits or reads a media type needs these alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from imagekit.refs import Digest

GiB = 1 << 30
MiB = 1 << 20


class Compression(StrEnum):
    GZIP = "gzip"
    ZSTD = "zstd"
    NONE = "none"


class MediaTypePolicy(StrEnum):
    """What to do when a layer's media type and its magic bytes disagree.

    ``detect`` (the default) decompresses by the bytes, as the Docker engine and containerd
    do (they sniff the stream and ignore the media type), and reports the disagreement in the
    layer's notes. ``strict`` refuses the layer with an error.
    """

    DETECT = "detect"
    STRICT = "strict"


@dataclass(frozen=True)
class LayerLimits:
    """Bounds on one layer's decompression; the defaults fit any sane image layer."""

    # The largest layers of serving images are around 10 GiB uncompressed.
    max_uncompressed_bytes: int = 64 * GiB
    # zstd's own default limit (ZSTD_WINDOWLOG_LIMIT_DEFAULT = 27) is 128 MiB.
    max_zstd_window: int = 128 * MiB
    # Chunks held between the network reader and the hashing thread.
    queue_chunks: int = 16


_LAYER_MEDIA_TYPES: dict[str, tuple[Compression, bool]] = {
    # media type -> (declared compression, distributable)
    "application/vnd.docker.image.rootfs.diff.tar.gzip": (Compression.GZIP, True),
    "application/vnd.docker.image.rootfs.diff.tar": (Compression.NONE, True),
    "application/vnd.docker.image.rootfs.diff.tar.zstd": (Compression.ZSTD, True),
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip": (Compression.GZIP, False),
    "application/vnd.oci.image.layer.v1.tar": (Compression.NONE, True),
    "application/vnd.oci.image.layer.v1.tar+gzip": (Compression.GZIP, True),
    "application/vnd.oci.image.layer.v1.tar+zstd": (Compression.ZSTD, True),
    "application/vnd.oci.image.layer.nondistributable.v1.tar": (Compression.NONE, False),
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip": (Compression.GZIP, False),
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd": (Compression.ZSTD, False),
}


def layer_media_type(media_type: str) -> tuple[Compression, bool] | None:
    """(declared compression, distributable) for a known layer media type, else None."""
    return _LAYER_MEDIA_TYPES.get(media_type)


@dataclass(frozen=True)
class LayerDigest:
    """What hashing one layer found."""

    diff_id: Digest
    compressed_bytes: int
    uncompressed_bytes: int
    declared: Compression
    detected: Compression
    notes: tuple[str, ...] = ()
