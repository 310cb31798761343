"""Protocol faults the real registry cannot be made to produce, served through MockTransport.

Only for unit tests of those faults (docs/ARCHITECTURE.md, Tests); everything else runs against
the real registries in tests/integration/registry.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from imagekit.errors import ImagekitError
from imagekit.refs import parse_reference
from imagekit.registry import RegistryClient, RetryPolicy
from tests.support.media_types import OCI_CONFIG, OCI_GZIP, sha256

# The tests name these through fakes, as they did when fakes defined them.
from tests.support.media_types import OCI_INDEX as OCI_INDEX
from tests.support.media_types import OCI_MANIFEST as OCI_MANIFEST
from tests.support.oci_layout import tar_of

HOST = "registry.example.test"
sha = sha256


def dumps(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


@dataclass
class Image:
    layer: bytes
    config: bytes
    manifest: bytes
    diff_id: str

    @property
    def manifest_digest(self) -> str:
        return sha(self.manifest)


def make_image(
    payload: bytes = b"hello\n", arch: str = "amd64", variant: str | None = None
) -> Image:
    tar_bytes = tar_of({"hello.txt": payload})
    layer = gzip.compress(tar_bytes, mtime=0)
    cfg: dict[str, Any] = {
        "architecture": arch,
        "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [sha(tar_bytes)]},
    }
    if variant:
        cfg["variant"] = variant
    config = dumps(cfg)
    manifest = dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": sha(config), "size": len(config)},
            "layers": [
                {
                    "mediaType": OCI_GZIP,
                    "digest": sha(layer),
                    "size": len(layer),
                }
            ],
        }
    )
    return Image(layer, config, manifest, sha(tar_bytes))


def index_of(*entries: dict[str, Any]) -> bytes:
    return dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": list(entries)})


def entry(
    image: Image,
    os: str = "linux",
    arch: str = "amd64",
    variant: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    platform: dict[str, str] = {"os": os, "architecture": arch}
    if variant:
        platform["variant"] = variant
    document: dict[str, Any] = {
        "mediaType": OCI_MANIFEST,
        "digest": image.manifest_digest,
        "size": len(image.manifest),
        "platform": platform,
    }
    if annotations:
        document["annotations"] = annotations
    return document


class DropAfter(httpx.SyncByteStream):
    """A body that sends ``data[:cut]`` and then breaks the connection."""

    def __init__(self, data: bytes, cut: int) -> None:
        self.data, self.cut = data, cut

    def __iter__(self) -> Iterator[bytes]:
        yield self.data[: self.cut]
        raise httpx.ReadError("connection reset by peer")


Handler = Callable[[httpx.Request], httpx.Response]


@dataclass
class FakeRegistry:
    """Manifests and blobs by path, plus per-path overrides; records every request."""

    manifests: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    overrides: dict[str, Handler] = field(default_factory=dict)
    requests: list[httpx.Request] = field(default_factory=list)

    def add_image(self, repo: str, image: Image, tag: str | None = None) -> None:
        self.manifests[f"/v2/{repo}/manifests/{image.manifest_digest}"] = (
            image.manifest,
            OCI_MANIFEST,
        )
        if tag:
            self.manifests[f"/v2/{repo}/manifests/{tag}"] = (image.manifest, OCI_MANIFEST)
        self.blobs[f"/v2/{repo}/blobs/{sha(image.config)}"] = image.config
        self.blobs[f"/v2/{repo}/blobs/{sha(image.layer)}"] = image.layer

    def add_manifest(self, repo: str, ident: str, body: bytes, media_type: str) -> None:
        self.manifests[f"/v2/{repo}/manifests/{ident}"] = (body, media_type)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        if path in self.overrides:
            return self.overrides[path](request)
        if path == "/v2/":
            return httpx.Response(
                200, json={}, headers={"Docker-Distribution-API-Version": "registry/2.0"}
            )
        if path in self.manifests:
            body, media_type = self.manifests[path]
            return httpx.Response(
                200,
                content=body,
                headers={"Content-Type": media_type, "Docker-Content-Digest": sha(body)},
            )
        if path in self.blobs:
            return blob_response(request, self.blobs[path])
        return httpx.Response(404, json={"errors": [{"code": "NOT_FOUND", "message": "unknown"}]})

    def client(self, **kwargs: Any) -> RegistryClient:
        sleeps: list[float] = kwargs.pop("sleeps", [])
        policy = RetryPolicy(
            max_attempts=kwargs.pop("max_attempts", 4),
            initial_wait=0.01,
            max_wait=0.02,
            sleep=sleeps.append,
        )
        return RegistryClient(
            insecure=(HOST,), transport=StreamingMock(self), retry_policy=policy, **kwargs
        )


class Chunks(httpx.SyncByteStream):
    def __init__(self, data: bytes, size: int = 4096) -> None:
        self.data, self.size = data, size

    def __iter__(self) -> Iterator[bytes]:
        for start in range(0, len(self.data), self.size):
            yield self.data[start : start + self.size]


class StreamingMock(httpx.MockTransport):
    """MockTransport whose answers stream like a network's (httpx pre-reads ``content=``)."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if isinstance(response.stream, httpx.ByteStream):
            return httpx.Response(
                response.status_code,
                headers=response.headers,
                stream=Chunks(b"".join(response.stream)),  # raw, not decoded
                request=request,
            )
        return response


def blob_response(request: httpx.Request, data: bytes) -> httpx.Response:
    """A blob answer that honours ``Range: bytes=N-`` as the real registry does."""
    if request.method == "HEAD":
        return httpx.Response(200, headers={"Content-Length": str(len(data))})
    header = request.headers.get("Range")
    if header and header.startswith("bytes="):
        start = int(header[6:].split("-", 1)[0])
        return httpx.Response(
            206,
            content=data[start:],
            headers={"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"},
        )
    return httpx.Response(200, content=data)


REPO = "team/app"
REF = parse_reference(f"{HOST}/{REPO}:v1")

E = TypeVar("E", bound=ImagekitError)


def v1_refused(
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
