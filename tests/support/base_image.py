"""The base image every integration test and the demo build on, made without any upstream registry.

A Debian bookworm rootfs from mmdebstrap (python3, pip, PyAV, NumPy), imported into the local
engine and pushed to a loopback registry, so that it has a real manifest digest to pin. The
tarball is cached on disk keyed by its inputs, so a warm machine skips the 40 s debootstrap;
a lock file keeps parallel test runs from building it twice.

The engine's push of the base gzips its 0.7 GiB layer each time (half a minute of one core),
as no registry of a new session holds it. What its first push of a local image put in the
registry (the layer and config blobs, byte for byte) is kept on disk under the image's ID; a
later session uploads those blobs through the registry API first, so the engine's own push
finds every layer there (it asks the registry for the digest it pushed before) and sends
only its manifest: the same manifest, digest and engine records as a push that uploaded all.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from imagekit.evidence import file_digest

SUITE = "bookworm"
VARIANT = "apt"
PACKAGES = ("python3", "python3-pip", "python3-av", "python3-numpy")
REPOSITORY = "imagekit-test/base"


def cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "imagekit"
    path = Path(os.environ.get("IMAGEKIT_CACHE_DIR", default))
    path.mkdir(parents=True, exist_ok=True)
    return path


def mmdebstrap_version() -> str:
    out = subprocess.run(
        ["mmdebstrap", "--version"], capture_output=True, text=True, check=True
    ).stdout
    return out.strip()


def cache_key() -> str:
    """A hash of everything that decides the tarball's content (but not the day's mirror)."""
    inputs = {
        "suite": SUITE,
        "variant": VARIANT,
        "include": sorted(PACKAGES),
        "mmdebstrap": mmdebstrap_version(),
        "arch": os.uname().machine,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path`` (the cache is shared by every checkout on the machine)."""
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def cached_rootfs(stem: str, lock: str, options: list[str]) -> Path:
    """``<cache>/<stem>.tar`` made by ``mmdebstrap --quiet OPTIONS SUITE`` on first use.

    The stem carries the inputs' key; the lock keeps parallel runs from making it twice, and
    a half-written tarball never takes the final name.
    """
    target = cache_dir() / f"{stem}.tar"
    with locked(cache_dir() / lock):
        if target.exists():
            return target
        partial = target.with_suffix(".partial.tar")
        partial.unlink(missing_ok=True)
        subprocess.run(["mmdebstrap", "--quiet", *options, SUITE, str(partial)], check=True)
        partial.rename(target)
        return target


def base_tarball() -> Path:
    """The cached rootfs tarball, made with mmdebstrap on first use."""
    return cached_rootfs(
        f"base-{SUITE}-{cache_key()}",
        "base.lock",
        [
            f"--variant={VARIANT}",
            "--include=" + ",".join(PACKAGES),
            # Keep the rootfs small: no apt lists or docs are needed by the tests.
            "--customize-hook=rm -rf $1/var/lib/apt/lists/* $1/usr/share/doc/*",
        ],
    )


@dataclass(frozen=True)
class BaseImage:
    reference: str  # HOST/REPO@sha256:... as a plan pins it
    digest: str  # the manifest digest in the registry
    registry_host: str
    repository: str
    local_tag: str  # the image as it sits in the local engine


def ensure_local_image(client_path: str) -> str:
    """Import the tarball into the engine once; later runs reuse the image by its tag.

    Under pytest-xdist each worker gets a base of its own: the same layer, and a config that
    names the worker (a label). The engine's BuildKit merges identical steps of builds that
    run at the same time (same base config, same instructions) and streams such a step's
    output to one of them only, so two workers building the demo plan at once would each miss
    some of the in-build check lines their tests read. A config of its own per worker keeps
    every build's steps its own.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    tag = f"{REPOSITORY}:{SUITE}-{cache_key()}" + (f"-{worker}" if worker else "")
    changes = ["--change", 'CMD ["python3"]']
    if worker:
        changes += ["--change", f"LABEL io.imagekit.test.worker={worker}"]
    with locked(cache_dir() / "base-import.lock"):
        probe = subprocess.run(
            [client_path, "image", "inspect", tag], capture_output=True, check=False
        )
        if probe.returncode != 0:
            subprocess.run(
                [client_path, "import", *changes, str(base_tarball()), tag],
                check=True,
                capture_output=True,
            )
    return tag


_MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
)


def _pushed_folder(client_path: str, local: str) -> Path:
    """Where what the engine pushed of ``local`` is kept: a folder named by its image ID."""
    image_id = subprocess.run(
        [client_path, "image", "inspect", "--format", "{{.Id}}", local],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return cache_dir() / "base-push" / image_id.removeprefix("sha256:")[:32]


def _keep_pushed(folder: Path, registry_host: str, repository: str, digest: str) -> None:
    """Read back what the engine pushed (manifest, config, layers) and keep the bytes; the
    manifest, written last, names what a complete copy holds. Every blob is checked by its
    digest."""
    blobs = folder.parent / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    with httpx.Client(base_url=f"http://{registry_host}", timeout=300) as http:
        answer = http.get(
            f"/v2/{repository}/manifests/{digest}", headers={"Accept": ", ".join(_MANIFEST_TYPES)}
        )
        answer.raise_for_status()
        body = answer.content
        if f"sha256:{hashlib.sha256(body).hexdigest()}" != digest:
            raise RuntimeError(f"the registry's manifest of {digest} has another digest")
        manifest = json.loads(body)
        for blob in (manifest["config"], *manifest["layers"]):
            target = blobs / blob["digest"].removeprefix("sha256:")
            if target.exists():
                continue
            partial = target.with_suffix(".partial")
            with http.stream("GET", f"/v2/{repository}/blobs/{blob['digest']}") as streamed:
                streamed.raise_for_status()
                with partial.open("wb") as fh:
                    for chunk in streamed.iter_bytes(1 << 20):
                        fh.write(chunk)
            if file_digest(partial) != blob["digest"]:
                partial.unlink()
                raise RuntimeError(f"the registry's blob {blob['digest']} has another digest")
            partial.rename(target)
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / "manifest.partial"
    partial.write_bytes(body)
    partial.rename(folder / "manifest.json")


def _kept(folder: Path) -> bool:
    """Whether a complete copy of an earlier push is kept: its manifest and every blob."""
    if not (folder / "manifest.json").exists():
        return False
    manifest = json.loads((folder / "manifest.json").read_bytes())
    blobs = folder.parent / "blobs"
    return all(
        (blobs / blob["digest"].removeprefix("sha256:")).exists()
        for blob in (manifest["config"], *manifest["layers"])
    )


def _upload_pushed(folder: Path, registry_host: str, repository: str) -> None:
    """Put the kept blobs (layers and config) into the repository, as the engine's push did."""
    from tests.support.images import Writer

    manifest = json.loads((folder / "manifest.json").read_bytes())
    mount_from = REPOSITORY if repository != REPOSITORY else None  # the base's own repository
    with Writer(registry_host) as writer:
        for blob in (*manifest["layers"], manifest["config"]):
            digest = blob["digest"]
            kept = folder.parent / "blobs" / digest.removeprefix("sha256:")
            writer.blob_file(repository, kept, digest, mount_from=mount_from)


def _engine_push(client_path: str, local: str, registry_host: str, repository: str) -> str:
    """``docker push`` of ``local`` as REGISTRY/REPOSITORY:SUITE; the manifest digest."""
    remote = f"{registry_host}/{repository}:{SUITE}"
    subprocess.run([client_path, "tag", local, remote], check=True)
    subprocess.run([client_path, "push", remote], check=True, capture_output=True)
    out = subprocess.run(
        [client_path, "image", "inspect", "--format", "{{json .RepoDigests}}", remote],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    digests: list[str] = [
        d for d in json.loads(out) if d.startswith(f"{registry_host}/{repository}@")
    ]
    subprocess.run([client_path, "rmi", remote], check=False, capture_output=True)
    if not digests:
        raise RuntimeError(f"the engine reported no digest for {remote} after the push")
    return digests[0].partition("@")[2]


def push_base(client_path: str, registry_host: str, repository: str = REPOSITORY) -> BaseImage:
    """Push the local base image to a registry and return it pinned by manifest digest.

    The engine pushes it; where the blobs of an earlier push of the same local image are
    kept, they are uploaded first, so the engine's push finds its layers there."""
    local = ensure_local_image(client_path)
    folder = _pushed_folder(client_path, local)
    with locked(cache_dir() / "base-push.lock"):
        kept = _kept(folder)
    if kept:
        _upload_pushed(folder, registry_host, repository)
    digest = _engine_push(client_path, local, registry_host, repository)
    if not kept:
        with locked(cache_dir() / "base-push.lock"):
            if not _kept(folder):
                _keep_pushed(folder, registry_host, repository, digest)
    return BaseImage(
        reference=f"{registry_host}/{repository}@{digest}",
        digest=digest,
        registry_host=registry_host,
        repository=repository,
        local_tag=local,
    )


def main() -> None:
    """`python -m tests.support.base_image [REGISTRY_HOST]`: warm the cache (and push)."""
    import sys

    client = shutil.which("docker") or "docker"
    print(base_tarball())
    if len(sys.argv) > 1:
        print(json.dumps(push_base(client, sys.argv[1]).__dict__))


if __name__ == "__main__":
    main()
