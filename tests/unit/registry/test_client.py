"""RegistryClient against protocol faults a real registry will not produce (MockTransport)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from imagekit.errors import (
    DigestMismatch,
    ImageContentError,
    ImagekitError,
    PlatformNotFound,
    ReferenceFormatError,
    RegistryNotFound,
    RegistryProtocolError,
    RegistryUnauthorized,
    RetriesExhausted,
)
from imagekit.refs import Digest, parse_platform, parse_reference
from imagekit.registry import Descriptor
from imagekit.registry.transport import MAX_MANIFEST_BYTES
from tests.unit.registry.fakes import (
    HOST,
    OCI_MANIFEST,
    Chunks,
    DropAfter,
    FakeRegistry,
    Handler,
    Image,
    blob_response,
    dumps,
    entry,
    index_of,
    make_image,
    sha,
)

REPO = "team/app"
REF = parse_reference(f"{HOST}/{REPO}:v1")


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


E = TypeVar("E", bound=ImagekitError)


def _v1_refused(
    error: type[E], answer: Handler, match: str | None = None, docker_config: Path | None = None
) -> E:
    """What get_manifest(REF, "v1") raises when the registry answers every request with this."""
    fake = FakeRegistry()
    fake.overrides[f"/v2/{REPO}/manifests/v1"] = answer
    with (
        fake.client(docker_config=docker_config) as client,
        pytest.raises(error, match=match) as info,
    ):
        client.get_manifest(REF, "v1")
    return info.value


def _manifest_with_digest_header(digest: str) -> Handler:
    headers = {"Content-Type": OCI_MANIFEST, "Docker-Content-Digest": digest}
    return lambda request: httpx.Response(200, content=make_image().manifest, headers=headers)


def test_docker_content_digest_disagreeing_with_body() -> None:
    refused = _v1_refused(DigestMismatch, _manifest_with_digest_header(sha(b"other")))
    assert refused.expected == sha(b"other")


def test_malformed_docker_content_digest_header() -> None:
    _v1_refused(RegistryProtocolError, _manifest_with_digest_header("sha256:../../etc"))


def test_oversize_manifest_refused() -> None:
    huge = b'{"schemaVersion":2,"x":"' + b"a" * MAX_MANIFEST_BYTES + b'"}'
    _v1_refused(
        RegistryProtocolError,
        lambda request: httpx.Response(200, content=huge, headers={"Content-Type": OCI_MANIFEST}),
        match="limit",
    )


def test_oversize_error_body_refused() -> None:
    big = b"x" * (2 << 20)
    _v1_refused(
        RegistryProtocolError, lambda request: httpx.Response(404, content=big), match="limit"
    )


def test_html_answer_is_a_protocol_error_with_an_excerpt() -> None:
    html = b"<html><body>Welcome to nginx!</body></html>"
    refused = _v1_refused(
        RegistryProtocolError,
        lambda request: httpx.Response(200, content=html, headers={"Content-Type": "text/html"}),
    )
    assert "Welcome to nginx!" in refused.message
    assert refused.exit_code == 3


def test_index_child_not_matching_its_entry() -> None:
    amd64, impostor = make_image(b"amd64"), make_image(b"impostor")
    index = index_of(entry(amd64))
    fake = FakeRegistry()
    fake.add_manifest(REPO, "v1", index, "application/vnd.oci.image.index.v1+json")
    # The registry serves other bytes under the child's digest.
    fake.add_manifest(REPO, amd64.manifest_digest, impostor.manifest, OCI_MANIFEST)
    with fake.client() as client, pytest.raises(DigestMismatch):
        client.resolve(REF)


@pytest.mark.parametrize(
    ("change", "match", "error"),
    [
        pytest.param(
            lambda image: {"size": len(image.manifest) - 5},
            "limit",
            RegistryProtocolError,
            id="longer-than-its-size",
        ),
        pytest.param(
            lambda image: {"mediaType": "application/vnd.docker.distribution.manifest.v2+json"},
            "says",
            ImageContentError,  # the bytes are the digest's: the image itself disagrees
            id="media-type-differs",
        ),
    ],
)
def test_index_child_must_agree_with_its_entry(
    change: Callable[[Image], dict[str, object]], match: str, error: type[ImagekitError]
) -> None:
    amd64 = make_image(b"amd64")
    child = {**entry(amd64), **change(amd64)}
    fake = FakeRegistry()
    fake.add_manifest(REPO, "v1", index_of(child), "application/vnd.oci.image.index.v1+json")
    fake.add_image(REPO, amd64)
    with fake.client() as client, pytest.raises(error, match=match):
        client.resolve(REF)


def test_attestation_entries_never_chosen_and_missing_platform_is_clear() -> None:
    arm = make_image(b"arm", arch="arm64", variant="v8")
    attestation = make_image(b"att", arch="unknown")
    index = index_of(
        # First in the index and claiming nothing but an attestation: must not be taken.
        entry(
            attestation,
            os="unknown",
            arch="unknown",
            annotations={"vnd.docker.reference.type": "attestation-manifest"},
        ),
        entry(arm, arch="arm64", variant="v8"),
    )
    fake = FakeRegistry()
    fake.add_manifest(REPO, "v1", index, "application/vnd.oci.image.index.v1+json")
    fake.add_image(REPO, arm)
    fake.add_image(REPO, attestation)
    with fake.client() as client:
        with pytest.raises(PlatformNotFound) as info:
            client.resolve(REF)  # default linux/amd64
        assert info.value.exit_code == 1  # the index answered, without that platform
        assert str(info.value.message).startswith("no matching manifest for linux/amd64 in ")
        assert "(available: linux/arm64/v8)" in info.value.message
        with pytest.raises(PlatformNotFound):
            client.resolve(REF, parse_platform("unknown/unknown"))
        resolved = client.resolve(REF, parse_platform("linux/arm64"))
    assert resolved.manifest_digest == arm.manifest_digest
    assert str(resolved.platform) == "linux/arm64/v8"


def test_single_manifest_checked_against_requested_platform() -> None:
    image = make_image()
    fake = FakeRegistry()
    fake.add_image(REPO, image, tag="v1")
    with fake.client() as client:
        assert str(client.resolve(REF).platform) == "linux/amd64"
        with pytest.raises(PlatformNotFound, match="no matching manifest for linux/arm64"):
            client.resolve(REF, parse_platform("linux/arm64"))


def _desc(data: bytes, size: int | None = None) -> Descriptor:
    return Descriptor(
        "application/octet-stream", Digest(sha(data)), len(data) if size is None else size
    )


RESUMABLE = bytes(range(256)) * 400
DROP_AT = 30000


def _drops_once(
    fake: FakeRegistry,
    then: Callable[[httpx.Request, int], httpx.Response],
    headers: dict[str, str] | None = None,
) -> list[str | None]:
    """Serve RESUMABLE cut off at DROP_AT, then ``then(request, call number)``.

    Returns the Range header of every request, in order, as the handler saw them.
    """
    ranges: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        ranges.append(request.headers.get("Range"))
        if len(ranges) == 1:
            return httpx.Response(200, stream=DropAfter(RESUMABLE, DROP_AT), headers=headers)
        return then(request, len(ranges))

    fake.overrides[f"/v2/{REPO}/blobs/{sha(RESUMABLE)}"] = handler
    return ranges


def _partial(start: int, content: bytes) -> httpx.Response:
    """A 206 claiming ``content`` is RESUMABLE from byte ``start`` to its end."""
    content_range = f"bytes {start}-{len(RESUMABLE) - 1}/{len(RESUMABLE)}"
    return httpx.Response(206, content=content, headers={"Content-Range": content_range})


ZEROED_TAIL = b"\0" * (len(RESUMABLE) - DROP_AT)  # a resumed tail from another (bad) replica


def test_blob_longer_than_descriptor_stops_at_size() -> None:
    data = b"x" * 1000
    fake = FakeRegistry()
    # Chunked, no Content-Length: the excess shows only while reading.
    fake.overrides[f"/v2/{REPO}/blobs/{sha(data)}"] = lambda request: httpx.Response(
        200, stream=Chunks(data + b"extra" * 1000, size=100)
    )
    received = 0
    with fake.client() as client, pytest.raises(RegistryProtocolError, match="longer than"):
        for chunk in client.stream_blob(REF, _desc(data), chunk_size=100):
            received += len(chunk)
    assert received == len(data)


def test_blob_announced_longer_than_descriptor() -> None:
    data = b"x" * 1000
    fake = FakeRegistry()
    fake.overrides[f"/v2/{REPO}/blobs/{sha(data)}"] = lambda request: httpx.Response(
        200, content=data + b"extra"
    )
    with fake.client() as client, pytest.raises(RegistryProtocolError, match="announces 1005"):
        b"".join(client.stream_blob(REF, _desc(data)))


def test_blob_shorter_than_descriptor() -> None:
    data = b"x" * 1000
    fake = FakeRegistry()
    fake.blobs[f"/v2/{REPO}/blobs/{sha(data)}"] = data[:900]
    with fake.client() as client, pytest.raises(RegistryProtocolError, match="ended after 900"):
        b"".join(client.stream_blob(REF, _desc(data)))


def test_blob_with_wrong_bytes_is_a_digest_mismatch() -> None:
    data = b"x" * 1000
    fake = FakeRegistry()
    fake.blobs[f"/v2/{REPO}/blobs/{sha(data)}"] = b"y" * 1000
    with fake.client() as client, pytest.raises(DigestMismatch):
        b"".join(client.stream_blob(REF, _desc(data)))


def test_dropped_blob_resumes_with_range() -> None:
    data = RESUMABLE
    fake = FakeRegistry()
    calls = _drops_once(
        fake, lambda request, _: blob_response(request, data), {"Content-Length": str(len(data))}
    )
    with fake.client() as client:
        assert b"".join(client.stream_blob(REF, _desc(data))) == data
    assert calls == [None, "bytes=30000-"]


def test_resume_accepts_only_206_starting_where_it_stopped() -> None:
    data = RESUMABLE
    fake = FakeRegistry()
    # Claims a range starting elsewhere.
    _drops_once(fake, lambda request, _: _partial(100, data[100:]))
    with (
        fake.client() as client,
        pytest.raises(RegistryProtocolError, match="resuming at byte 30000"),
    ):
        b"".join(client.stream_blob(REF, _desc(data)))


def test_digest_mismatch_after_resume_restarts_once_from_zero() -> None:
    data = RESUMABLE

    def then(request: httpx.Request, call: int) -> httpx.Response:
        return _partial(DROP_AT, ZEROED_TAIL) if call == 2 else blob_response(request, data)

    fake = FakeRegistry()
    calls = _drops_once(fake, then)
    restarts: list[int] = []
    out = bytearray()

    def on_restart() -> None:
        restarts.append(len(out))
        out.clear()

    with fake.client() as client:
        for chunk in client.stream_blob(REF, _desc(data), on_restart=on_restart):
            out.extend(chunk)
    assert bytes(out) == data
    assert restarts == [len(data)]
    assert calls == [None, "bytes=30000-", None]


def test_digest_mismatch_after_resume_without_restart_hook_raises() -> None:
    data = RESUMABLE
    fake = FakeRegistry()
    _drops_once(fake, lambda request, _: _partial(DROP_AT, ZEROED_TAIL))
    with fake.client() as client, pytest.raises(DigestMismatch, match="resumed"):
        b"".join(client.stream_blob(REF, _desc(data)))


def test_endless_drops_are_bounded() -> None:
    data = bytes(range(256)) * 400
    fake = FakeRegistry()
    fake.overrides[f"/v2/{REPO}/blobs/{sha(data)}"] = lambda request: httpx.Response(
        200, stream=DropAfter(b"", 0)
    )
    with fake.client(max_attempts=3) as client, pytest.raises(RetriesExhausted):
        b"".join(client.stream_blob(REF, _desc(data)))


def test_content_encoding_never_changes_hashed_bytes() -> None:
    # A gzip layer served with Content-Encoding: gzip (as some object stores do): the
    # bytes hashed must be the gzip bytes on the wire, not the inflated tar.
    image = make_image()
    fake = FakeRegistry()
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Accept-Encoding"))
        return httpx.Response(200, content=image.layer, headers={"Content-Encoding": "gzip"})

    fake.overrides[f"/v2/{REPO}/blobs/{sha(image.layer)}"] = handler
    desc = _desc(image.layer)
    with fake.client() as client:
        got = b"".join(client.stream_blob(REF, desc))
    assert got == image.layer
    assert gzip.decompress(got) != got
    assert seen == ["identity"]


def test_unauthorized_without_credentials_names_registry_and_login(tmp_path: Path) -> None:
    refused = _v1_refused(
        RegistryUnauthorized,
        lambda request: httpx.Response(
            401,
            headers={"WWW-Authenticate": 'Basic realm="x"'},
            json={"errors": [{"code": "UNAUTHORIZED", "message": "authentication required"}]},
        ),
        docker_config=tmp_path,
    )
    assert HOST in refused.message
    assert refused.hint is not None and f"docker login {HOST}" in refused.hint
    assert refused.exit_code == 3


def test_schema1_refused_clearly() -> None:
    fake = FakeRegistry()
    body = dumps({"schemaVersion": 1, "name": REPO, "tag": "v1", "fsLayers": []})
    fake.add_manifest(REPO, "v1", body, "application/vnd.docker.distribution.manifest.v1+prettyjws")
    with fake.client() as client, pytest.raises(RegistryProtocolError, match="schema 1"):
        client.resolve(REF)


def test_not_found_and_blob_exists() -> None:
    image = make_image()
    fake = FakeRegistry()
    fake.add_image(REPO, image, tag="v1")
    with fake.client() as client:
        assert client.blob_exists(REF, sha(image.layer))
        assert not client.blob_exists(REF, sha(b"absent"))
        with pytest.raises(RegistryNotFound, match="NOT_FOUND"):
            client.get_manifest(REF, "v2")


def test_ping_refuses_a_web_server() -> None:
    fake = FakeRegistry()
    fake.overrides["/v2/"] = lambda request: httpx.Response(
        200,
        content=b"<!doctype html><title>Router login</title>",
        headers={"Content-Type": "text/html"},
    )
    with fake.client() as client, pytest.raises(RegistryProtocolError, match="Router login"):
        client.ping(HOST)


def test_oversize_config_refused_before_download() -> None:
    image = make_image()
    manifest = json.loads(image.manifest)
    manifest["config"]["size"] = MAX_MANIFEST_BYTES + 1
    body = dumps(manifest)
    fake = FakeRegistry()
    fake.add_image(REPO, image)
    fake.add_manifest(REPO, "v1", body, OCI_MANIFEST)
    with fake.client() as client, pytest.raises(RegistryProtocolError, match="over the"):
        client.resolve(REF)
    assert not any("/blobs/" in r.url.path for r in fake.requests)


def test_registry_ignoring_range_restarts_from_zero_once() -> None:
    data = RESUMABLE
    fake = FakeRegistry()
    # Range ignored: the whole blob again.
    calls = _drops_once(fake, lambda request, _: httpx.Response(200, content=data))
    out = bytearray()
    with fake.client() as client:
        for chunk in client.stream_blob(REF, _desc(data), on_restart=out.clear):
            out.extend(chunk)
    assert bytes(out) == data
    assert calls == [None, "bytes=30000-"]
    # Without a restart hook the bytes already handed out cannot be taken back: refused.
    calls.clear()
    with fake.client() as client, pytest.raises(RegistryProtocolError, match="resuming"):
        b"".join(client.stream_blob(REF, _desc(data)))


def test_not_found_names_the_digest() -> None:
    fake = FakeRegistry()
    digest = sha(b"absent manifest")
    with fake.client() as client, pytest.raises(RegistryNotFound) as info:
        client.get_manifest(REF, digest)
    assert (info.value.registry, info.value.repository, info.value.digest) == (HOST, REPO, digest)
    assert info.value.status == 404


def _served(
    config: bytes, config_type: str = "application/vnd.oci.image.config.v1+json"
) -> FakeRegistry:
    layer = gzip.compress(b"x" * 512, mtime=0)
    manifest = dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": config_type, "digest": sha(config), "size": len(config)},
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": sha(layer),
                    "size": len(layer),
                }
            ],
        }
    )
    fake = FakeRegistry()
    fake.add_manifest(REPO, "v1", manifest, OCI_MANIFEST)
    fake.blobs[f"/v2/{REPO}/blobs/{sha(config)}"] = config
    fake.blobs[f"/v2/{REPO}/blobs/{sha(layer)}"] = layer
    return fake


@pytest.mark.parametrize(
    ("fake", "said"),
    [
        pytest.param(
            _served(b"{}", "application/vnd.oci.empty.v1+json"),
            "not a container image (config media type application/vnd.oci.empty.v1+json)",
            id="an OCI artifact",
        ),
        pytest.param(_served(b"not json at all"), "malformed image config", id="config not JSON"),
        pytest.param(
            _served(
                dumps(
                    {
                        "architecture": "amd64",
                        "os": "linux",
                        "rootfs": {"type": "layers", "diff_ids": []},
                    }
                )
            ),
            "the manifest has 1 layers but the config lists 0 diff_ids",
            id="manifest and config disagree on the layer count",
        ),
    ],
)
def test_content_the_registry_served_wrong_is_a_check_that_said_no(
    fake: FakeRegistry, said: str
) -> None:
    """The registry answered; what it served is not a usable image: exit 1, named, never 3
    (which says something could not be reached or finished)."""
    with fake.client() as client, pytest.raises(ImageContentError) as info:
        client.resolve(REF)
    assert said in info.value.message and info.value.exit_code == 1
    assert info.value.registry == HOST and info.value.repository == REPO
