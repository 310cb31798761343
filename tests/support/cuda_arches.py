"""Whether compiled CUDA arches cover a device, as CUDA loads them: the cases both probes
are held to. The audit's probe (imagekit/audit/probe.py) and the GPU preflight's
(imagekit/gpu/probe.py) each run as one file inside an image, so each carries its own
``covers``; one table here keeps the two on the same rule."""

from __future__ import annotations

# (arches the image's torch was built for, the device's compute capability, covered?)
COVERS: list[tuple[list[str], tuple[int, int], bool]] = [
    (["sm_80", "sm_90"], (9, 0), True),
    (["sm_80", "sm_86"], (9, 0), False),
    (["sm_80", "compute_80"], (9, 0), True),  # PTX is JIT-compiled upwards
    (["sm_80", "compute_90"], (10, 0), True),  # ... for a newer device too
    (["sm_90a"], (9, 0), True),
    (["sm_90a"], (10, 0), False),  # arch-specific code runs on 9.0 only
    (["sm_86"], (8, 9), True),  # same major, higher minor
    (["sm_100"], (10, 3), True),
    ([], (9, 0), False),
]
COVERS_IDS = [
    f"{'+'.join(arches) or 'nothing'} on {major}.{minor}" for arches, (major, minor), _ in COVERS
]
