"""Pushing blobs against the real registry: what the copy reports while it works."""

from __future__ import annotations

import secrets

import pytest

from imagekit.refs import Reference
from imagekit.registry import RegistryClient
from imagekit.registry.upload import push_blobs
from tests.integration.registry.held import HeldBlob
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration


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
