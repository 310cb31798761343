"""Blobs streamed from a registry against protocol faults a real registry will not produce
(MockTransport): size and digest verified as they arrive, a dropped download resumed."""

from __future__ import annotations

import gzip
from collections.abc import Callable

import httpx
import pytest

from imagekit.errors import (
    DigestMismatch,
    RegistryNotFound,
    RegistryProtocolError,
    RetriesExhausted,
)
from imagekit.refs import Digest
from imagekit.registry import Descriptor
from tests.unit.registry.fakes import (
    REF,
    REPO,
    Chunks,
    DropAfter,
    FakeRegistry,
    blob_response,
    make_image,
    sha,
)


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


def test_not_found_and_blob_exists() -> None:
    image = make_image()
    fake = FakeRegistry()
    fake.add_image(REPO, image, tag="v1")
    with fake.client() as client:
        assert client.blob_exists(REF, sha(image.layer))
        assert not client.blob_exists(REF, sha(b"absent"))
        with pytest.raises(RegistryNotFound, match="NOT_FOUND"):
            client.get_manifest(REF, "v2")


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
