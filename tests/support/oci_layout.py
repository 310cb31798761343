"""Small images written as OCI image layouts, for skopeo to push into real registries.

The tests need images whose layers we control byte for byte (multi-member gzip, skippable
zstd frames, a replaced layer with a self-consistent config); an OCI layout on disk plus
`skopeo copy oci:DIR docker://...` gives them real manifests in a real registry without any
network. Configs carry the fields Docker writes, so a conversion that drops some shows.

``LayoutWriter`` builds a layout piece by piece. ``write_layout`` writes the one the registry
and inspect tests share: an index with linux/amd64, linux/arm64/v8 and a BuildKit-style
attestation manifest (platform unknown/unknown, annotated ``vnd.docker.reference.type``), each
image one gzip layer and a config whose diff_ids are the layer's uncompressed digest; its
``Layout.push`` copies the whole index byte for byte (``--all --preserve-digests``).
"""

from __future__ import annotations

import gzip
import io
import json
import random
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.media_types import (
    OCI_CONFIG,
    OCI_GZIP,
    OCI_INDEX,
    OCI_MANIFEST,
    sha256,
)


def tar_of(files: Mapping[str, bytes]) -> bytes:
    """A reproducible tar of these files (name to content): mode 0644, mtime 0, PAX format."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def make_tar(seed: int, files: int = 4, size: int = 200_000) -> bytes:
    """A reproducible, compressible tar of a few text files."""
    rng = random.Random(seed)  # noqa: S311 - test data, not secrets
    words = [rng.randbytes(4).hex()[: rng.randint(2, 8)] for _ in range(400)]
    return tar_of(
        {
            f"layer{seed}/file{i}.txt": " ".join(rng.choices(words, k=size // 4)).encode()[:size]
            for i in range(files)
        }
    )


@dataclass(frozen=True)
class Layer:
    """One layer: the uncompressed tar (its sha256 is the diffID) and the blob as stored."""

    tar: bytes
    blob: bytes
    media_type: str = OCI_GZIP

    @classmethod
    def gzip(cls, tar: bytes, level: int = 6) -> Layer:
        return cls(tar, gzip.compress(tar, compresslevel=level, mtime=0))

    @property
    def diff_id(self) -> str:
        return sha256(self.tar)


def config_for(
    layers: Sequence[Layer], *, arch: str = "amd64", extra: dict[str, Any] | None = None
) -> bytes:
    document: dict[str, Any] = {
        "architecture": arch,
        "os": "linux",
        "created": "2026-01-01T00:00:00Z",
        "config": {"Env": ["PATH=/usr/bin"], "Cmd": ["/bin/sh"], "Labels": {"t": "imagekit"}},
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created_by": f"layer {i}"} for i in range(len(layers))],
    }
    document.update(extra or {})
    return json.dumps(document, sort_keys=True).encode()


class LayoutWriter:
    """Writes blobs and manifests into one OCI layout directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')

    def blob(self, data: bytes) -> dict[str, Any]:
        digest = sha256(data)
        (self.root / "blobs" / "sha256" / digest.split(":")[1]).write_bytes(data)
        return {"digest": digest, "size": len(data)}

    def image(self, layers: Sequence[Layer], config: bytes | None = None) -> dict[str, Any]:
        """Write an image manifest; returns its descriptor (mediaType, digest, size)."""
        config = config if config is not None else config_for(layers)
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, **self.blob(config)},
            "layers": [
                {"mediaType": layer.media_type, **self.blob(layer.blob)} for layer in layers
            ],
        }
        return {"mediaType": OCI_MANIFEST, **self.blob(json.dumps(manifest).encode())}

    def attestation(self, subject: dict[str, Any]) -> dict[str, Any]:
        """An attestation manifest for ``subject`` as BuildKit writes it; returns its index entry.

        An in-toto layer with its predicate type, a config for unknown/unknown whose diff_ids
        name that layer, and an index entry annotated with the subject's digest:
        https://docs.docker.com/build/metadata/attestations/attestation-storage/
        """
        statement = json.dumps({"_type": "https://in-toto.io/Statement/v0.1"}).encode()
        config = {
            "architecture": "unknown",
            "os": "unknown",
            "rootfs": {"type": "layers", "diff_ids": [sha256(statement)]},
        }
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, **self.blob(json.dumps(config).encode())},
            "layers": [
                {
                    "mediaType": "application/vnd.in-toto+json",
                    **self.blob(statement),
                    "annotations": {
                        "in-toto.io/predicate-type": "https://slsa.dev/provenance/v0.2"
                    },
                }
            ],
        }
        return {
            "mediaType": OCI_MANIFEST,
            **self.blob(json.dumps(manifest).encode()),
            "platform": {"architecture": "unknown", "os": "unknown"},
            "annotations": {
                "vnd.docker.reference.digest": subject["digest"],
                "vnd.docker.reference.type": "attestation-manifest",
            },
        }

    def index(self, entries: Sequence[dict[str, Any]], tag: str = "latest") -> dict[str, Any]:
        """Write index.json listing ``entries`` (the layout's root) under ``tag``.

        One entry is tagged as it is; several go into an image index blob, which is tagged.
        Returns the tagged descriptor.
        """
        if len(entries) == 1:
            top = [{**entries[0], "annotations": {"org.opencontainers.image.ref.name": tag}}]
        else:
            inner = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": list(entries)}
            top = [
                {
                    "mediaType": OCI_INDEX,
                    **self.blob(json.dumps(inner).encode()),
                    "annotations": {"org.opencontainers.image.ref.name": tag},
                }
            ]
        (self.root / "index.json").write_text(
            json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": top})
        )
        return top[0]


@dataclass(frozen=True)
class LayoutImage:
    """One platform's image in a layout from ``write_layout``, as a registry will report it."""

    manifest_digest: str
    config_digest: str
    layer_digest: str
    layer_size: int
    diff_id: str


@dataclass(frozen=True)
class Layout:
    """What ``write_layout`` wrote: its directory, tag and digests, images keyed by platform."""

    path: Path
    tag: str
    index_digest: str
    attestation_digest: str
    images: dict[str, LayoutImage]

    def push(self, dest: str, *args: str) -> str:
        """Copy the whole index to ``dest`` (host/repository:tag) byte for byte; returns it."""
        push_layout(self.path, dest, "--all", "--preserve-digests", *args, tag=self.tag)
        return dest


def write_layout(
    root: Path, *, tag: str = "multi", salt: str = "", amd64_payload: int = 0
) -> Layout:
    """Write the two-platform index plus an attestation manifest as an OCI layout at root.

    Each image's layer is a tar of one ``hello.txt`` naming its architecture and ``salt``, so
    layouts with other salts have other image digests. ``amd64_payload`` adds that many
    incompressible bytes to the amd64 layer (for tests that need a blob of some size).
    """
    writer = LayoutWriter(root)
    filler = random.Random(salt).randbytes(amd64_payload)  # noqa: S311 - test data
    entries: list[dict[str, Any]] = []
    images: dict[str, LayoutImage] = {}
    for platform, payload in (("linux/amd64", filler), ("linux/arm64/v8", b"")):
        os_, arch, *variant = platform.split("/")
        fields = {"os": os_, "architecture": arch} | ({"variant": variant[0]} if variant else {})
        layer = Layer.gzip(tar_of({"hello.txt": f"{arch} {salt}\n".encode() + payload}))
        config = config_for([layer], arch=arch, extra=fields)
        manifest = writer.image([layer], config)
        entries.append({**manifest, "platform": fields})
        images[platform] = LayoutImage(
            manifest_digest=manifest["digest"],
            config_digest=sha256(config),
            layer_digest=sha256(layer.blob),
            layer_size=len(layer.blob),
            diff_id=layer.diff_id,
        )
    attestation = writer.attestation(entries[0])
    top = writer.index([*entries, attestation], tag)
    return Layout(
        path=root,
        tag=tag,
        index_digest=top["digest"],
        attestation_digest=attestation["digest"],
        images=images,
    )


def skopeo_copy(src: str, dst: str, *args: str) -> None:
    """Run a real `skopeo copy` between transports, TLS off for loopback registries.

    A failure is an AssertionError quoting skopeo's stderr, which says what went wrong.
    """
    done = subprocess.run(
        [
            "skopeo",
            "copy",
            "--quiet",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            *args,
            src,
            dst,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"skopeo copy {src} {dst} failed: {done.stderr[-2000:]}")


def push_layout(root: Path, dest: str, *args: str, tag: str = "latest") -> None:
    """Push the layout's image tagged ``tag`` to ``dest`` (host/repository:tag)."""
    skopeo_copy(f"oci:{root}:{tag}", f"docker://{dest}", *args)


def push_new_image(root: Path, dest: str, layers: list[Layer], *args: str) -> str:
    """A layout at ``root`` of one image of ``layers`` (config made for them), pushed to
    ``dest`` (host/repository:tag; ``args`` skopeo's, e.g. --dest-creds); ``dest``."""
    writer = LayoutWriter(root)
    writer.index([writer.image(layers)])
    push_layout(root, dest, *args)
    return dest


def _put_blob(client: Any, ref: Any, digest: str, data: bytes) -> None:
    started = client.request(
        "POST", ref, "blobs/uploads/", scope_actions=("pull", "push"), content=b""
    )
    location = started.headers["Location"]
    separator = "&" if "?" in location else "?"
    client.request(
        "PUT",
        ref,
        f"{location}{separator}digest={digest}",
        scope_actions=("pull", "push"),
        headers={"Content-Type": "application/octet-stream"},
        content=data,
    )


def _put_manifest(client: Any, ref: Any, identifier: str, body: bytes, media_type: str) -> None:
    client.request(
        "PUT",
        ref,
        f"manifests/{identifier}",
        scope_actions=("pull", "push"),
        headers={"Content-Type": media_type},
        content=body,
    )


def push_dir(directory: Path, dest: str) -> None:
    """Push a skopeo ``dir:`` copy as it is, through the plain registry API.

    skopeo's docker:// destination always gzips uncompressed layers; pushing the dir's blobs
    and manifest ourselves keeps them uncompressed (a copy as some relays store it).
    """
    from imagekit.refs import parse_reference
    from imagekit.registry import RegistryClient

    ref = parse_reference(dest)
    manifest = (directory / "manifest.json").read_bytes()
    document = json.loads(manifest)
    with RegistryClient() as client:
        for desc in [document["config"], *document["layers"]]:
            data = (directory / desc["digest"].split(":")[1]).read_bytes()
            _put_blob(client, ref, desc["digest"], data)
        _put_manifest(client, ref, str(ref.tag), manifest, document["mediaType"])


def push_through_api(root: Path, top: dict[str, Any], dest: str) -> None:
    """Push the layout's image or index ``top`` to ``dest`` (host/repo:tag) by the plain API.

    Blobs first, then each child manifest by digest, then ``top`` under the tag: the order a
    registry needs (distribution-spec, "Pushing Manifests"), every byte as the layout holds
    it, so every digest is kept.
    """
    from imagekit.refs import parse_reference
    from imagekit.registry import RegistryClient

    ref = parse_reference(dest)

    def read(digest: str) -> bytes:
        return (root / "blobs" / "sha256" / digest.split(":")[1]).read_bytes()

    def push_manifest(desc: dict[str, Any], identifier: str) -> None:
        body = read(desc["digest"])
        document = json.loads(body)
        if desc["mediaType"] == OCI_INDEX:
            for child in document["manifests"]:
                push_manifest(child, child["digest"])
        else:
            for blob in [document["config"], *document["layers"]]:
                _put_blob(client, ref, blob["digest"], read(blob["digest"]))
        _put_manifest(client, ref, identifier, body, desc["mediaType"])

    with RegistryClient() as client:
        push_manifest(top, str(ref.tag))
