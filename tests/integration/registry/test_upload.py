"""Blob writes against the real registry: one process never writes one blob twice at once."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterable, Iterator

import pytest

from imagekit.refs import Digest, Reference
from imagekit.registry import Descriptor, RegistryClient, upload
from imagekit.registry.upload import BlobSource, CopyResult, push_blobs
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration

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


def _push(
    client: RegistryClient, repo: Reference, blob: BlobSource, into: list[CopyResult]
) -> None:
    into.append(push_blobs(client, repo, [blob]))


def test_a_second_writer_of_the_same_blob_waits_and_finds_it_there(
    registry: RunningRegistry,
) -> None:
    """While one thread uploads a blob, another thread (its own client) asked for the same
    blob must not start a second upload (two commits of one blob at once are what registries
    get wrong); once the first is done it finds the blob there. A different blob is not held
    up meanwhile."""
    repo = Reference(registry.host, f"imagekit-test/once-{secrets.token_hex(3)}")
    held, other = HeldBlob(), HeldBlob()
    other.release.set()
    first: list[CopyResult] = []
    second: list[CopyResult] = []
    unrelated: list[CopyResult] = []
    with RegistryClient() as client, RegistryClient() as other_client:
        uploading = threading.Thread(target=_push, args=(client, repo, held.source(), first))
        uploading.start()
        assert held.reading.wait(30), "the first upload never started"
        waiting = threading.Thread(target=_push, args=(other_client, repo, held.source(), second))
        waiting.start()
        # Another blob goes through while the first is held: the guard is per blob.
        _push(client, repo, other.source(), unrelated)
        time.sleep(0.5)  # the second writer's chance to start an upload it must not start
        assert waiting.is_alive() and held.reads == 1
        held.release.set()
        uploading.join(30)
        waiting.join(30)
        assert not uploading.is_alive() and not waiting.is_alive()
        assert client.fetch_blob(repo, held.descriptor) == held.data
    assert [r.blobs_uploaded for r in (*first, *second, *unrelated)] == [1, 0, 1]
    assert second[0].blobs_existing == 1
    assert held.reads == 1 and other.reads == 1
    assert upload._write_guards == {}  # nothing kept once no thread writes


def test_a_push_reports_each_blob_and_the_whole_to_the_progress_seam(
    registry: RunningRegistry,
) -> None:
    """Against the real registry: a blob uploaded and one already there are each one done
    line, the total counts both, and a second push finds both there."""
    import io

    from imagekit import progress
    from imagekit.progress import PlainReporter

    repo = Reference(registry.host, f"imagekit-test/progress-{secrets.token_hex(3)}")
    blobs = [HeldBlob(), HeldBlob()]
    for blob in blobs:
        blob.release.set()
    stream = io.StringIO()
    with RegistryClient() as client, progress.installed(PlainReporter(stream)):
        push_blobs(client, repo, [blobs[0].source()])
        push_blobs(client, repo, [b.source() for b in blobs])
    lines = stream.getvalue().splitlines()
    label = f"copying to {repo.name}"
    assert lines[0] == f"{label}: 1 item, 64.0 KiB"
    assert lines[1].startswith(f"{label}: done 1/1 {blobs[0].descriptor.digest.short} 64.0 KiB")
    assert lines[2] == f"{label}: 2 items, 128.0 KiB"
    there = f"{label}: already there "
    assert any(line.startswith(there) for line in lines[3:])
    assert lines[-1].endswith("overall 128.0 KiB / 128.0 KiB (100%)")
