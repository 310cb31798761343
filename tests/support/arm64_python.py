"""A linux/arm64 root with a real python3, for images that must run (emulated) on amd64.

Registry-builder tests assemble arm64 images and run their assertions and audit through
qemu-user-static. Those need arm64 programs, so this is Debian's own python3 for arm64,
unpacked by ``mmdebstrap --variant=extract`` (packages unpacked, no maintainer scripts run:
about 10 s and 75 MB, against nearly two minutes for a full arm64 bootstrap). The tarball is
cached under the user's cache folder, keyed by its inputs, behind a lock.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.support.base_image import SUITE, cached_rootfs, mmdebstrap_version

PACKAGES = ("python3", "python3-pip")


def cache_key() -> str:
    inputs = {
        "suite": SUITE,
        "variant": "extract",
        "include": sorted(PACKAGES),
        "arch": "arm64",
        "mmdebstrap": mmdebstrap_version(),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def arm64_python_tarball() -> Path:
    """The cached arm64 rootfs tarball (python3, pip and what they need), made on first use."""
    return cached_rootfs(
        f"arm64-python-{SUITE}-{cache_key()}",
        "arm64-python.lock",
        [
            "--variant=extract",
            "--arch=arm64",
            "--include=" + ",".join(PACKAGES),
            "--customize-hook=rm -rf $1/var/lib/apt/lists/* $1/usr/share/doc/* $1/var/cache/apt/*",
        ],
    )


# dash and coreutils too: a build's RUN steps need /bin/sh (which dash ships), and the overlay
# guard readlink, sha256sum and cut (an extract has only what the packages named here depend
# on). What their maintainer scripts would make is not there (an extract runs none, nor any
# customize hook): tests/support/demo_index.py lays it over as a layer of its own.
DEMO_PACKAGES = ("python3", "python3-pip", "python3-av", "python3-numpy", "dash", "coreutils")


def arm64_demo_tarball() -> Path:
    """The demo base's packages (python3, pip, PyAV, NumPy) for linux/arm64, unpacked the
    same way: the arm64 half of the two-platform demo's base index (PyAV's about.py is
    architecture-independent, so the demo's overlay guard holds on both)."""
    inputs = {
        "suite": SUITE,
        "variant": "extract",
        "include": sorted(DEMO_PACKAGES),
        "arch": "arm64",
        "mmdebstrap": mmdebstrap_version(),
    }
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    return cached_rootfs(
        f"arm64-demo-{SUITE}-{key}",
        "arm64-demo.lock",
        [
            "--variant=extract",
            "--arch=arm64",
            "--include=" + ",".join(DEMO_PACKAGES),
            "--customize-hook=rm -rf $1/var/lib/apt/lists/* $1/usr/share/doc/* $1/var/cache/apt/*",
        ],
    )
