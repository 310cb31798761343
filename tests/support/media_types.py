"""The media types of the OCI image and Docker distribution specs, and a blob's digest, as the
test writers (images.py, oci_layout.py, upstream.py) put them into registries and layouts.

Spelled out here rather than taken from imagekit: the tests write what the specs say, so a
wrong constant in the code under test shows instead of being copied into its own check.
"""

from __future__ import annotations

import hashlib

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_TAR = "application/vnd.oci.image.layer.v1.tar"
OCI_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
OCI_NONDIST_GZIP = "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DOCKER_FOREIGN = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"


def sha256(data: bytes) -> str:
    """The digest of ``data`` as descriptors write it: ``sha256:<hex>``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()
