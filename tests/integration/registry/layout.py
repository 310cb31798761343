"""Tiny real images for registry tests: an OCI layout written here, pushed with skopeo.

The layout holds an index with linux/amd64, linux/arm64/v8 and a BuildKit-style attestation
manifest (platform unknown/unknown, annotated ``vnd.docker.reference.type``), each a real
image with a gzip layer and a config whose diff_ids are the layer's uncompressed digest.
``skopeo copy --all oci:DIR docker://...`` pushes it byte for byte to a real registry.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class LayoutImage:
    platform: str
    manifest_digest: str
    manifest_size: int
    config_digest: str
    layer_digest: str
    layer_size: int
    diff_id: str


@dataclass
class Layout:
    path: Path
    index_digest: str
    images: dict[str, LayoutImage] = field(default_factory=dict)
    attestation_digest: str | None = None


def _tar_with(name: str, content: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size = len(content)
        info.mtime = 0
        tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


class _Writer:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        (root / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))

    def blob(self, data: bytes) -> str:
        digest = sha256(data)
        (self.root / "blobs" / "sha256" / digest.split(":", 1)[1]).write_bytes(data)
        return digest

    def json_blob(self, document: dict[str, Any]) -> tuple[str, int]:
        data = json.dumps(document, separators=(",", ":")).encode()
        return self.blob(data), len(data)


def _image(
    writer: _Writer, os_: str, arch: str, variant: str | None, payload: bytes
) -> LayoutImage:
    tar = _tar_with("hello.txt", payload)
    layer = gzip.compress(tar, mtime=0)
    layer_digest = writer.blob(layer)
    config: dict[str, Any] = {
        "architecture": arch,
        "os": os_,
        "config": {"Cmd": ["/hello"]},
        "rootfs": {"type": "layers", "diff_ids": [sha256(tar)]},
        "history": [{"created_by": "imagekit test layout"}],
    }
    if variant:
        config["variant"] = variant
    config_digest, config_size = writer.json_blob(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": OCI_LAYER_GZIP, "digest": layer_digest, "size": len(layer)}],
    }
    manifest_digest, manifest_size = writer.json_blob(manifest)
    platform = f"{os_}/{arch}" + (f"/{variant}" if variant else "")
    return LayoutImage(
        platform=platform,
        manifest_digest=manifest_digest,
        manifest_size=manifest_size,
        config_digest=config_digest,
        layer_digest=layer_digest,
        layer_size=len(layer),
        diff_id=sha256(tar),
    )


def write_layout(
    root: Path, *, tag: str = "multi", salt: str = "", amd64_payload: int = 0
) -> Layout:
    """Write a two-platform index plus an attestation manifest as an OCI layout at root.

    ``amd64_payload`` adds that many incompressible bytes to the amd64 layer (for tests that
    need a blob of some size).
    """
    writer = _Writer(root)
    filler = random.Random(salt).randbytes(amd64_payload)  # noqa: S311 - test data
    amd64 = _image(writer, "linux", "amd64", None, f"amd64 {salt}\n".encode() + filler)
    arm64 = _image(writer, "linux", "arm64", "v8", f"arm64 {salt}\n".encode())
    # An attestation manifest as BuildKit writes it: an in-toto layer, unknown/unknown.
    statement = json.dumps({"_type": "https://in-toto.io/Statement/v0.1", "salt": salt}).encode()
    att_layer = writer.blob(statement)
    att_config, att_config_size = writer.json_blob(
        {
            "architecture": "unknown",
            "os": "unknown",
            "rootfs": {"type": "layers", "diff_ids": [sha256(statement)]},
        }
    )
    att_manifest, att_size = writer.json_blob(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": att_config, "size": att_config_size},
            "layers": [
                {
                    "mediaType": "application/vnd.in-toto+json",
                    "digest": att_layer,
                    "size": len(statement),
                    "annotations": {
                        "in-toto.io/predicate-type": "https://slsa.dev/provenance/v0.2"
                    },
                }
            ],
        }
    )
    entries: list[dict[str, Any]] = []
    for image, (arch, variant) in ((amd64, ("amd64", None)), (arm64, ("arm64", "v8"))):
        platform: dict[str, str] = {"architecture": arch, "os": "linux"}
        if variant:
            platform["variant"] = variant
        entries.append(
            {
                "mediaType": OCI_MANIFEST,
                "digest": image.manifest_digest,
                "size": image.manifest_size,
                "platform": platform,
            }
        )
    entries.append(
        {
            "mediaType": OCI_MANIFEST,
            "digest": att_manifest,
            "size": att_size,
            "annotations": {
                "vnd.docker.reference.digest": amd64.manifest_digest,
                "vnd.docker.reference.type": "attestation-manifest",
            },
            "platform": {"architecture": "unknown", "os": "unknown"},
        }
    )
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
    index_digest, index_size = writer.json_blob(index)
    # The layout's own index.json points at the image index under a tag.
    (root / "index.json").write_text(
        json.dumps(
            {
                "schemaVersion": 2,
                "manifests": [
                    {
                        "mediaType": OCI_INDEX,
                        "digest": index_digest,
                        "size": index_size,
                        "annotations": {"org.opencontainers.image.ref.name": tag},
                    }
                ],
            }
        )
    )
    return Layout(
        path=root,
        index_digest=index_digest,
        images={amd64.platform: amd64, arm64.platform: arm64},
        attestation_digest=att_manifest,
    )


def skopeo_copy(
    source: str, dest: str, *, dest_creds: str | None = None, all_images: bool = True
) -> None:
    """skopeo copy to a loopback registry, preserving digests (no recompression)."""
    argv = ["skopeo", "copy", "--dest-tls-verify=false", "--preserve-digests"]
    if all_images:
        argv.append("--all")
    if dest_creds:
        argv += ["--dest-creds", dest_creds]
    argv += [source, dest]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise AssertionError(f"skopeo copy failed: {done.stderr[-2000:]}")


def push_layout(
    layout: Layout, host: str, repository: str, tag: str = "multi", *, dest_creds: str | None = None
) -> str:
    """Push the layout's index to host/repository:tag; returns the reference pushed."""
    dest = f"{host}/{repository}:{tag}"
    skopeo_copy(f"oci:{layout.path}:{tag}", f"docker://{dest}", dest_creds=dest_creds)
    return dest
