"""Small images written straight into a real registry through its API, layers byte for byte.

The registry builder's tests need bases with exactly the layer contents a hard case needs
(whiteouts, opaque folders, links, zstd, foreign layers, configs with unknown fields, other
architectures), in either media-type family. They are written here with the plain
distribution API (one POST and PUT a blob, then the manifest), not with the code under test.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import zstandard

from tests.support.media_types import (
    DOCKER_CONFIG,
    DOCKER_LIST,
    DOCKER_MANIFEST,
    OCI_CONFIG,
    OCI_GZIP,
    OCI_INDEX,
    OCI_MANIFEST,
    OCI_ZSTD,
    sha256,
)


@dataclass(frozen=True)
class M:
    """One tar member: kind file, dir, symlink, hardlink, whiteout (of ``name``) or opaque
    (of the folder ``name``)."""

    name: str
    kind: str = "file"
    data: bytes = b""
    mode: int | None = None
    uid: int = 0
    gid: int = 0
    link: str = ""
    mtime: int = 1_700_000_000


def layer_tar(members: Sequence[M]) -> bytes:
    """A tar of these members, in this order (tests choose the order a hard case needs)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            name = m.name
            if m.kind == "whiteout":
                parent, _, base = name.rpartition("/")
                name = f"{parent}/.wh.{base}" if parent else f".wh.{base}"
            elif m.kind == "opaque":
                name = f"{name}/.wh..wh..opq"
            info = tarfile.TarInfo(name)
            info.uid, info.gid, info.mtime = m.uid, m.gid, m.mtime
            if m.kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, m.mode or 0o755
                tar.addfile(info)
            elif m.kind == "symlink":
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, m.link, 0o777
                tar.addfile(info)
            elif m.kind == "hardlink":
                info.type, info.linkname, info.mode = tarfile.LNKTYPE, m.link, m.mode or 0o644
                tar.addfile(info)
            else:
                data = m.data if m.kind == "file" else b""
                info.size, info.mode = len(data), m.mode or 0o644
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@dataclass(frozen=True)
class Blob:
    """A layer as stored: the tar (its sha256 is the diffID) and the compressed blob."""

    tar: bytes
    blob: bytes
    media_type: str
    urls: tuple[str, ...] = ()

    @classmethod
    def gzip(cls, members: Sequence[M], media_type: str = OCI_GZIP) -> Blob:
        tar = layer_tar(members)
        return cls(tar, gzip.compress(tar, compresslevel=6, mtime=0), media_type)

    @classmethod
    def zstd(cls, members: Sequence[M]) -> Blob:
        tar = layer_tar(members)
        return cls(tar, zstandard.ZstdCompressor(level=3).compress(tar), OCI_ZSTD)

    @property
    def diff_id(self) -> str:
        return sha256(self.tar)

    @property
    def digest(self) -> str:
        return sha256(self.blob)


@dataclass(frozen=True)
class Pushed:
    reference: str  # host/repo@manifest digest
    digest: str
    media_type: str
    manifest: bytes
    config: bytes
    layers: tuple[Blob, ...] = field(default=())

    def entry(
        self, platform: str | None = None, annotations: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """This image as an index entry: "os/arch[/variant]" as written, or none at all."""
        entry: dict[str, Any] = {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": len(self.manifest),
        }
        if platform is not None:
            os_, arch, *variant = platform.split("/")
            entry["platform"] = {"architecture": arch, "os": os_} | (
                {"variant": variant[0]} if variant else {}
            )
        if annotations:
            entry["annotations"] = annotations
        return entry


class Writer:
    """Pushes blobs and manifests into one registry (anonymous, plain HTTP on loopback)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.http = httpx.Client(base_url=f"http://{host}", timeout=120)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def blob(self, repo: str, data: bytes) -> str:
        digest = sha256(data)
        self._put_blob(repo, digest, data)
        return digest

    def blob_file(
        self, repo: str, path: Path, digest: str, *, mount_from: str | None = None
    ) -> str:
        """A file's bytes as blob DIGEST, streamed (a layer of hundreds of MB is never held in
        memory); mounted from the repository ``mount_from`` where the registry holds it there."""
        with path.open("rb") as fh:
            self._put_blob(repo, digest, fh, mount_from)
        return digest

    def _put_blob(
        self, repo: str, digest: str, content: bytes | IO[bytes], mount_from: str | None = None
    ) -> None:
        """The registry's monolithic upload: nothing if the blob is there, a cross-repository
        mount where asked and answered (201), else POST then PUT with the digest."""
        if self.http.head(f"/v2/{repo}/blobs/{digest}").status_code == 200:
            return
        mount = {"mount": digest, "from": mount_from} if mount_from else {}
        started = self.http.post(f"/v2/{repo}/blobs/uploads/", params=mount)
        if mount and started.status_code == 201:
            return
        started.raise_for_status()
        url = httpx.URL(started.headers["Location"]).copy_merge_params({"digest": digest})
        self.http.put(str(url), content=content).raise_for_status()

    def manifest(self, repo: str, tag: str, body: bytes, media_type: str) -> str:
        answer = self.http.put(
            f"/v2/{repo}/manifests/{tag}", content=body, headers={"Content-Type": media_type}
        )
        answer.raise_for_status()
        return sha256(body)

    def image(
        self,
        repo: str,
        tag: str,
        layers: Sequence[Blob],
        *,
        arch: str = "amd64",
        variant: str | None = None,
        docker: bool = False,
        config: dict[str, Any] | None = None,
        config_bytes: bytes | None = None,
        skip_blobs: Sequence[int] = (),
    ) -> Pushed:
        """Push an image of these layers; ``config`` adds to (or replaces) config fields."""
        if config_bytes is None:
            document: dict[str, Any] = {
                "architecture": arch,
                "os": "linux",
                "created": "2026-01-01T00:00:00Z",
                "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "Cmd": ["/bin/sh"]},
                "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
                "history": [{"created_by": f"layer {i}"} for i in range(len(layers))],
            }
            if variant:
                document["variant"] = variant
            document.update(config or {})
            config_bytes = json.dumps(document).encode()
        for i, layer in enumerate(layers):
            if i not in skip_blobs:
                self.blob(repo, layer.blob)
        self.blob(repo, config_bytes)
        media_type = DOCKER_MANIFEST if docker else OCI_MANIFEST
        manifest = {
            "schemaVersion": 2,
            "mediaType": media_type,
            "config": {
                "mediaType": DOCKER_CONFIG if docker else OCI_CONFIG,
                "digest": sha256(config_bytes),
                "size": len(config_bytes),
            },
            "layers": [
                {
                    "mediaType": layer.media_type,
                    "digest": layer.digest,
                    "size": len(layer.blob),
                    **({"urls": list(layer.urls)} if layer.urls else {}),
                }
                for layer in layers
            ],
        }
        body = json.dumps(manifest, indent=2).encode()
        digest = self.manifest(repo, tag, body, media_type)
        return Pushed(
            f"{self.host}/{repo}@{digest}", digest, media_type, body, config_bytes, tuple(layers)
        )

    def index(self, repo: str, tag: str, images: Sequence[tuple[Pushed, str]]) -> str:
        """An OCI index of (image, "os/arch[/variant]") entries; returns host/repo@digest."""
        entries = []
        for image, platform in images:
            os_, arch, *variant = platform.split("/")
            fields = {"architecture": arch, "os": os_} | (
                {"variant": variant[0]} if variant else {}
            )
            entries.append(
                {
                    "mediaType": image.media_type,
                    "digest": image.digest,
                    "size": len(image.manifest),
                    "platform": fields,
                }
            )
        body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries})
        digest = self.manifest(repo, tag, body.encode(), OCI_INDEX)
        return f"{self.host}/{repo}@{digest}"

    def raw_index(self, repo: str, tag: str, entries: Sequence[dict[str, Any]]) -> str:
        """An OCI index of these entries as written (no platform, annotations, any spelling);
        returns host/repo@digest."""
        body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": list(entries)})
        digest = self.manifest(repo, tag, body.encode(), OCI_INDEX)
        return f"{self.host}/{repo}@{digest}"

    def get_manifest(self, repo: str, reference: str) -> httpx.Response:
        accept = ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))
        return self.http.get(f"/v2/{repo}/manifests/{reference}", headers={"Accept": accept})

    def get_blob(self, repo: str, digest: str) -> bytes:
        answer = self.http.get(f"/v2/{repo}/blobs/{digest}")
        answer.raise_for_status()
        return answer.content
