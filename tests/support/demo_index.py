"""The demo base as an index of two platforms: the amd64 fixture and its arm64 counterpart.

The demo base fixture (tests/support/base_image.py) is linux/amd64 only, imported into the
engine and pushed by it. Its linux/arm64 counterpart holds the same Debian packages (python3,
pip, PyAV, NumPy) for arm64 (tests/support/arm64_python.py, unpacked without running their
maintainer scripts), so the demo plan's overlay guard (PyAV's about.py, the same file on
every architecture) and its assertions hold on both. The two are written into the same
repository and an OCI index names them, as an upstream multi-platform base does.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import tarfile
from pathlib import Path

from tests.support.arm64_python import arm64_demo_tarball, arm64_python_tarball
from tests.support.base_image import BaseImage, locked
from tests.support.images import Blob, M, Pushed, Writer
from tests.support.media_types import DOCKER_MANIFEST, OCI_GZIP, sha256


def _compressed(tarball: Path) -> Path:
    """The tarball gzipped once (level 1) beside it in the cache; the blob a registry holds."""
    target = tarball.with_suffix(".tar.gz")
    with locked(tarball.with_suffix(".gz.lock")):
        if not target.exists():
            partial = target.with_suffix(".partial")
            with (
                tarball.open("rb") as src,
                gzip.GzipFile(partial, "wb", compresslevel=1, mtime=0) as dst,
            ):
                shutil.copyfileobj(src, dst, 1 << 20)
            partial.rename(target)
    return target


# What libblas3's and liblapack3's maintainer scripts register with update-alternatives, and
# NumPy (which PyAV imports) loads: the extract ran no maintainer script.
_GNU = "usr/lib/aarch64-linux-gnu"
ALTERNATIVES = Blob.gzip(
    [
        M(f"{_GNU}/libblas.so.3", "symlink", link="blas/libblas.so.3"),
        M(f"{_GNU}/liblapack.so.3", "symlink", link="lapack/liblapack.so.3"),
    ]
)


def _layer(tarball: Path) -> Blob:
    return Blob(tarball.read_bytes(), _compressed(tarball).read_bytes(), OCI_GZIP)


def arm64_demo_layer() -> Blob:
    return _layer(arm64_demo_tarball())


def arm64_python_layer() -> Blob:
    """The arm64 python3 rootfs (tests/support/arm64_python.py) as one layer, its gzip
    made once and cached beside the tarball (the same blob in every session)."""
    return _layer(arm64_python_tarball())


def push_demo_index(writer: Writer, base: BaseImage, layer: Blob) -> str:
    """Push the arm64 half beside the engine-pushed amd64 base; the index, pinned by digest."""
    answer = writer.get_manifest(base.repository, base.digest)
    answer.raise_for_status()
    assert answer.headers["Content-Type"] == DOCKER_MANIFEST, answer.headers["Content-Type"]
    amd = Pushed(base.reference, base.digest, DOCKER_MANIFEST, answer.content, b"")
    assert sha256(answer.content) == base.digest
    arm = writer.image(
        base.repository,
        "demo-arm64",
        [layer, ALTERNATIVES],
        arch="arm64",
        variant="v8",
        config={"config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "Cmd": ["python3"]}},
    )
    return writer.index(
        base.repository, "demo-multi", [(amd, "linux/amd64"), (arm, "linux/arm64/v8")]
    )


def with_debian_pip(writer: Writer, repository: str, manifest_digest: str) -> str:
    """The arm64 image at ``manifest_digest`` with Debian's python3-pip laid over it.

    The h3 replica installs its wheel with a pip from outside the image and ships none; the
    image it stands in for has one, and a plan's pip step needs it. The layer is Debian's
    dist-packages folder (pip, setuptools, wheel) of the same release for arm64
    (tests/support/arm64_python.py), and nothing else of that tarball (its unmerged /bin
    would hide the replica's). The new manifest reuses the image's own blobs; returns
    host/repo@digest.
    """
    answer = writer.get_manifest(repository, manifest_digest)
    answer.raise_for_status()
    manifest = json.loads(answer.content)
    config = json.loads(writer.get_blob(repository, manifest["config"]["digest"]))
    tar = _dist_packages(arm64_python_tarball())
    pip = Blob(tar, gzip.compress(tar, compresslevel=1, mtime=0), OCI_GZIP)
    writer.blob(repository, pip.blob)
    config["rootfs"]["diff_ids"].append(pip.diff_id)
    config.setdefault("history", []).append({"created_by": "python3-pip (Debian, arm64)"})
    config_bytes = json.dumps(config).encode()
    writer.blob(repository, config_bytes)
    manifest["config"] = {**manifest["config"], "digest": sha256(config_bytes),
                          "size": len(config_bytes)}  # fmt: skip
    manifest["layers"].append({"mediaType": OCI_GZIP, "digest": pip.digest, "size": len(pip.blob)})
    body = json.dumps(manifest).encode()
    media_type = answer.headers["Content-Type"]
    return f"{writer.host}/{repository}@{writer.manifest(repository, 'with-pip', body, media_type)}"


def _dist_packages(tarball: Path) -> bytes:
    """The members of ``tarball`` under usr/lib/python3/dist-packages, as a tar of their own."""
    out = io.BytesIO()
    with tarfile.open(tarball) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src:
            if member.name.lstrip("./").startswith("usr/lib/python3/dist-packages"):
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    return out.getvalue()
