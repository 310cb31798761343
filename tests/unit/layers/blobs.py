"""Layer blobs the layer tests share: a reproducible tar, its digest, and the chunked stream
a registry would hand over, for the diffID (test_diffid) and the readable stream (test_reader)."""

from __future__ import annotations

import hashlib
import io
import random
import struct
import tarfile
from collections.abc import Iterator

GZ = "application/vnd.docker.image.rootfs.diff.tar.gzip"
OCI_GZ = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
OCI_TAR = "application/vnd.oci.image.layer.v1.tar"
MiB = 1 << 20


def make_tar(seed: int = 1, files: int = 5, size: int = 300_000) -> bytes:
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not secrets
    words = [rng.randbytes(4).hex()[: rng.randint(2, 8)] for _ in range(500)]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i in range(files):
            data = " ".join(rng.choices(words, k=size // 5)).encode()[:size]
            info = tarfile.TarInfo(f"dir/file{i}.txt")
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def chunked(data: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def skippable(payload: bytes, nibble: int = 0) -> bytes:
    return struct.pack("<II", 0x184D2A50 | nibble, len(payload)) + payload
