"""A layer's bytes sniffed and inflated: gzip members and zstd frames in turn, each checked,
with the uncompressed size bounded and hashed.

The push-style inflaters that both the diffID (diffid.py, which pushes) and the readable
stream (reader.py, which pulls) drive; see the package's docstring for the facts they hold.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import cast

import zstandard
from isal import igzip_lib

from imagekit.errors import LayerFormatError
from imagekit.layers.media import Compression, LayerLimits, MediaTypePolicy
from imagekit.refs import Digest

# isal's stubs declare IsalError as an instance; at runtime it is the class raised.
_ISAL_ERRORS: tuple[type[BaseException], ...] = (
    cast(type[BaseException], igzip_lib.IsalError),
    OSError,
    EOFError,
)

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_SKIPPABLE_TAIL = b"\x2a\x4d\x18"  # bytes 1..3 of 0x184D2A5? little-endian
_OTHER_MAGICS = {b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz"}
SNIFF_BYTES = 6


def sniff_compression(head: bytes) -> Compression:
    """The compression a stream's first bytes announce; anything unrecognised is a tar.

    bzip2 and xz (which old Docker engines accepted) are refused: no OCI media type names
    them, and a registry copy carrying one is not a faithful copy.
    """
    if head.startswith(_GZIP_MAGIC):
        return Compression.GZIP
    if head.startswith(_ZSTD_MAGIC) or (
        len(head) >= 4 and head[0] & 0xF0 == 0x50 and head[1:4] == _SKIPPABLE_TAIL
    ):
        return Compression.ZSTD
    for magic, name in _OTHER_MAGICS.items():
        if head.startswith(magic):
            raise LayerFormatError(
                f"layer is {name}-compressed, which no OCI layer media type allows",
                hint="re-copy the image with gzip or zstd layers",
            )
    return Compression.NONE


class Inflater:
    """Push-style decompressor: feed compressed bytes, hand uncompressed slices to a sink."""

    def feed(self, data: memoryview) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        raise NotImplementedError


class _Plain(Inflater):
    def __init__(self, sink: Callable[[bytes | memoryview], None]) -> None:
        self._sink = sink

    def feed(self, data: memoryview) -> None:
        self._sink(data)

    def finish(self) -> None:
        return None


class _Gzip(Inflater):
    """Every gzip member in turn, through ISA-L (CRC32 and ISIZE of each member checked)."""

    # Inflate into slices that stay in the CPU cache until sha256 reads them: 4 MiB slices
    # made inflate+hash about 25% slower than 256 KiB ones (evidence/bench/).
    _OUT = 256 * 1024

    def __init__(self, sink: Callable[[bytes | memoryview], None]) -> None:
        self._sink = sink
        self._d = igzip_lib.IgzipDecompressor(igzip_lib.DECOMP_GZIP)
        self._fed_member = False
        self._between = b""  # bytes after a member end, not yet known to start a new one
        self.members = 0

    def feed(self, data: memoryview) -> None:
        pending: bytes | memoryview = data
        while pending:
            if self._d.eof:
                head = self._between + bytes(pending[: 2 - len(self._between)])
                pending = pending[2 - len(self._between) :]
                if len(head) < 2:
                    self._between = head
                    return
                self._between = b""
                if head != _GZIP_MAGIC:
                    raise LayerFormatError(
                        "bytes after a gzip member are not another gzip member",
                        hint="the blob carries trailing garbage; the engine would refuse it",
                    )
                self._d = igzip_lib.IgzipDecompressor(igzip_lib.DECOMP_GZIP)
                self._fed_member = False
                pending = _concat(head, pending)
            self._fed_member = True
            try:
                self._sink(self._d.decompress(pending, self._OUT))
                while not self._d.needs_input and not self._d.eof:
                    self._sink(self._d.decompress(b"", self._OUT))
            except _ISAL_ERRORS as exc:
                raise LayerFormatError(f"corrupt gzip stream: {exc}") from exc
            if self._d.eof:
                self.members += 1
                pending = self._d.unused_data
            else:
                pending = b""

    def finish(self) -> None:
        if self._between or (self._fed_member and not self._d.eof) or not self._fed_member:
            raise LayerFormatError("truncated gzip stream: the last member is incomplete")


class _Zstd(Inflater):
    """Every zstd frame in turn, skippable frames included, with a bounded window.

    Input is fed in 4 KiB slices: a zstd block can expand 32768-fold (a 4-byte RLE block
    becomes 128 KiB), so this caps one call's output at 128 MiB even for a hostile frame,
    and normal data costs nothing measurable.
    """

    _SLICE = 4096

    def __init__(self, sink: Callable[[bytes | memoryview], None], max_window: int) -> None:
        self._sink = sink
        self._dctx = zstandard.ZstdDecompressor(max_window_size=max_window)
        self._d = self._dctx.decompressobj(read_across_frames=False)
        self._in_frame = False
        self.frames = 0

    def feed(self, data: memoryview) -> None:
        for start in range(0, len(data), self._SLICE):
            self._feed_slice(bytes(data[start : start + self._SLICE]))

    def _feed_slice(self, piece: bytes) -> None:
        while piece:
            self._in_frame = True
            try:
                out = self._d.decompress(piece)
            except zstandard.ZstdError as exc:
                raise LayerFormatError(
                    f"corrupt or over-limit zstd stream: {exc}",
                    hint="frames whose window exceeds the limit are refused; raise "
                    "--max-zstd-window only for an image you trust",
                ) from exc
            if out:
                self._sink(out)
            if not self._d.eof:
                return
            self.frames += 1
            self._in_frame = False
            piece = self._d.unused_data
            self._d = self._dctx.decompressobj(read_across_frames=False)

    def finish(self) -> None:
        if self._in_frame or self.frames == 0:
            raise LayerFormatError("truncated zstd stream: the last frame is incomplete")


def _concat(head: bytes, rest: bytes | memoryview) -> bytes:
    return head + bytes(rest)


class _Bounded:
    """Counts the uncompressed bytes and refuses to go past the limit (a decompression bomb)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self.size = 0

    def _count(self, data: bytes | memoryview) -> None:
        self.size += len(data)
        if self.size > self._limit:
            raise LayerFormatError(
                f"uncompressed layer exceeds the limit of {self._limit} bytes; stopped there",
                hint="this looks like a decompression bomb; raise --max-layer-size only for "
                "an image you trust",
            )


class Hasher(_Bounded):
    """sha256 and size of the uncompressed stream, refusing to go past the limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self._h = hashlib.sha256()

    def __call__(self, data: bytes | memoryview) -> None:
        self._count(data)
        self._h.update(data)

    def digest(self) -> Digest:
        return Digest.from_hasher(self._h)


def start_inflater(
    head: bytes,
    declared: Compression,
    media_type: str,
    policy: MediaTypePolicy,
    sink: Callable[[bytes | memoryview], None],
    limits: LayerLimits,
) -> tuple[Inflater, Compression]:
    detected = sniff_compression(head)
    if detected != declared and policy == MediaTypePolicy.STRICT:
        raise LayerFormatError(
            f"media type {media_type} says {declared} but the bytes are {detected}",
            hint="the copy relabelled or recompressed the layer without fixing its media "
            "type; use --media-type-policy detect to verify it by its bytes anyway",
        )
    if detected is Compression.GZIP:
        return _Gzip(sink), detected
    if detected is Compression.ZSTD:
        return _Zstd(sink, limits.max_zstd_window), detected
    return _Plain(sink), detected
