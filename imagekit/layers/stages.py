"""The threads a layer's stages run on: a producer handing items through a bounded queue,
and the reader that pulls the blob's chunks off the network into one.

Apart from the inflaters because it is about overlapping work, not bytes: the diffID and
the readable stream both use it, and a chunk stream's ``RESTART`` marker is defined here.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from imagekit.layers.media import MiB

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


class Producer:
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


class ChunkReader(Producer):
    """A thread that pulls chunks from the blob stream into a bounded queue (see Producer)."""

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
