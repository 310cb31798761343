"""Manifests read from a registry against protocol faults a real registry will not produce
(MockTransport): the bytes hashed as received, the headers and the media type checked."""

from __future__ import annotations

import json

import httpx
import pytest

from imagekit.errors import (
    DigestMismatch,
    ReferenceFormatError,
    RegistryProtocolError,
)
from imagekit.registry.transport import MAX_MANIFEST_BYTES
from tests.unit.registry.fakes import (
    OCI_MANIFEST,
    REF,
    REPO,
    FakeRegistry,
    Handler,
    make_image,
    sha,
    v1_refused,
)


@pytest.mark.parametrize(
    "bad",
    [
        "sha256:../../x",
        "sha256:" + "A" * 64,
        "sha256:" + "a" * 63,
        "sha256:" + "a" * 65,
        "md5:" + "a" * 32,
        "sha256:" + "a" * 62 + "/.",
    ],
)
def test_malformed_digests_never_reach_a_url(bad: str) -> None:
    fake = FakeRegistry()
    with fake.client() as client:
        with pytest.raises(ReferenceFormatError):
            client.get_manifest(REF, bad)
        with pytest.raises(ReferenceFormatError):
            client.blob_exists(REF, bad)
    assert fake.requests == []


def test_manifest_by_digest_is_hashed_over_exact_bytes() -> None:
    image = make_image()
    # Same JSON, different bytes (pretty-printed): its digest is of these bytes, not a re-dump.
    pretty = json.dumps(json.loads(image.manifest), indent=3).encode()
    fake = FakeRegistry()
    fake.add_manifest(REPO, sha(pretty), pretty, OCI_MANIFEST)
    with fake.client() as client:
        body, media_type, digest = client.get_manifest(REF, sha(pretty))
    assert body == pretty
    assert digest == sha(pretty) != image.manifest_digest
    assert media_type == OCI_MANIFEST


def test_manifest_bytes_not_matching_the_digest_asked_for() -> None:
    image, other = make_image(b"a"), make_image(b"b")
    fake = FakeRegistry()
    fake.add_manifest(REPO, image.manifest_digest, other.manifest, OCI_MANIFEST)
    with fake.client() as client, pytest.raises(DigestMismatch) as info:
        client.get_manifest(REF, image.manifest_digest)
    assert info.value.expected == image.manifest_digest
    assert info.value.actual == other.manifest_digest
    assert info.value.exit_code == 1


def _manifest_with_digest_header(digest: str) -> Handler:
    headers = {"Content-Type": OCI_MANIFEST, "Docker-Content-Digest": digest}
    return lambda request: httpx.Response(200, content=make_image().manifest, headers=headers)


def test_docker_content_digest_disagreeing_with_body() -> None:
    refused = v1_refused(DigestMismatch, _manifest_with_digest_header(sha(b"other")))
    assert refused.expected == sha(b"other")


def test_malformed_docker_content_digest_header() -> None:
    v1_refused(RegistryProtocolError, _manifest_with_digest_header("sha256:../../etc"))


def test_oversize_manifest_refused() -> None:
    huge = b'{"schemaVersion":2,"x":"' + b"a" * MAX_MANIFEST_BYTES + b'"}'
    v1_refused(
        RegistryProtocolError,
        lambda request: httpx.Response(200, content=huge, headers={"Content-Type": OCI_MANIFEST}),
        match="limit",
    )


def test_html_answer_is_a_protocol_error_with_an_excerpt() -> None:
    html = b"<html><body>Welcome to nginx!</body></html>"
    refused = v1_refused(
        RegistryProtocolError,
        lambda request: httpx.Response(200, content=html, headers={"Content-Type": "text/html"}),
    )
    assert "Welcome to nginx!" in refused.message
    assert refused.exit_code == 3
