"""A blob whose bytes a test hands out when it says so, for the registry's blob writes."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterable, Iterator

from imagekit.refs import Digest
from imagekit.registry import Descriptor
from imagekit.registry.blob_upload import BlobSource

LAYER = "application/vnd.oci.image.layer.v1.tar"


class HeldBlob:
    """A blob whose bytes are handed out only once ``release`` is set; counts its reads."""

    def __init__(self) -> None:
        self.data = secrets.token_bytes(64 << 10)
        self.descriptor = Descriptor(LAYER, Digest.of_bytes(self.data), len(self.data))
        self.reading = threading.Event()
        self.release = threading.Event()
        self.reads = 0

    def source(self) -> BlobSource:
        return BlobSource(self.descriptor, data=self.pieces)

    def pieces(self) -> Iterable[bytes]:
        self.reads += 1

        def held() -> Iterator[bytes]:
            self.reading.set()
            assert self.release.wait(30), "the test never released the blob"
            yield self.data

        return held()
