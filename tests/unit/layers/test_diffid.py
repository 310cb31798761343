"""Decompression facts a diffID depends on: members, frames, lying media types, bombs."""

from __future__ import annotations

import gzip
import io
import resource
import shutil
import subprocess
from collections.abc import Iterator

import pytest
import zstandard
from isal import isal_zlib

from imagekit.errors import LayerFormatError, RegistryError
from imagekit.layers.diffid import diff_id_of_stream
from imagekit.layers.inflate import sniff_compression
from imagekit.layers.media import Compression, LayerLimits, MediaTypePolicy
from imagekit.layers.stages import RESTART, Restart
from tests.unit.layers.blobs import (
    GZ,
    OCI_GZ,
    OCI_TAR,
    OCI_ZSTD,
    MiB,
    chunked,
    make_tar,
    sha,
    skippable,
)

TAR = make_tar()


@pytest.mark.parametrize("chunk", [5, 4096, 1 << 20])
@pytest.mark.parametrize("threaded", [True, False])
def test_multi_member_gzip_hashes_every_member(chunk: int, threaded: bool) -> None:
    parts = [TAR[:1000], TAR[1000:200_000], TAR[200_000:]]
    blob = b"".join(gzip.compress(p, compresslevel=6) for p in parts)
    # Python's zlib alone stops after the first member: the trap this module avoids
    import zlib

    assert len(zlib.decompressobj(31).decompress(blob)) == 1000
    result = diff_id_of_stream(chunked(blob, chunk), media_type=GZ, threaded=threaded)
    assert result.diff_id == sha(TAR)
    assert result.uncompressed_bytes == len(TAR)
    assert result.compressed_bytes == len(blob)
    assert result.detected is Compression.GZIP and not result.notes


def test_gzip_trailing_garbage_truncation_and_crc_are_errors() -> None:
    blob = gzip.compress(TAR)
    with pytest.raises(LayerFormatError, match="not another gzip member"):
        diff_id_of_stream(chunked(blob + b"\0\0\0\0", 999), media_type=GZ)
    with pytest.raises(LayerFormatError, match="truncated gzip") as truncated:
        diff_id_of_stream(chunked(blob[:-5], 999), media_type=GZ)
    # The registry served these bytes and they are wrong: a check said no (1), like a wrong
    # diffID, not "could not finish" (3).
    assert truncated.value.exit_code == 1
    bad = bytearray(blob)
    bad[-7] ^= 0xFF  # inside the CRC32 trailer
    with pytest.raises(LayerFormatError, match="corrupt gzip"):
        diff_id_of_stream(chunked(bytes(bad), 999), media_type=GZ)


@pytest.mark.parametrize("chunk", [7, 4096, 1 << 20])
def test_multi_frame_zstd_with_skippable_frames(chunk: int) -> None:
    cctx = zstandard.ZstdCompressor(level=3)
    blob = (
        skippable(b"leading metadata", 0xA)
        + cctx.compress(TAR[:50_000])
        + skippable(b"")
        + cctx.compress(TAR[50_000:700_000])
        + skippable(b"x" * 100, 0xF)
        + cctx.compress(TAR[700_000:])
    )
    # python-zstandard's decompressobj alone stops after the first (skippable) frame
    assert zstandard.ZstdDecompressor().decompressobj().decompress(blob) == b""
    result = diff_id_of_stream(chunked(blob, chunk), media_type=OCI_ZSTD)
    assert result.diff_id == sha(TAR)
    assert result.detected is Compression.ZSTD


def test_reference_tools_agree_on_members_and_frames() -> None:
    """`gzip -dc` and `zstd -dc` (the reference decoders) give the diffIDs we compute."""
    cctx = zstandard.ZstdCompressor(level=3)
    streams = {
        "gzip": (GZ, gzip.compress(TAR[:400_000]) + gzip.compress(TAR[400_000:])),
        "zstd": (
            OCI_ZSTD,
            skippable(b"meta") + cctx.compress(TAR[:400_000]) + cctx.compress(TAR[400_000:]),
        ),
    }
    for tool, (media_type, blob) in streams.items():
        path = shutil.which(tool)
        assert path is not None, f"{tool} is part of the test environment"
        decoded = subprocess.run([path, "-dc"], input=blob, capture_output=True, check=True)
        ours = diff_id_of_stream(chunked(blob, 65536), media_type=media_type).diff_id
        assert ours == sha(decoded.stdout) == sha(TAR)


def test_truncated_zstd_is_an_error() -> None:
    blob = zstandard.ZstdCompressor().compress(TAR)
    with pytest.raises(LayerFormatError, match="truncated zstd"):
        diff_id_of_stream(chunked(blob[:-3], 1000), media_type=OCI_ZSTD)
    with pytest.raises(LayerFormatError, match="truncated zstd"):
        diff_id_of_stream(chunked(skippable(b"only metadata")[:-2], 1000), media_type=OCI_ZSTD)
    # a stream of skippable frames alone is valid zstd for empty content (as `zstd -d` says)
    empty = diff_id_of_stream([skippable(b"only metadata")], media_type=OCI_ZSTD)
    assert empty.diff_id == sha(b"")


def test_zstd_window_is_bounded() -> None:
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=29)
    out = io.BytesIO()
    # streaming without a known size keeps the 512 MiB window in the frame header
    with zstandard.ZstdCompressor(compression_params=params).stream_writer(
        out, closefd=False
    ) as writer:
        writer.write(TAR)
    blob = out.getvalue()
    assert zstandard.get_frame_parameters(blob).window_size == 1 << 29
    with pytest.raises(LayerFormatError, match="zstd"):
        diff_id_of_stream([blob], media_type=OCI_ZSTD)
    trusted = LayerLimits(max_zstd_window=1 << 29)
    assert diff_id_of_stream([blob], media_type=OCI_ZSTD, limits=trusted).diff_id == sha(TAR)


@pytest.mark.parametrize(
    ("blob", "detected"),
    [
        (zstandard.ZstdCompressor().compress(TAR), Compression.ZSTD),
        (TAR, Compression.NONE),
    ],
)
def test_media_type_gzip_but_bytes_differ(blob: bytes, detected: Compression) -> None:
    result = diff_id_of_stream(chunked(blob, 65536), media_type=OCI_GZ)
    assert result.diff_id == sha(TAR)
    assert result.declared is Compression.GZIP and result.detected is detected
    assert result.notes and f"says gzip but the bytes are {detected}" in result.notes[0]
    with pytest.raises(LayerFormatError, match=f"says gzip but the bytes are {detected}"):
        diff_id_of_stream(chunked(blob, 65536), media_type=OCI_GZ, policy=MediaTypePolicy.STRICT)


def test_plain_and_tiny_and_unknown() -> None:
    assert diff_id_of_stream(chunked(TAR, 10_000), media_type=OCI_TAR).diff_id == sha(TAR)
    assert diff_id_of_stream([b"abc"], media_type=OCI_TAR).diff_id == sha(b"abc")
    assert diff_id_of_stream([], media_type=OCI_TAR).diff_id == sha(b"")
    with pytest.raises(LayerFormatError, match="unknown layer media type"):
        diff_id_of_stream([TAR], media_type="application/vnd.in-toto+json")
    with pytest.raises(LayerFormatError, match="bzip2"):
        sniff_compression(b"BZh91AY")


def _zero_bomb_gzip(total: int) -> bytes:
    comp = isal_zlib.compressobj(1, isal_zlib.DEFLATED, 31)
    zeros = bytes(16 * MiB)
    parts = [comp.compress(zeros) for _ in range(total // len(zeros))]
    parts.append(comp.flush())
    return b"".join(parts)


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_gzip_bomb_is_cut_off_at_the_limit_without_filling_memory() -> None:
    # 8 GiB of zeros in about 8 MiB: several of the reader's 1 MiB batches, so stopping early
    # is visible at that granularity.
    bomb = _zero_bomb_gzip(8 << 30)
    assert len(bomb) < 16 * MiB
    before = _peak_rss_mib()
    seen = 0

    def progress(n: int) -> None:
        nonlocal seen
        seen += n

    limits = LayerLimits(max_uncompressed_bytes=256 * MiB)
    with pytest.raises(LayerFormatError, match="exceeds the limit of 268435456 bytes"):
        diff_id_of_stream(
            chunked(bomb, 64 * 1024), media_type=GZ, limits=limits, on_progress=progress
        )
    assert seen < len(bomb) // 4  # stopped reading near the limit, not at the end
    assert _peak_rss_mib() - before < 64


def test_zstd_bomb_is_cut_off_at_the_limit() -> None:
    out = io.BytesIO()
    with zstandard.ZstdCompressor(level=1).stream_writer(out, closefd=False) as writer:
        zeros = bytes(16 * MiB)
        for _ in range(64):  # 1 GiB
            writer.write(zeros)
    bomb = out.getvalue()
    before = _peak_rss_mib()
    limits = LayerLimits(max_uncompressed_bytes=128 * MiB)
    with pytest.raises(LayerFormatError, match="exceeds the limit"):
        diff_id_of_stream(chunked(bomb, 65536), media_type=OCI_ZSTD, limits=limits)
    assert _peak_rss_mib() - before < 200


def test_stream_errors_reach_the_caller_after_the_data() -> None:
    blob = gzip.compress(TAR)

    def failing() -> Iterator[bytes]:
        yield from chunked(blob, 4096)
        raise RegistryError("digest of the blob did not match", registry="r")

    with pytest.raises(RegistryError, match="did not match"):
        diff_id_of_stream(failing(), media_type=GZ)


def test_restart_throws_away_what_was_hashed() -> None:
    blob = gzip.compress(TAR)
    seen: list[int] = []
    # a resume, then the client restarts from byte 0 (the registry ignored Range)
    stream: list[bytes | Restart] = [blob[:5000], blob[5000:9000], RESTART, *chunked(blob, 999)]
    result = diff_id_of_stream(stream, media_type=GZ, on_progress=seen.append)
    assert result.diff_id == sha(TAR) and result.compressed_bytes == len(blob)
    assert sum(seen) == len(blob) and min(seen) < 0


def test_abandoned_stream_is_closed() -> None:
    closed = []

    def endless() -> Iterator[bytes]:
        try:
            while True:
                yield b"\x1f\x8b garbage that is not deflate" * 1000
        finally:
            closed.append(True)

    with pytest.raises(LayerFormatError):
        diff_id_of_stream(endless(), media_type=GZ)
    assert closed == [True]
