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
import shutil
from pathlib import Path

from tests.support.arm64_python import arm64_demo_tarball
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


def arm64_demo_layer() -> Blob:
    tarball = arm64_demo_tarball()
    return Blob(tarball.read_bytes(), _compressed(tarball).read_bytes(), OCI_GZIP)


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
