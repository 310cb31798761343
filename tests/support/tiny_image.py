"""A one-file image made by the real engine and pushed to a loopback registry, for final pulls.

``docker import`` of a one-file tar and ``docker push`` give a real Docker schema 2 manifest;
the engine's copy is removed afterwards so that a final pull really pulls. The config digest
is read from the registry's manifest, independently of imagekit.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from imagekit.runtime.engine import Engine
from tests.support.cli import MAIN, run_child
from tests.support.registries import RunningRegistry

MANIFEST_TYPES = ",".join(
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
    )
)


@dataclass(frozen=True)
class TinyImage:
    repository: str  # registry/repo
    tag: str
    digest: str  # manifest digest as the registry serves it
    config_digest: str  # read from the registry's manifest, independently of imagekit
    diff_id: str  # sha256 of the one-file tar

    @property
    def pinned(self) -> str:
        return f"{self.repository}@{self.digest}"


def docker(engine: Engine, *args: str) -> str:
    return subprocess.run(
        [engine.client_path, *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def run_imagekit(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process, as a user runs it (environment as the test set it)."""
    return run_child(MAIN, *args, env=os.environ)


def registry_manifest(
    registry: RunningRegistry, repo: str, ref: str
) -> tuple[str, dict[str, object]]:
    response = httpx.get(
        f"{registry.url}/v2/{repo}/manifests/{ref}", headers={"Accept": MANIFEST_TYPES}
    )
    response.raise_for_status()
    return response.headers["Docker-Content-Digest"], response.json()


@contextmanager
def tiny_image(engine: Engine, registry: RunningRegistry, tmp_path: Path) -> Iterator[TinyImage]:
    name = f"imagekit-test/pull-{secrets.token_hex(4)}"
    repository = f"{registry.host}/{name}"
    payload = tmp_path / "hello.txt"
    payload.write_text(f"final pull {secrets.token_hex(8)}\n")
    archive = tmp_path / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(payload, arcname="hello.txt")
    docker(engine, "import", str(archive), f"{repository}:v1")
    refs = [f"{repository}:v1"]
    try:
        docker(engine, "push", f"{repository}:v1")
        digest, manifest = registry_manifest(registry, name, "v1")
        refs.append(f"{repository}@{digest}")
        config = manifest["config"]
        assert isinstance(config, dict)
        config_body = httpx.get(f"{registry.url}/v2/{name}/blobs/{config['digest']}").json()
        docker(engine, "rmi", f"{repository}:v1")
        yield TinyImage(
            repository, "v1", digest, str(config["digest"]), config_body["rootfs"]["diff_ids"][0]
        )
    finally:
        subprocess.run([engine.client_path, "rmi", "-f", *refs], capture_output=True, check=False)
