"""The base image every integration test and the demo build on, made without any upstream registry.

A Debian bookworm rootfs from mmdebstrap (python3, pip, PyAV, NumPy), imported into the local
engine and pushed to a loopback registry, so that it has a real manifest digest to pin. The
tarball is cached on disk keyed by its inputs, so a warm machine skips the 40 s debootstrap;
a lock file keeps parallel test runs from building it twice.
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


def _pushed_layers() -> Path:
    """Where the layer blobs an earlier push of the engine made are kept, by digest."""
    path = cache_dir() / f"base-{SUITE}-{cache_key()}-pushed-layers"
    path.mkdir(exist_ok=True)
    return path


def _seed_layers(registry_host: str, repository: str) -> None:
    """Upload the layer blobs the engine's earlier push of the base made into REPOSITORY.

    ``docker push`` compresses each layer it sends (the 730 MB layer: about 30 s on two
    cores, in every session, as each session's registry is new), but first asks the target
    repository for the compressed digests it made before; found there, the layer is not
    sent. Its gzip is the same bytes each time, so the blob kept from an earlier push is the
    one it asks for. Without the kept blobs (a cold machine) the push sends everything.
    """
    from tests.support.images import Writer

    kept = sorted(_pushed_layers().glob("sha256-*"))
    try:
        with Writer(registry_host) as writer:
            for path in kept:
                writer.blob(repository, path.read_bytes())
    except httpx.HTTPError:  # a registry that wants credentials: the push sends it all
        return


def _keep_layers(registry_host: str, repository: str, digest: str) -> None:
    """Keep the layer blobs of the pushed manifest for the next session's push."""
    from tests.support.images import Writer
    from tests.support.media_types import sha256

    folder = _pushed_layers()
    try:
        with Writer(registry_host) as writer:
            answer = writer.get_manifest(repository, digest)
            answer.raise_for_status()
            for layer in json.loads(answer.content)["layers"]:
                target = folder / str(layer["digest"]).replace(":", "-")
                if target.exists():
                    continue
                data = writer.get_blob(repository, layer["digest"])
                if sha256(data) != layer["digest"]:
                    continue
                partial = target.with_suffix(f".{os.getpid()}.partial")
                partial.write_bytes(data)
                partial.rename(target)
    except httpx.HTTPError:  # a registry that wants credentials: nothing kept this time
        return


def push_base(client_path: str, registry_host: str, repository: str = REPOSITORY) -> BaseImage:
    """Push the local base image to a registry and return it pinned by manifest digest."""
    local = ensure_local_image(client_path)
    remote = f"{registry_host}/{repository}:{SUITE}"
    subprocess.run([client_path, "tag", local, remote], check=True)
    _seed_layers(registry_host, repository)
    subprocess.run([client_path, "push", remote], check=True, capture_output=True)
    out = subprocess.run(
        [client_path, "image", "inspect", "--format", "{{json .RepoDigests}}", remote],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    digests = [d for d in json.loads(out) if d.startswith(f"{registry_host}/{repository}@")]
    subprocess.run([client_path, "rmi", remote], check=False, capture_output=True)
    if not digests:
        raise RuntimeError(f"the engine reported no digest for {remote} after the push")
    digest = digests[0].partition("@")[2]
    _keep_layers(registry_host, repository, digest)
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
