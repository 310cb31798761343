"""Layer blobs to diffIDs: decompress a compressed stream and hash what comes out, streaming.

A layer's diffID is the sha256 of its *uncompressed* tar (OCI image-spec, config.md,
"rootfs.diff_ids"). Two copies of an image whose compressed blobs differ are the same content
exactly when every diffID is equal, so this module is what `imagekit mirror` rests on.

Facts it gets right, each with a unit test:

- A gzip layer may be several gzip members back to back (pigz and some registries write
  them); Python's zlib stops after the first member, the engine's Go reader does not. We loop
  over members; bytes after a member that are not another member are an error, as in Go's
  ``compress/gzip`` multistream reader.
- A zstd layer may be several frames, and skippable frames (magic 0x184D2A5?) may sit among
  them (RFC 8878, section 3.1.2). python-zstandard's decompressobj stops after one frame, and
  ``read_across_frames`` never reports a truncated last frame, so we loop over frames
  ourselves and require the last one to be complete. The window is bounded
  (``max_window_size``), so a frame cannot make us allocate gigabytes of history.
- The media type can lie. The bytes are sniffed by their magic; what happens when the media
  type and the bytes disagree is an explicit policy (:class:`MediaTypePolicy`).
- A decompression bomb is cut off once the uncompressed size passes a limit, and memory stays
  bounded long before that: gzip output is produced in bounded slices, zstd input is fed in
  slices small enough that even an all-RLE frame cannot expand one beyond a few hundred MiB.

The network read and the inflate+hash overlap: a reader thread pulls chunks from the blob
stream into a bounded queue while the calling thread decompresses and hashes. hashlib, isal
and zstandard release the GIL on large buffers, so layers verified in parallel threads use
several cores.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import io
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import IO, Any, cast

import zstandard
from isal import igzip_lib

from imagekit.errors import LayerFormatError
from imagekit.refs import Digest

GiB = 1 << 30
# isal's stubs declare IsalError as an instance; at runtime it is the class raised.
_ISAL_ERRORS: tuple[type[BaseException], ...] = (
    cast(type[BaseException], igzip_lib.IsalError),
    OSError,
    EOFError,
)
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


@dataclass(frozen=True)
class LayerDigest:
    """What hashing one layer found."""

    diff_id: Digest
    compressed_bytes: int
    uncompressed_bytes: int
    declared: Compression
    detected: Compression
    notes: tuple[str, ...] = ()


class _Inflater:
    """Push-style decompressor: feed compressed bytes, hand uncompressed slices to a sink."""

    def feed(self, data: memoryview) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        raise NotImplementedError


class _Plain(_Inflater):
    def __init__(self, sink: Callable[[bytes | memoryview], None]) -> None:
        self._sink = sink

    def feed(self, data: memoryview) -> None:
        self._sink(data)

    def finish(self) -> None:
        return None


class _Gzip(_Inflater):
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


class _Zstd(_Inflater):
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


class _Hasher(_Bounded):
    """sha256 and size of the uncompressed stream, refusing to go past the limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self._h = hashlib.sha256()

    def __call__(self, data: bytes | memoryview) -> None:
        self._count(data)
        self._h.update(data)

    def digest(self) -> Digest:
        return Digest.from_hasher(self._h)


_DONE = object()


class Restart:
    """Marks, inside a chunk stream, that the blob starts over from byte 0.

    ``RegistryClient.stream_blob`` restarts a blob once when a resumed download hashes
    wrong or the registry ignores Range; everything hashed so far must then be thrown away.
    """


RESTART = Restart()
COALESCE_BYTES = 1 * MiB


class _Abandoned(Exception):  # noqa: N818 - a signal between two threads, never raised out
    """The consumer stopped reading: the producing thread unwinds and closes its source."""


class _Producer:
    """A thread that runs ``produce(put)``; what it puts comes out of iterating this object.

    The bounded queue is what overlaps one stage with the next (the network with
    inflate+hash, inflate+hash with the tar parser) while keeping memory flat. An exception
    from ``produce`` (a digest mismatch found at the end of the blob, exhausted retries, a
    corrupt stream, a bomb) is handed to the consumer, which re-raises it. ``stop()`` lets the
    consumer abandon the stream: ``put`` then raises :class:`_Abandoned` in the producing
    thread, which unwinds it and closes what it reads (releasing a connection instead of
    downloading the rest).
    """

    def __init__(self, produce: Callable[[Callable[[object], None]], None], depth: int) -> None:
        self._produce = produce
        self._q: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="layer-stage", daemon=True)
        self._thread.start()

    def _put(self, item: object) -> None:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.2)
            except queue.Full:
                continue
            return
        raise _Abandoned

    def _run(self) -> None:
        try:
            self._produce(self._put)
            self._put(_DONE)
        except _Abandoned:
            return
        except BaseException as exc:  # handed to the consumer, which re-raises it
            with contextlib.suppress(_Abandoned):
                self._put(exc)

    def __iter__(self) -> Iterator[Any]:
        while True:
            item = self._q.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def empty(self) -> bool:
        """True when nothing is waiting to be taken (the next item would block)."""
        return self._q.empty()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class _Reader(_Producer):
    """A thread that pulls chunks from the blob stream into a bounded queue (see _Producer)."""

    def __init__(self, chunks: Iterable[bytes | Restart], depth: int) -> None:
        self._chunks = chunks
        super().__init__(self._pull, depth)

    def _pull(self, put: Callable[[object], None]) -> None:
        iterator = iter(self._chunks)
        # The network hands over 64 KiB pieces. Passing them on one by one makes the hashing
        # thread take the GIL back after every inflate call, and each hand-over can wait a
        # whole switch interval while this thread runs Python; batching them into
        # COALESCE_BYTES pieces cuts those hand-overs sixteenfold.
        pending = bytearray()
        try:
            for chunk in iterator:
                if isinstance(chunk, Restart):
                    # Hand over what came before, in order: the consumer counts it, then
                    # throws it away at the restart (restarts are rare; order is simpler).
                    if pending:
                        put(bytes(pending))
                    pending.clear()
                    put(chunk)
                    continue
                if not pending and len(chunk) >= COALESCE_BYTES:
                    put(chunk)  # already large: no copy
                    continue
                pending += chunk
                if len(pending) >= COALESCE_BYTES:
                    put(bytes(pending))
                    pending.clear()
            if pending:
                put(bytes(pending))
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> Iterator[bytes | Restart]:
        return super().__iter__()


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
    hasher = _Hasher(limits.max_uncompressed_bytes)
    reader = _Reader(chunks, limits.queue_chunks) if threaded else None
    source: Iterable[bytes | Restart] = reader if reader is not None else chunks
    compressed = 0
    held: list[bytes] = []  # chunks seen before the first SNIFF_BYTES arrived
    inflater: _Inflater | None = None
    detected = Compression.NONE
    notes: list[str] = []
    try:
        for chunk in source:
            if isinstance(chunk, Restart):
                if on_progress is not None:
                    on_progress(-compressed)
                hasher = _Hasher(limits.max_uncompressed_bytes)
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
                inflater, detected = _start(
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
            inflater, detected = _start(head, declared, media_type, policy, hasher, limits)
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


def _start(
    head: bytes,
    declared: Compression,
    media_type: str,
    policy: MediaTypePolicy,
    sink: Callable[[bytes | memoryview], None],
    limits: LayerLimits,
) -> tuple[_Inflater, Compression]:
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
        self._hasher = _Hasher(self._limits.max_uncompressed_bytes)
        self._chunks = chunks
        self._inflater: _Inflater | None = None
        self._detected = Compression.NONE
        self._input = memoryview(b"")
        self._held = b""  # the first bytes, until SNIFF_BYTES have arrived
        self._output: collections.deque[bytes | memoryview] = collections.deque()
        self._compressed = 0
        self._ended = False
        self._put: Callable[[object], None] | None = None  # the inflate stage's hand-over
        self._stage: _Producer | None = None
        self._source: Iterator[bytes | Restart] = iter(chunks)
        self._inflated: Iterator[bytes | memoryview] = iter(())
        if threaded:
            self._stage = _Producer(self._inflate_all, self._limits.queue_chunks)
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
        self._inflater, self._detected = _start(
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
        network = _Reader(self._chunks, self._limits.queue_chunks)
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
