"""The pull-style reader: a layer's uncompressed tar read as a stream, hashed as it goes."""

from __future__ import annotations

import gzip
import io
import resource
import time
from collections.abc import Callable

import pytest
import zstandard

from imagekit.errors import LayerFormatError
from imagekit.layers.diffid import diff_id_of_stream
from imagekit.layers.media import LayerLimits
from imagekit.layers.stages import RESTART, Restart
from tests.unit.layers.blobs import OCI_GZ, OCI_TAR, OCI_ZSTD, MiB, chunked, make_tar, sha


def _read_all(stream: io.RawIOBase) -> bytes:
    return io.BufferedReader(stream, buffer_size=MiB).read()


@pytest.mark.parametrize(
    ("media_type", "compress"),
    [
        (OCI_GZ, lambda t: gzip.compress(t[:1000], mtime=0) + gzip.compress(t[1000:], mtime=0)),
        (OCI_ZSTD, lambda t: zstandard.ZstdCompressor().compress(t)),
        (OCI_TAR, lambda t: t),
    ],
)
def test_the_uncompressed_stream_reads_what_the_hasher_hashes(
    media_type: str, compress: Callable[[bytes], bytes]
) -> None:
    from imagekit.layers.reader import UncompressedReader

    tar = make_tar(3)
    blob = compress(tar)
    stream = UncompressedReader(chunked(blob, 7000), media_type=media_type)
    assert _read_all(stream) == tar
    result = stream.result()
    stream.close()
    pushed = diff_id_of_stream(chunked(blob, 7000), media_type=media_type)
    assert result.diff_id == pushed.diff_id == sha(tar)
    assert result.compressed_bytes == len(blob)


def test_the_uncompressed_stream_stops_a_bomb_with_little_memory() -> None:
    from imagekit.layers.reader import UncompressedReader

    bomb = gzip.compress(b"\0" * (256 * MiB), compresslevel=9)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    stream = UncompressedReader(
        chunked(bomb, MiB), media_type=OCI_GZ, limits=LayerLimits(max_uncompressed_bytes=64 * MiB)
    )
    with pytest.raises(LayerFormatError, match="exceeds the limit"):
        _read_all(stream)
    stream.close()
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 40


def test_the_uncompressed_stream_refuses_a_restart_and_a_short_read() -> None:
    from imagekit.layers.reader import UncompressedReader

    tar = make_tar(4)
    blob = gzip.compress(tar, mtime=0)
    chunks: list[bytes | Restart] = [blob[:5000], RESTART, blob]
    stream = UncompressedReader(iter(chunks), media_type=OCI_GZ)
    with pytest.raises(LayerFormatError, match="started over"):
        _read_all(stream)
    stream.close()
    partial = UncompressedReader(chunked(blob, 1000), media_type=OCI_GZ)
    partial.read(10)
    with pytest.raises(LayerFormatError, match="not read to its end"):
        partial.result()
    partial.close()


@pytest.mark.parametrize("threaded", [True, False])
def test_the_uncompressed_stream_reads_whole_pieces_and_skips_without_losing_the_diff_id(
    threaded: bool,
) -> None:
    from imagekit.layers.reader import UncompressedReader

    tar = make_tar(5)
    blob = gzip.compress(tar[:7000], mtime=0) + gzip.compress(tar[7000:], mtime=0)
    stream = UncompressedReader(chunked(blob, 5000), media_type=OCI_GZ, threaded=threaded)
    assert stream.read(1000) == tar[:1000]
    assert stream.skip(300_000) == 300_000  # passed over, still hashed
    assert stream.read(9000) == tar[301_000:310_000]  # across member boundaries
    assert stream.read() == tar[310_000:]
    assert stream.skip(10) == 0 and stream.read(10) == b""
    assert stream.result().diff_id == sha(tar)
    stream.close()


def test_the_uncompressed_stream_stops_a_zstd_bomb_with_bounded_memory() -> None:
    """Each 4 KiB of an all-RLE zstd frame inflates to 128 MiB; the inflate thread hands that
    on in 1 MiB pieces through its bounded queue, so a reader slower than it holds about two
    such outputs, not a queue of them (about 900 MiB here when whole outputs were queued)."""
    from imagekit.layers.reader import UncompressedReader

    packer, zero = zstandard.ZstdCompressor(level=19).compressobj(), bytes(MiB)
    bomb = b"".join(packer.compress(zero) for _ in range(1024)) + packer.flush()  # 1 GiB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    stream = UncompressedReader(
        chunked(bomb, MiB),
        media_type=OCI_ZSTD,
        limits=LayerLimits(max_uncompressed_bytes=768 * MiB),
    )
    time.sleep(1)  # the reader falls behind the inflate thread
    buffered = io.BufferedReader(stream, buffer_size=MiB)
    with pytest.raises(LayerFormatError, match="exceeds the limit"):  # noqa: PT012
        while buffered.read(MiB):  # what is read is dropped, as a tar parser's skip does
            pass
    stream.close()
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 400
