"""GPU probe reports written for the tests, in the probe's own shape (imagekit/gpu/probe.py).

``report()`` builds one whose figures are consistent with each other as the probe computes
them (bytes of each size, algbw = bytes / time, busbw = algbw x 2(n-1)/n, rounded as the
probe rounds), so that a test changes one fact and sees the verdict that fact alone makes.
The shapes follow the real reports kept in evidence/gpu-preflight/ (tests/fixtures/gpu/).
"""

from __future__ import annotations

import copy
import json
from typing import Any

MIB = 1024 * 1024
MARKER = "@@IMAGEKIT_GPU_REPORT@@ "


def _size(size_mib: float, world: int, seconds: float) -> dict[str, Any]:
    numel = max(1, int(size_mib * MIB) // 4)
    nbytes = numel * 4
    algbw = nbytes / seconds / 1e9
    busbw = algbw * 2 * (world - 1) / world
    return {
        "size_mib": size_mib,
        "bytes": nbytes,
        "slowest_rank_mean_s": seconds,
        "slowest_rank_mean_us": round(seconds * 1e6, 2),
        "algbw_gbps": round(algbw, 3),
        "busbw_gbps": round(busbw, 3),
        "all_elements_right": True,
    }


def report(
    gpus: int = 8,
    *,
    name: str = "NVIDIA H20",
    memory_gib: float = 95.0,
    capability: str = "9.0",
    host: str = "gpu-node-07",
    sizes: tuple[float, ...] = (1.0, 16.0, 128.0),
    mode: str = "gpu",
    uuids: list[str] | None = None,
) -> dict[str, Any]:
    """A passing report of GPUS ranks, one GPU each, on HOST."""
    uuids = uuids or [f"GPU-{rank:08d}-0000-0000-0000-000000000000" for rank in range(gpus)]
    memory_bytes = int(memory_gib * 1024**3)
    facts = [
        {
            "capability": capability,
            "cpu_list": "0-15",
            "ecc_uncorrected_aggregate": 0,
            "ecc_uncorrected_volatile": 0,
            "host": host,
            "index": rank,
            "memory_bytes": memory_bytes,
            "memory_gib": round(memory_bytes / 1024**3, 2),
            "mig_mode": "Disabled",
            "multiprocessors": 78,
            "name": name,
            "numa_node": 0,
            "nvidia_smi_index": str(rank),
            "pci_bus_id": f"0000:{rank:02x}:00.0",
            "rank": rank,
            "uuid": uuids[rank],
        }
        for rank in range(gpus)
    ]
    arch = {
        "arch_list": ["sm_80", "sm_90", "sm_100"],
        "reason": f"compiled arches cover capability {capability}",
        "source": "torch._C._cuda_getArchFlags()",
        "status": "PASS",
    }
    bf16 = {
        "bound": 0.01,
        "finite": True,
        "note": "one untimed-warm-up-free product; a sanity figure, not a benchmark",
        "reason": "finite, 0.0017 relative to FP32 (bound 0.01)",
        "reference": "FP32 product of the same BF16-rounded inputs (TF32 off)",
        "relative_error": 0.0017,
        "seconds": 0.09,
        "size": [4096, 4096, 4096],
        "status": "PASS",
    }
    ranks = [
        {
            "arch": arch,
            "bf16": bf16,
            "device": {k: facts[rank][k] for k in ("capability", "index", "name", "uuid")},
            "expectation_problems": [],
            "host": host,
            "local_rank": rank,
            "rank": rank,
        }
        for rank in range(gpus)
    ]
    return copy.deepcopy(
        {
            "probe": "imagekit-gpu-preflight",
            "probe_version": 1,
            "mode": mode,
            "scope": "a hardware and communication check",
            "host": host,
            "started_at": "2026-12-05T10:00:00Z",
            "finished_at": "2026-12-05T10:00:30Z",
            "launched_by": "torch.distributed.run",
            "world_size": gpus,
            "local_world_size": gpus,
            "backend": "gloo" if mode == "self-test" else "nccl",
            "python": "3.12.3",
            "versions": {"torch": "2.11.0+cu130", "cuda": "13.0", "nccl": "2.28.3"},
            "environment": {"NCCL_NVLS_ENABLE": "0"},
            "nvlink_multicast": "off (NCCL_NVLS_ENABLE=0)",
            "ranks": ranks,
            "checks": {
                "gpus": {
                    "status": "PASS",
                    "reason": f"{gpus} GPU(s): {name}",
                    "expected": {},
                    "present": gpus,
                    "visible_on_rank0_node": gpus,
                    "gpus": facts,
                    "nvidia_smi": "answered",
                },
                "arch": {"status": "PASS", "reason": arch["reason"], "ranks": [arch] * gpus},
                "bf16": {"status": "PASS", "reason": bf16["reason"], "ranks": [bf16] * gpus},
                "all_reduce": {
                    "status": "PASS",
                    "reason": "every element right",
                    "sizes": [_size(s, gpus, 0.0004 * s + 0.00002) for s in sizes],
                    "warmups": 5,
                    "iterations": 20,
                    "dtype": "float32",
                    "op": "sum",
                    "world_size": gpus,
                    "busbw_formula": "algbw * 2(n-1)/n (nccl-tests)",
                    "min_busbw_gbps": None,
                },
                "topology": {
                    "status": "RECORDED",
                    "reason": "nvidia-smi topo -m, recorded, not judged",
                    "devices": ["GPU0"],
                    "matrix": {"GPU0": {"GPU0": "X"}},
                    "affinity": {},
                    "legend": "",
                    "notes": [],
                },
            },
            "errors": [],
        }
    )


def encoded(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True).encode()


def log_of(*documents: dict[str, Any]) -> bytes:
    """A Job's log: the launcher's lines, then each report as one marked line."""
    lines = ["WARNING:torch.distributed.run: *****", "Setting OMP_NUM_THREADS to 1"]
    lines += [MARKER + json.dumps(d, sort_keys=True) for d in documents]
    return ("\n".join(lines) + "\n").encode()
