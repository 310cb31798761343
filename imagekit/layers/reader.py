"""A layer's uncompressed tar as a readable stream, hashed for its diffID as it is read.

The pull path, for tar parsers (the layer comparison, the registry builder's layer index);
the same inflaters, limits and sniffing as diffid.py, turned around.
"""

from __future__ import annotations

import collections
import io
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from imagekit.errors import LayerFormatError
from imagekit.layers.inflate import SNIFF_BYTES, Hasher, Inflater, start_inflater
from imagekit.layers.media import (
    Compression,
    LayerDigest,
    LayerLimits,
    MediaTypePolicy,
    layer_media_type,
)
from imagekit.layers.stages import COALESCE_BYTES, ChunkReader, Producer, Restart


class UncompressedReader(io.RawIOBase):
    """A layer's uncompressed tar as a readable stream, decompressed and hashed as it is read.

    :func:`diff_id_of_stream` pushes bytes through a hasher; tar parsers (``tarfile``: the
    layer comparison of imagekit.layerdiff, the registry builder's layer index) pull.
    This is the same inflaters, limits and magic sniffing turned around.

    Threaded (the default), the work runs as three stages on three threads joined by bounded
    queues: the network (and the compressed digest), inflate and the diffID's sha256, and the
    caller's own reading (for the index: the tar parser and each file's sha256). Each of the
    three hashes runs while the others do, so a layer is read at the speed of its slowest
    stage instead of the sum of them; hashlib, ISA-L and zstandard release the GIL on large
    buffers. The inflate thread feeds whole network chunks and hands its output on in the
    inflater's bounded slices through a queue that blocks when full, so what waits to be
    read stays bounded even for a decompression bomb, and the size limit stops a bomb
    outright.

    Unthreaded, ``readinto`` feeds compressed input to the inflater in :attr:`FEED`-byte
    pieces until it has output (deflate expands at most about 1032-fold: one piece makes at
    most some 16 MiB).

    The stream ends only after the inflater has checked the last member or frame; then
    :meth:`result` gives the diffID. A chunk stream that verifies the compressed digest at
    its end (``RegistryClient.stream_blob``) raises from ``readinto`` when it is wrong, so
    reading to the end proves both digests. Restarts (:data:`RESTART`) cannot be undone
    once a reader has consumed bytes: one raises LayerFormatError.
    """

    FEED = 16 * 1024

    def __init__(
        self,
        chunks: Iterable[bytes | Restart],
        *,
        media_type: str,
        limits: LayerLimits | None = None,
        policy: MediaTypePolicy = MediaTypePolicy.DETECT,
        threaded: bool = True,
    ) -> None:
        super().__init__()
        self._limits = limits or LayerLimits()
        known = layer_media_type(media_type)
        if known is None:
            raise LayerFormatError(
                f"unknown layer media type {media_type!r}",
                hint="only docker v2s2 and OCI tar layers (plain, gzip, zstd) can be read",
            )
        self._media_type, self._declared, self._policy = media_type, known[0], policy
        self._hasher = Hasher(self._limits.max_uncompressed_bytes)
        self._chunks = chunks
        self._inflater: Inflater | None = None
        self._detected = Compression.NONE
        self._input = memoryview(b"")
        self._held = b""  # the first bytes, until SNIFF_BYTES have arrived
        self._output: collections.deque[bytes | memoryview] = collections.deque()
        self._compressed = 0
        self._ended = False
        self._put: Callable[[object], None] | None = None  # the inflate stage's hand-over
        self._stage: Producer | None = None
        self._source: Iterator[bytes | Restart] = iter(chunks)
        self._inflated: Iterator[bytes | memoryview] = iter(())
        if threaded:
            self._stage = Producer(self._inflate_all, self._limits.queue_chunks)
            self._inflated = iter(self._stage)

    def readable(self) -> bool:
        return True

    def _emit(self, data: bytes | memoryview) -> None:
        self._hasher(data)
        if not len(data):
            return
        if self._put is None:
            self._output.append(data)
        elif len(data) <= COALESCE_BYTES:
            self._put(data)
        else:
            # A zstd slice can inflate to 128 MiB: handed over in pieces, the queue's bound
            # holds, and this thread waits with one such output alive, not a queue of them.
            view = memoryview(data)
            for start in range(0, len(view), COALESCE_BYTES):
                self._put(view[start : start + COALESCE_BYTES])

    def _start(self, head: bytes) -> None:
        self._inflater, self._detected = start_inflater(
            head[:SNIFF_BYTES],
            self._declared,
            self._media_type,
            self._policy,
            self._emit,
            self._limits,
        )

    def _accept(self, chunk: bytes | Restart) -> memoryview:
        """One chunk of the blob, counted; what to feed the inflater (empty while the first
        SNIFF_BYTES, which decide the inflater, are still arriving)."""
        if isinstance(chunk, Restart):
            raise LayerFormatError(
                "the blob started over from byte 0 after part of it was read",
                hint="run the command again",
            )
        self._compressed += len(chunk)
        if self._inflater is not None:
            return memoryview(chunk)
        self._held += chunk
        if len(self._held) < SNIFF_BYTES:
            return memoryview(b"")
        self._start(self._held)
        held, self._held = self._held, b""
        return memoryview(held)

    def _last(self) -> memoryview:
        """At the end of the blob: a blob shorter than the sniff window is decided on what
        there is; returns what is left to feed."""
        if self._inflater is not None:
            return memoryview(b"")
        self._start(self._held)
        held, self._held = self._held, b""
        return memoryview(held)

    def _inflate_all(self, put: Callable[[object], None]) -> None:
        """The inflate stage (its own thread): the whole blob through the inflater, whose
        output slices go to ``put``, which blocks while the reader is behind."""
        self._put = put
        network = ChunkReader(self._chunks, self._limits.queue_chunks)
        try:
            for chunk in network:
                data = self._accept(chunk)
                if data:
                    assert self._inflater is not None  # noqa: S101 - started by _accept
                    self._inflater.feed(data)
            rest = self._last()
            assert self._inflater is not None  # noqa: S101 - started by _last
            if rest:
                self._inflater.feed(rest)
            self._inflater.finish()
        finally:
            network.stop()

    def _pull(self) -> bool:
        """Unthreaded: feed the inflater one more piece of input; False once it has ended."""
        while not self._input:
            if self._ended:
                return False
            chunk = next(self._source, None)
            if chunk is None:
                self._input = self._last()
                if self._input:
                    break
                assert self._inflater is not None  # noqa: S101 - started by _last
                self._inflater.finish()
                self._ended = True
                return bool(self._output)
            self._input = self._accept(chunk)
        assert self._inflater is not None  # noqa: S101 - the loop above starts it
        piece, self._input = self._input[: self.FEED], self._input[self.FEED :]
        self._inflater.feed(piece)
        return True

    def _more(self) -> bool:
        """Wait for more output; False once the stream has ended."""
        if self._stage is None:
            return self._pull()
        if self._ended:
            return False
        data = next(self._inflated, None)
        if data is None:
            self._ended = True
            return False
        self._output.append(data)
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while not self._output:
            if not self._more():
                return 0
        filled = 0
        while self._output and filled < len(view):
            data = self._output[0]
            n = min(len(data), len(view) - filled)
            view[filled : filled + n] = data[:n]
            filled += n
            if n == len(data):
                self._output.popleft()
            else:
                self._output[0] = memoryview(data)[n:]
            if not self._output and filled < len(view) and self._stage is not None:
                # Fill a large read from what the inflate stage has ready, without waiting.
                ready = self._ready()
                if ready is not None:
                    self._output.append(ready)
        return filled

    def read(self, size: int | None = -1) -> bytes:
        """``size`` bytes, fewer only at the end (all that is left when negative). One
        inflater slice that holds them is handed over as it is, without the copy into a
        caller's buffer that ``readinto`` makes."""
        if size is None or size < 0:
            return b"".join(iter(lambda: self.read(COALESCE_BYTES), b""))
        pieces: list[bytes | memoryview] = []
        self._take(size, pieces.append)
        if len(pieces) == 1 and isinstance(pieces[0], bytes):
            return pieces[0]
        return b"".join(pieces)

    def skip(self, size: int) -> int:
        """Pass over ``size`` bytes (fewer only at the end), hashed for the diffID as every
        byte is, but copied nowhere; returns how many."""
        return self._take(size, None)

    def _take(self, size: int, keep: Callable[[bytes | memoryview], None] | None) -> int:
        taken = 0
        while taken < size:
            if not self._output and not self._more():
                break
            data = self._output[0]
            n = min(len(data), size - taken)
            if n == len(data):
                self._output.popleft()
            else:
                view = memoryview(data)
                data, self._output[0] = view[:n], view[n:]
            if keep is not None:
                keep(data)
            taken += n
        return taken

    def _ready(self) -> bytes | memoryview | None:
        assert self._stage is not None  # noqa: S101 - threaded only
        if self._stage.empty():
            return None
        data = next(self._inflated, None)
        if data is None:
            self._ended = True
        return data

    def result(self) -> LayerDigest:
        """The diffID and sizes; only once the stream was read to its end."""
        if not self._ended or self._output:
            raise LayerFormatError("the layer was not read to its end; no diffID")
        notes: tuple[str, ...] = ()
        if self._detected != self._declared:
            notes = (
                f"media type {self._media_type} says {self._declared} but the bytes are "
                f"{self._detected}; decompressed as {self._detected}",
            )
        return LayerDigest(
            diff_id=self._hasher.digest(),
            compressed_bytes=self._compressed,
            uncompressed_bytes=self._hasher.size,
            declared=self._declared,
            detected=self._detected,
            notes=notes,
        )

    def close(self) -> None:
        """Stop reading the blob: the stages close the chunk stream (releasing its
        connection instead of downloading the rest); without them, it is closed here."""
        if self._stage is not None:
            self._stage.stop()
            self._stage = None
        else:
            close = getattr(self._source, "close", None)
            if close is not None:
                close()
        super().close()


def open_uncompressed(
    chunks: Iterable[bytes | Restart],
    *,
    media_type: str,
    limits: LayerLimits | None = None,
    policy: MediaTypePolicy = MediaTypePolicy.DETECT,
) -> IO[bytes]:
    """A buffered stream of a layer's uncompressed bytes (see :class:`UncompressedReader`);
    use the class itself where the diffID it computed on the way is wanted."""
    reader = UncompressedReader(chunks, media_type=media_type, limits=limits, policy=policy)
    return io.BufferedReader(reader, buffer_size=COALESCE_BYTES)
