"""An "upstream" that moves: base images stacked on the demo base through the registry API.

The nightly watch needs a tag that moves to a base where a package is at another version,
and to one where the file a plan patches changed. Both are the demo base (tests/support/
base_image.py, already in the registry) plus one layer, written with the plain
distribution API: the base's layers are mounted from its repository (never downloaded),
the new layer, config and manifest are pushed, and the tag is put last, as a registry
that publishes a rebuilt image does.

The package layer is a real install: the wheel comes from the package index through pip
(cached under the imagekit cache, keyed by the requirement), and pip itself installs it
(``--target``) into the folder that lands at /usr/local/lib/python3.11/dist-packages, the
site folder Debian's python3.11 reads; so METADATA, RECORD and INSTALLER are pip's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from tests.support.base_image import cache_dir, locked
from tests.support.images import Blob, M, Writer
from tests.support.media_types import sha256

SITE = "usr/local/lib/python3.11/dist-packages"


def wheel(requirement: str) -> Path:
    """The wheel of ``name==version`` from the package index, downloaded once."""
    folder = cache_dir() / "wheels" / requirement.replace("==", "-")
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder / ".lock"):
        found = sorted(folder.glob("*.whl"))
        if not found:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 "--dest", str(folder), requirement],
                check=True, capture_output=True, timeout=300,
            )  # fmt: skip
            found = sorted(folder.glob("*.whl"))
    if len(found) != 1:
        raise RuntimeError(f"expected one wheel for {requirement} in {folder}, found {found}")
    return found[0]


def package_layer(requirement: str) -> Blob:
    """A layer holding what ``pip install --target`` of the requirement's wheel writes."""
    with tempfile.TemporaryDirectory(prefix="imagekit-upstream-") as tmp:
        target = Path(tmp) / "site"
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile",
             "--target", str(target), str(wheel(requirement))],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        members = [M(SITE, "dir", mode=0o755)]
        for path in sorted(target.rglob("*")):
            name = f"{SITE}/{path.relative_to(target).as_posix()}"
            if path.is_dir():
                members.append(M(name, "dir", mode=0o755))
            else:
                members.append(M(name, data=path.read_bytes(), mode=0o644))
    return Blob.gzip(members)


def file_layer(path: str, data: bytes) -> Blob:
    """A layer that replaces one file (``path`` relative to the root)."""
    return Blob.gzip([M(path, data=data, mode=0o644)])


class Upstream:
    """One repository on a real registry whose tags are moved between stacked images."""

    def __init__(self, host: str, repository: str, base_repository: str, base_digest: str):
        self.host, self.repository = host, repository
        self.writer = Writer(host)
        self.base_repository, self.base_digest = base_repository, base_digest

    def close(self) -> None:
        self.writer.close()

    @property
    def http(self) -> httpx.Client:
        return self.writer.http

    def _document(self, repository: str, reference: str) -> tuple[dict[str, Any], str]:
        answer = self.writer.get_manifest(repository, reference)
        answer.raise_for_status()
        return answer.json(), answer.headers["Content-Type"]

    def stack(self, *layers: Blob, on: str | None = None) -> str:
        """Push (untagged) the image ``on`` (default: the demo base) plus ``layers``; its
        reference host/repository@digest. Lower layers are mounted, never downloaded."""
        source_repo, source_digest = self.base_repository, self.base_digest
        if on is not None:
            source_repo, _, source_digest = on.removeprefix(f"{self.host}/").partition("@")
        manifest, media_type = self._document(source_repo, source_digest)
        config = json.loads(self.writer.get_blob(source_repo, manifest["config"]["digest"]))
        for layer in manifest["layers"]:
            mounted = self.http.post(
                f"/v2/{self.repository}/blobs/uploads/",
                params={"mount": layer["digest"], "from": source_repo},
            )
            if mounted.status_code != 201:
                raise RuntimeError(f"the registry did not mount {layer['digest']}: {mounted}")
        layer_type = manifest["layers"][0]["mediaType"]
        for layer in layers:
            self.writer.blob(self.repository, layer.blob)
            manifest["layers"].append(
                {"mediaType": layer_type, "digest": layer.digest, "size": len(layer.blob)}
            )
            config["rootfs"]["diff_ids"].append(layer.diff_id)
            config.setdefault("history", []).append({"created_by": "upstream: a new layer"})
        config_bytes = json.dumps(config).encode()
        self.writer.blob(self.repository, config_bytes)
        manifest["config"] = {
            **manifest["config"],
            "digest": sha256(config_bytes),
            "size": len(config_bytes),
        }
        body = json.dumps(manifest, indent=3).encode()
        digest = self.writer.manifest(self.repository, sha256(body), body, media_type)
        return f"{self.host}/{self.repository}@{digest}"

    def tag(self, tag: str, reference: str) -> None:
        """Point ``tag`` at the image ``reference`` (host/repository@digest) names."""
        digest = reference.partition("@")[2]
        manifest = self.writer.get_manifest(self.repository, digest)
        manifest.raise_for_status()
        self.writer.manifest(
            self.repository, tag, manifest.content, manifest.headers["Content-Type"]
        )

    def delete(self, reference: str) -> None:
        """Delete the manifest ``reference`` names, and with it every tag pointing at it."""
        digest = reference.partition("@")[2]
        self.http.delete(f"/v2/{self.repository}/manifests/{digest}").raise_for_status()


def tags(host: str, repository: str) -> list[str]:
    """The tags a repository on a loopback registry holds (none when it does not exist)."""
    answer = httpx.get(f"http://{host}/v2/{repository}/tags/list", timeout=30)
    if answer.status_code == 404:
        return []
    answer.raise_for_status()
    return sorted(answer.json().get("tags") or [])
