"""Blob writes against the real registry: one process never writes one blob twice at once."""

from __future__ import annotations

import secrets
import threading
import time

import pytest

from imagekit.refs import Reference
from imagekit.registry import RegistryClient, blob_write
from imagekit.registry.blob_upload import BlobSource
from imagekit.registry.upload import CopyResult, push_blobs
from tests.integration.registry.held import HeldBlob
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration


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
    assert blob_write._write_guards == {}  # nothing kept once no thread writes
