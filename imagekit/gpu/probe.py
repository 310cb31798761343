#!/usr/bin/env python3
"""imagekit's GPU preflight probe: one file of standard-library Python plus the torch it finds.

It runs where the GPUs are: inside the serving image under test (the engine gives it the
GPUs) or in a GPU host's own Python, always under torch's own launcher, one process a GPU::

    python3 -m torch.distributed.run --nproc-per-node N probe.py --out REPORT.json \\
        --spec-json '{"expect": {...}, "sizes_mib": [1, 16, 128], ...}'

Several nodes join through the launcher's own rendezvous options (``--nnodes``,
``--node-rank``, ``--rdzv-backend``, ``--rdzv-endpoint``), which imagekit passes through; the
probe reads only the variables the launcher sets (RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR). Run without the launcher it is a world of one.

Every rank checks its own GPU (model, memory, capability, the compiled arches, a BF16 product
against an FP32 one) and takes part in NCCL all-reduces whose every element is compared with
the exact expected sum; rank 0 gathers the ranks' results through the process group, adds
what ``nvidia-smi`` says of the node (ECC, MIG, the topology matrix, NUMA and CPU affinity),
and writes ONE JSON report. Like the audit's probe it decides nothing about the overall
status: each check says PASS, FAIL, INCOMPLETE, SKIPPED or RECORDED (the topology, which is
written down and never judged), and imagekit turns them into GPU_PREFLIGHT_PASS, _FAIL or
_INCOMPLETE, so an image cannot talk its way into a pass.

``--self-test`` runs the same code with the backend and device swapped (gloo, CPU): it proves
the probe's own logic where no GPU is (CI), and its report says "CPU self-test, not a GPU
preflight"; imagekit never calls it a pass.

Images ship old interpreters, so this file keeps to Python 3.8: no ``match``, no
``str.removeprefix``, no runtime-subscripted builtins.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time
import traceback
from typing import Any

_STARTED = time.perf_counter()

PROBE_NAME = "imagekit-gpu-preflight"
PROBE_VERSION = 1
PASS, FAIL, INCOMPLETE, SKIPPED, RECORDED = "PASS", "FAIL", "INCOMPLETE", "SKIPPED", "RECORDED"
MIB = 1024 * 1024
REPORT_MARKER = "@@IMAGEKIT_GPU_REPORT@@ "
#: Each rank's own line in a Job's log (``--out -``): see rank_line.
RANK_MARKER = "@@IMAGEKIT_GPU_RANK@@ "
GPU_SCOPE = (
    "a hardware and communication check of the GPUs this process group ran on: no weights "
    "loaded, no serving engine started, not a performance benchmark"
)
SELF_TEST_SCOPE = (
    "CPU self-test, not a GPU preflight: the probe's own logic ran on CPU through torch's "
    "gloo backend; no GPU, NVLink or NCCL was checked"
)
# The BF16 product is compared with an FP32 product of the same (BF16-rounded) inputs, so
# the difference is the BF16 kernel's accumulation and output rounding alone: about 2^-9
# relative for a working kernel, near 1 for a broken one that still returns finite numbers.
BF16_REL_ERROR_BOUND = 1e-2
# Environment variables worth keeping in the report: they change what NCCL does.
_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_SYMM_MEM", "NVSHMEM_", "CUDA_VISIBLE_DEVICES")
_ENV_KEYS = ("NVIDIA_VISIBLE_DEVICES", "OMP_NUM_THREADS")
_NVIDIA_SMI_TIMEOUT_S = 30.0


def utc_now() -> str:
    now = datetime.datetime.now(datetime.timezone.utc)  # UTC is a 3.11 name
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def check(status: str, reason: str, **data: Any) -> dict[str, Any]:
    """One check's result: its status, one sentence why, and its numbers."""
    result = {"status": status, "reason": reason}
    result.update(data)
    return result


# --------------------------------------------------------------------------- nvidia-smi


def run_nvidia_smi(args: list[str]) -> tuple[str | None, str | None]:
    """(stdout, None) or (None, why it did not answer)."""
    try:
        proc = subprocess.run(  # noqa: S603 - a fixed program, our own arguments
            ["nvidia-smi", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=_NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        return None, "nvidia-smi is not on PATH"
    except subprocess.TimeoutExpired:
        return None, "nvidia-smi did not answer in %.0f s" % _NVIDIA_SMI_TIMEOUT_S
    except OSError as exc:
        return None, "nvidia-smi could not run: %s" % exc
    text = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip() or text.strip()
        return None, "nvidia-smi exited %d: %s" % (proc.returncode, err[:300])
    return text, None


_QUERY_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "memory.total",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "mig.mode.current",
    "driver_version",
)


def _smi_value(text: str) -> str | None:
    value = text.strip()
    if value in ("", "[N/A]", "N/A", "[Not Supported]", "Not Supported"):
        return None
    return value


def parse_gpu_query(text: str) -> list[dict[str, Any]]:
    """Rows of ``nvidia-smi --query-gpu=<_QUERY_FIELDS> --format=csv,noheader,nounits``."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(_QUERY_FIELDS):
            continue
        row: dict[str, Any] = {}
        for key, raw in zip(_QUERY_FIELDS, parts):
            row[key] = _smi_value(raw)
        for key in (
            "memory.total",
            "ecc.errors.uncorrected.volatile.total",
            "ecc.errors.uncorrected.aggregate.total",
        ):
            value = row[key]
            row[key] = int(value) if value is not None and value.isdigit() else None
        rows.append(row)
    return rows


_GPU_LABEL = re.compile(r"^(GPU\d+|NIC\d+|mlx\S+)$")


def parse_topology(text: str) -> dict[str, Any]:
    """``nvidia-smi topo -m`` as data: the link between every pair of GPUs (and NICs), and each
    GPU's CPU affinity, NUMA affinity and GPU NUMA ID where the table has those columns.

    The table is a header row of device labels followed by the affinity columns (nvidia-smi
    underlines it with terminal escapes, which are dropped), then one row a device; cells
    are separated by tabs (spaces in some captures). The legend after it is kept as text.
    Anything that does not fit is left out and said in ``notes``.
    """
    # nvidia-smi underlines the header row with terminal escapes, even into a pipe
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = [line.rstrip("\n") for line in text.splitlines()]
    header_index = None
    for index, line in enumerate(lines):
        cells = line.split()
        if cells and cells[0].startswith("GPU0"):
            header_index = index
            break
        if len(cells) > 1 and cells[0].startswith("GPU") and "Affinity" in line:
            header_index = index
            break
    if header_index is None:
        return {"devices": [], "matrix": {}, "affinity": {}, "notes": ["no GPU header row"]}
    header_line = lines[header_index]
    # Column names: device labels, then affinity columns whose names have spaces.
    names = [c.strip() for c in re.split(r"\t+|\s{2,}", header_line.strip()) if c.strip()]
    devices = [n for n in names if _GPU_LABEL.match(n)]
    extra = [n for n in names if not _GPU_LABEL.match(n)]
    matrix: dict[str, dict[str, str]] = {}
    affinity: dict[str, dict[str, str]] = {}
    notes: list[str] = []
    for line in lines[header_index + 1 :]:
        if not line.strip():
            break
        cells = [c.strip() for c in re.split(r"\t+|\s{2,}", line.strip()) if c.strip()]
        if not cells or not _GPU_LABEL.match(cells[0]):
            break
        label = cells[0]
        values = cells[1:]
        links = values[: len(devices)]
        rest = values[len(devices) :]
        if len(links) < len(devices):
            notes.append("row %s has %d links for %d devices" % (label, len(links), len(devices)))
        matrix[label] = dict(zip(devices, links))
        if rest:
            affinity[label] = dict(zip(extra, rest))
    legend = "\n".join(
        line
        for line in lines
        if line.strip().startswith(("X ", "SYS", "NODE", "PHB", "PXB", "PIX", "NV#", "Legend"))
    )
    return {
        "devices": devices,
        "matrix": matrix,
        "affinity": affinity,
        "legend": legend,
        "notes": notes,
    }


def sysfs_locality(bus_id: str | None) -> dict[str, Any]:
    """The NUMA node and CPU list the kernel gives the GPU's PCI device (None where unread)."""
    if not bus_id:
        return {"numa_node": None, "cpu_list": None}
    # nvidia-smi writes 00000000:18:00.0; sysfs names it 0000:18:00.0
    domain, _, rest = bus_id.lower().partition(":")
    path = "/sys/bus/pci/devices/%s:%s" % (domain[-4:], rest)
    found: dict[str, Any] = {"numa_node": None, "cpu_list": None}
    try:
        with open(os.path.join(path, "numa_node")) as handle:
            node = int(handle.read().strip())
        found["numa_node"] = node if node >= 0 else None
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(path, "local_cpulist")) as handle:
            found["cpu_list"] = handle.read().strip() or None
    except OSError:
        pass
    return found


# --------------------------------------------------------------------------- torch side


def arch_flags(torch: Any) -> tuple[list[str], str]:
    """The arches torch was compiled for (its build flags; get_arch_list as a fallback)."""
    getter = getattr(getattr(torch, "_C", None), "_cuda_getArchFlags", None)
    if callable(getter):
        flags = getter()
        if flags:
            return [str(a) for a in str(flags).split()], "torch._C._cuda_getArchFlags()"
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and hasattr(cuda, "get_arch_list"):
        return [str(a) for a in cuda.get_arch_list()], "torch.cuda.get_arch_list()"
    return [], "none"


def covers(arch_list: list[str], major: int, minor: int) -> bool:
    """Whether compiled arches run on a device of this compute capability: sm_XY machine code
    on the same major at minor >= Y (sm_90a only on 9.0); compute_XY PTX on any device at or
    above XY (JIT)."""
    cap = major * 10 + minor
    for arch in arch_list:
        match = re.match(r"^(sm|compute)_(\d+)([a-z]?)$", arch)
        if not match:
            continue
        value = int(match.group(2))
        amaj, amin = divmod(value, 10)
        if match.group(1) == "sm":
            if match.group(3):
                if value == cap:
                    return True
            elif amaj == major and amin <= minor:
                return True
        elif value <= cap:
            return True
    return False


def device_facts(torch: Any, index: int) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    uuid_text = None if uuid is None else str(uuid)
    if uuid_text is not None and not uuid_text.startswith("GPU-"):
        uuid_text = "GPU-" + uuid_text  # nvidia-smi's spelling, to match its rows
    facts = {
        "index": index,
        "name": str(props.name),
        "memory_bytes": int(props.total_memory),
        "memory_gib": round(int(props.total_memory) / 1024**3, 2),
        "capability": "%d.%d" % (props.major, props.minor),
        "multiprocessors": int(getattr(props, "multi_processor_count", 0)),
        "uuid": uuid_text,
    }
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        facts["pci_bus_id"] = str(bus)
    return facts


def name_matches(pattern: str, name: str) -> bool:
    """Whether PATTERN names the GPU as a whole token of its name, case aside: ``H20`` is
    "NVIDIA H20" and "NVIDIA H20-3e", never "NVIDIA H200" (a prefix is another GPU)."""
    token = r"(?<![A-Za-z0-9])(?:%s)(?![A-Za-z0-9])" % pattern
    return re.search(token, name, re.IGNORECASE) is not None


def expectation_problems(facts: dict[str, Any], expect: dict[str, Any]) -> list[str]:
    """What of one GPU's facts does not meet the expectations (count is judged by rank 0)."""
    problems = []
    pattern = expect.get("name")
    if pattern and not name_matches(str(pattern), facts["name"]):
        problems.append("name %r does not match %r" % (facts["name"], pattern))
    min_memory = expect.get("min_memory_gib")
    if min_memory is not None and facts["memory_bytes"] < float(min_memory) * 1024**3:
        problems.append("memory %.2f GiB < %s GiB" % (facts["memory_gib"], min_memory))
    min_cap = expect.get("min_capability")
    if min_cap:
        want = tuple(int(x) for x in str(min_cap).split("."))
        have = tuple(int(x) for x in facts["capability"].split("."))
        if have < want:
            problems.append("capability %s < %s" % (facts["capability"], min_cap))
    return problems


def bf16_check(torch: Any, device: Any, size: int) -> dict[str, Any]:
    """A BF16 product against an FP32 product of the same BF16-rounded inputs."""
    generator = torch.Generator(device="cpu").manual_seed(1234)
    a = torch.randn(size, size, generator=generator).to(device)
    b = torch.randn(size, size, generator=generator).to(device)
    a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
    old_tf32 = None
    if device.type == "cuda":
        old_tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False  # the reference is true FP32
    try:
        reference = a16.float() @ b16.float()
        synchronize(torch, device)
        started = time.perf_counter()
        product = a16 @ b16
        synchronize(torch, device)
        seconds = time.perf_counter() - started
    finally:
        if old_tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32 = old_tf32
    finite = bool(torch.isfinite(product).all().item())
    diff = (product.float() - reference).norm().item()
    scale = reference.norm().item()
    rel = diff / scale if scale else float("inf")
    data = {
        "size": [size, size, size],
        "finite": finite,
        "relative_error": rel,
        "bound": BF16_REL_ERROR_BOUND,
        "reference": "FP32 product of the same BF16-rounded inputs (TF32 off)",
        "seconds": round(seconds, 6),
        "note": "one untimed-warm-up-free product; a sanity figure, not a benchmark",
    }
    if not finite:
        return check(FAIL, "the BF16 product has non-finite values", **data)
    if not rel <= BF16_REL_ERROR_BOUND:
        return check(
            FAIL,
            "the BF16 product differs from FP32 by %.3g relative (bound %g)"
            % (rel, BF16_REL_ERROR_BOUND),
            **data,
        )
    return check(
        PASS, "finite, %.2g relative to FP32 (bound %g)" % (rel, BF16_REL_ERROR_BOUND), **data
    )


def synchronize(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _pattern(torch: Any, numel: int, device: Any, rank: int) -> Any:
    """Rank r's contribution: r + 1 plus (i mod 251) at element i, exact in FP32."""
    base = torch.arange(numel, dtype=torch.float32, device=device).remainder_(251)
    return base.add_(float(rank + 1))


def _expected(torch: Any, numel: int, device: Any, world: int) -> Any:
    base = torch.arange(numel, dtype=torch.float32, device=device).remainder_(251)
    return base.mul_(float(world)).add_(float(world * (world + 1) // 2))


def all_reduce_size(
    torch: Any,
    dist: Any,
    device: Any,
    rank: int,
    world: int,
    size_mib: float,
    warmups: int,
    iterations: int,
    skip: bool,
) -> dict[str, Any]:
    """One size: every element checked before and after the timed runs; this rank's mean."""
    numel = max(1, int(size_mib * MIB) // 4)
    nbytes = numel * 4
    expected = _expected(torch, numel, device, world)
    if skip:  # fault injection: this rank never joins (the others wait until the timeout)
        time.sleep(10**6)
    wrong = _checked_all_reduce(torch, dist, device, rank, expected, "before the timed runs")
    work = torch.zeros(numel, dtype=torch.float32, device=device)
    for _ in range(warmups):
        dist.all_reduce(work)
    synchronize(torch, device)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(work)
    synchronize(torch, device)
    mean_s = (time.perf_counter() - started) / max(1, iterations)
    wrong += _checked_all_reduce(torch, dist, device, rank, expected, "after the timed runs")
    return {
        "size_mib": size_mib,
        "bytes": nbytes,
        "elements": numel,
        "mean_s": mean_s,
        "wrong": wrong,
    }


def _checked_all_reduce(
    torch: Any, dist: Any, device: Any, rank: int, expected: Any, when: str
) -> list[str]:
    """One all-reduce of this rank's pattern, every element compared with the exact sum."""
    data = _pattern(torch, expected.numel(), device, rank)
    dist.all_reduce(data)
    synchronize(torch, device)
    differs = data != expected
    bad = int(differs.sum().item())
    if not bad:
        return []
    first = int(differs.nonzero()[0].item())
    return [
        "%s: %d of %d elements wrong (first at %d: %r, expected %r)"
        % (when, bad, expected.numel(), first, float(data[first]), float(expected[first]))
    ]


def bandwidths(nbytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algorithm, bus) bandwidth in GB/s as nccl-tests defines them for all-reduce:
    algbw = bytes / time, busbw = algbw * 2(n-1)/n (0 for one rank: no link is crossed)."""
    if seconds <= 0:
        return 0.0, 0.0
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (world - 1) / world


def run_cli(command: dict[str, Any]) -> dict[str, Any]:
    """One serving CLI re-check on the GPU host: it parses and its help lists every flag."""
    argv = [sys.executable if a == "{python}" else str(a) for a in command.get("argv", [])]
    timeout = float(command.get("timeout_s", 120))
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (command.get("env") or {}).items()})
    required = [str(f) for f in command.get("required_flags", [])]
    try:
        proc = subprocess.run(  # noqa: S603 - argv comes from imagekit's profile
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return check(INCOMPLETE, "%s timed out after %.0f s" % (" ".join(argv), timeout), argv=argv)
    except OSError as exc:
        return check(FAIL, "%s could not run: %s" % (" ".join(argv), exc), argv=argv)
    text = proc.stdout.decode("utf-8", "replace")
    missing = [
        f for f in required if re.search(r"(?<![\w-])" + re.escape(f) + r"(?![\w-])", text) is None
    ]
    data = {
        "argv": argv,
        "exit_code": proc.returncode,
        "output_tail": text[-4000:],
        "missing_flags": missing,
    }
    if proc.returncode != 0:
        return check(FAIL, "%s exited %d" % (" ".join(argv), proc.returncode), **data)
    if missing:
        return check(FAIL, "help does not list %s" % ", ".join(missing), **data)
    return check(
        PASS, "%s parsed; help lists %d required flag(s)" % (" ".join(argv), len(required)), **data
    )


# --------------------------------------------------------------------------- health
#
# The node's health beyond one product and one all-reduce, as the cluster health checks
# read it (DCGM's diagnostic, azurehpc-health-checks, GKE's and EKS's node checks): memory
# errors, the kernel log's XID events, clock throttling under load, the PCIe link and copy
# bandwidths, NVLink, other processes, the fabric manager, the driver against the runtime.
# Each judge below is a pure function of the check's numbers (as the report carries them)
# and the thresholds imagekit sent: imagekit runs the same functions again on the numbers
# (imagekit/gpu/health.py), so a report cannot talk its way into a pass with its words.

LEVELS = ("quick", "standard", "extended")
#: XID events that mean a GPU needs attention; every other XID is recorded, not judged.
#: imagekit sends its own list (its GPU profiles name their sources); this is the fallback.
#: azurehpc-health-checks' list (customTests/azure_gpu_xid.nhc, XID_EC).
DEFAULT_FATAL_XIDS = (48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120)
_XID_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+)(.*)")
_NVLINK_STATE = re.compile(r"^\s*Link (\d+): (.+?)\s*$")
_NVLINK_COUNTER = re.compile(r"^\s*Link (\d+): ([A-Za-z][A-Za-z0-9 ./_-]*?): (\d+)\s*$")
_GPU_HEADER = re.compile(r"^GPU (\d+): (.*?) \(UUID: (GPU-[0-9A-Fa-f-]+)\)")
# nvidia-smi's query fields (the "throttle" spelling: newer drivers take it as an alias of
# "clocks_event_reasons", older ones know only it) and the names the samples give them.
_THROTTLE_FIELDS = (
    ("uuid", "uuid"),
    ("clocks_throttle_reasons.hw_slowdown", "hw_slowdown"),
    ("clocks_throttle_reasons.hw_thermal_slowdown", "hw_thermal_slowdown"),
    ("clocks_throttle_reasons.hw_power_brake_slowdown", "hw_power_brake_slowdown"),
    ("clocks_throttle_reasons.sw_thermal_slowdown", "sw_thermal_slowdown"),
    ("clocks_throttle_reasons.sw_power_cap", "sw_power_cap"),
    ("clocks.sm", "sm_clock_mhz"),
    ("pcie.link.gen.current", "pcie_gen"),
    ("temperature.gpu", "temperature_c"),
    ("power.draw", "power_w"),
)
_THROTTLE_QUERY = "--query-gpu=" + ",".join(f for f, _ in _THROTTLE_FIELDS)
#: The reasons that fail a GPU when active under load (a power cap at the limit is normal).
THROTTLE_FAILING = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                    "sw_thermal_slowdown")  # fmt: skip


def _text(node: Any, path: str) -> str | None:
    found = node.find(path) if node is not None else None
    if found is None or found.text is None:
        return None
    return _smi_value(found.text)


def _number(value: str | None) -> float | None:
    """ "81079 MiB" -> 81079.0, "16x" -> 16.0, "0 us" -> 0.0; None where not a number."""
    if value is None:
        return None
    match = re.match(r"^\s*(-?\d+(?:\.\d+)?)", value)
    return float(match.group(1)) if match else None


def _int(value: str | None) -> int | None:
    number = _number(value)
    return None if number is None else int(number)


def _yes(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.strip().lower() in ("yes", "active", "enabled", "true")


def _children(node: Any, *paths: str) -> list[Any]:
    """The children of the first of PATHS that NODE has (older drivers say "throttle")."""
    for path in paths:
        found = node.find(path)
        if found is not None:
            return list(found)
    return []


def parse_smi_xml(text: str) -> dict[str, Any]:
    """``nvidia-smi -q -x`` as the numbers the health checks judge, one entry a GPU."""
    import xml.etree.ElementTree as ElementTree  # noqa: S405 - nvidia-smi's own output

    root = ElementTree.fromstring(text)  # noqa: S314 - nvidia-smi's own output, no DTD read
    gpus = []
    for gpu in root.findall("gpu"):
        ecc: dict[str, Any] = {}
        for scope in ("volatile", "aggregate"):
            counts = {}
            for child in _children(gpu, "ecc_errors/" + scope):
                if child.tag.endswith(("correctable", "uncorrectable", "parity", "secded")):
                    counts[child.tag] = _int(_smi_value(child.text or ""))
            ecc[scope] = counts
            unc = [v for k, v in counts.items() if "uncorrectable" in k and v is not None]
            ecc[scope + "_uncorrected"] = sum(unc) if unc else None
        reasons = {}
        for child in _children(gpu, "clocks_event_reasons", "clocks_throttle_reasons"):
            key = re.sub(r"^clocks_(event|throttle)_reason_", "", child.tag)
            reasons[key] = _yes(_smi_value(child.text or ""))
        counters = {}
        for child in _children(
            gpu, "clocks_event_reasons_counters", "clocks_throttle_reasons_counters"
        ):
            key = re.sub(r"^clocks_(event|throttle)_reasons_counters_", "", child.tag)
            counters[key] = _int(_smi_value(child.text or ""))
        processes = [
            {
                "pid": _int(_text(proc, "pid")),
                "type": _text(proc, "type"),
                "name": _text(proc, "process_name"),
                "used_mib": _number(_text(proc, "used_memory")),
            }
            for proc in gpu.findall("processes/process_info")
        ]
        gpus.append(
            {
                "uuid": _text(gpu, "uuid"),
                "bus_id": gpu.get("id"),
                "name": _text(gpu, "product_name"),
                "persistence_mode": _text(gpu, "persistence_mode"),
                "pcie": {
                    "max_gen": _int(_text(gpu, "pci/pci_gpu_link_info/pcie_gen/max_link_gen")),
                    "current_gen": _int(
                        _text(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen")
                    ),
                    "max_width": _int(
                        _text(gpu, "pci/pci_gpu_link_info/link_widths/max_link_width")
                    ),
                    "current_width": _int(
                        _text(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width")
                    ),
                },
                "ecc_mode": _text(gpu, "ecc_mode/current_ecc"),
                "ecc": ecc,
                "retired_pages": {
                    "single_bit": _int(
                        _text(gpu, "retired_pages/multiple_single_bit_retirement/retired_count")
                    ),
                    "double_bit": _int(
                        _text(gpu, "retired_pages/double_bit_retirement/retired_count")
                    ),
                    "pending": _yes(_text(gpu, "retired_pages/pending_retirement")),
                },
                "remapped_rows": {
                    "correctable": _int(_text(gpu, "remapped_rows/remapped_row_corr")),
                    "uncorrectable": _int(_text(gpu, "remapped_rows/remapped_row_unc")),
                    "pending": _yes(_text(gpu, "remapped_rows/remapped_row_pending")),
                    "failure": _yes(_text(gpu, "remapped_rows/remapped_row_failure")),
                },
                "clock_reasons": reasons,
                "clock_reason_counters_us": counters,
                "memory_mib": {
                    key: _number(_text(gpu, "fb_memory_usage/" + key))
                    for key in ("total", "reserved", "used", "free")
                },
                "fabric": {
                    "state": _text(gpu, "fabric/state"),
                    "status": _text(gpu, "fabric/status"),
                },
                "processes": processes,
            }
        )
    return {
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
        "gpus": gpus,
    }


def read_kernel_log() -> dict[str, Any]:
    """The kernel log's NVRM XID lines: /dev/kmsg, else ``dmesg``; where neither can be read
    (a container without CAP_SYSLOG, a restricted dmesg) it says so and what stopped it."""
    lines: list[str] = []
    source = None
    why = []
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        why.append("/dev/kmsg: %s" % (exc.strerror or exc))
    else:
        try:
            while True:
                try:
                    record = os.read(fd, 8192)
                except BlockingIOError:
                    break
                except OSError as exc:  # EPIPE: a record overwritten while reading; go on
                    if exc.errno == 32:
                        continue
                    raise
                if not record:
                    break
                lines.append(record.decode("utf-8", "replace").split(";", 1)[-1].rstrip())
            source = "/dev/kmsg"
        except OSError as exc:
            why.append("/dev/kmsg: %s" % (exc.strerror or exc))
            lines = []
        finally:
            os.close(fd)
    if source is None:
        try:
            proc = subprocess.run(  # noqa: S603 - a fixed program
                ["dmesg"],  # noqa: S607 - on PATH where there is one
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                timeout=_NVIDIA_SMI_TIMEOUT_S,
                check=False,
            )
            if proc.returncode == 0:
                lines = proc.stdout.decode("utf-8", "replace").splitlines()
                source = "dmesg"
            else:
                said = proc.stderr.decode("utf-8", "replace").strip()[:200]
                why.append("dmesg exited %d: %s" % (proc.returncode, said))
        except (OSError, subprocess.TimeoutExpired) as exc:
            why.append("dmesg: %s" % exc)
    return xid_events(lines, source, "; ".join(why))


def xid_events(lines: list[str], source: str | None, why: str = "") -> dict[str, Any]:
    """The XID events of the kernel log's LINES (None SOURCE: it could not be read)."""
    events = []
    for line in lines:
        match = _XID_LINE.search(line)
        if match:
            events.append(
                {"pci": match.group(1), "xid": int(match.group(2)), "text": line.strip()[:300]}
            )
    return {
        "read": source is not None,
        "source": source,
        "why_not_read": None if source is not None else (why or "no kernel log reader"),
        "lines_read": len(lines),
        "events": events[-64:],
        "event_count": len(events),
    }


def parse_nvlink_status(text: str) -> dict[str, dict[str, Any]]:
    """``nvidia-smi nvlink -s``: each GPU (by UUID) with each link's speed or "inactive"."""
    found: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        header = _GPU_HEADER.match(line)
        if header:
            current = {"index": int(header.group(1)), "links": {}}
            found[header.group(3)] = current
            continue
        state = _NVLINK_STATE.match(line)
        if state and current is not None and ":" not in state.group(2):
            said = state.group(2)
            active = "inactive" not in said.lower() and "<" not in said
            current["links"][state.group(1)] = {"state": said, "active": active}
    return found


def parse_nvlink_errors(text: str) -> dict[str, dict[str, dict[str, int]]]:
    """``nvidia-smi nvlink -e``: each GPU's links with each error counter (recorded only)."""
    found: dict[str, dict[str, dict[str, int]]] = {}
    current = None
    for line in text.splitlines():
        header = _GPU_HEADER.match(line)
        if header:
            current = found.setdefault(header.group(3), {})
            continue
        counter = _NVLINK_COUNTER.match(line)
        if counter and current is not None:
            link = current.setdefault(counter.group(1), {})
            link[counter.group(2).strip()] = int(counter.group(3))
    return found


def nvlink_expected(topology: dict[str, Any] | None) -> dict[str, int]:
    """For each GPU label, the most NVLinks the topology shows it bonded to one peer (NV18:
    18), the links that must be active; 0 where it shows no NV#."""
    expected: dict[str, int] = {}
    for label, row in ((topology or {}).get("matrix") or {}).items():
        if not label.startswith("GPU"):
            continue
        counts = [int(v[2:]) for v in row.values() if re.match(r"^NV\d+$", str(v))]
        expected[label] = max(counts) if counts else 0
    return expected


def parse_throttle_rows(text: str) -> list[dict[str, Any]]:
    """One sample of ``nvidia-smi --query-gpu=<_THROTTLE_FIELDS> --format=csv,noheader,nounits``."""
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(_THROTTLE_FIELDS):
            continue
        row: dict[str, Any] = {"uuid": parts[0]}
        for (field, name), raw in zip(_THROTTLE_FIELDS[1:], parts[1:]):
            value = _smi_value(raw)
            row[name] = _yes(value) if field.startswith("clocks_throttle") else _number(value)
        rows.append(row)
    return rows


class ThrottleSampler:
    """Samples each GPU's clock throttle reasons while the load runs (local rank 0)."""

    def __init__(self, interval_s: float = 0.25) -> None:
        import threading

        self.interval_s = interval_s
        self.samples: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="throttle-sampler", daemon=True)

    def _run(self) -> None:
        args = [_THROTTLE_QUERY, "--format=csv,noheader,nounits"]
        while not self._stop.is_set():
            text, why = run_nvidia_smi(args)
            if text is None:
                self.errors.append(str(why))
                return
            when = time.time()
            self.samples.extend(dict(row, t=round(when, 3)) for row in parse_throttle_rows(text))
            self._stop.wait(self.interval_s)

    def once(self) -> ThrottleSampler:
        """One sample, now (the quick level runs no load)."""
        args = [_THROTTLE_QUERY, "--format=csv,noheader,nounits"]
        text, why = run_nvidia_smi(args)
        if text is None:
            self.errors.append(str(why))
        else:
            self.samples.extend(dict(r, t=round(time.time(), 3)) for r in parse_throttle_rows(text))
        return self

    def __enter__(self) -> ThrottleSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=_NVIDIA_SMI_TIMEOUT_S)


def median(values: list[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def copy_bandwidths(
    torch: Any, device: Any, size_mib: int, repeats: int, kinds: tuple[str, ...], pinned: bool
) -> dict[str, Any]:
    """Copies of SIZE_MIB, each kind (h2d, d2h: pinned host memory; d2d: within the device)
    timed REPEATS times after one warm-up; GB/s as nvbandwidth counts them, the bytes moved
    once (a device copy reads and writes each byte: twice this figure moves)."""
    nbytes = size_mib * MIB
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    other = (
        torch.empty(nbytes, dtype=torch.uint8, device=device)
        if "d2d" in kinds
        else torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    )
    pairs = {"h2d": (dev, other), "d2h": (other, dev), "d2d": (other, dev)}
    found: dict[str, Any] = {"repeats": repeats}
    for name in kinds:
        dst, src = pairs[name]
        runs = []
        for index in range(repeats + 1):
            synchronize(torch, device)
            started = time.perf_counter()
            dst.copy_(src, non_blocking=pinned)
            synchronize(torch, device)
            seconds = time.perf_counter() - started
            if index:  # the first is the warm-up
                runs.append(round(nbytes / seconds / 1e9, 2))
        found[name + "_gbps"] = runs
        middle = median(runs)
        found[name + "_median_gbps"] = None if middle is None else round(middle, 2)
        found[name + "_size_mib"] = size_mib
    del dev, other
    return found


def bf16_load(torch: Any, device: Any, size: int, seconds: float) -> dict[str, Any]:
    """BF16 products for about SECONDS: the load the throttle sampler watches; each batch's
    TFLOP/s kept (a sanity figure; judged only where a floor is given)."""
    a = torch.randn(size, size, device=device).to(torch.bfloat16)
    b = torch.randn(size, size, device=device).to(torch.bfloat16)
    flops = 2.0 * size**3
    batch = 1 if device.type != "cuda" else 20
    runs = []
    started = time.perf_counter()
    while True:
        synchronize(torch, device)
        t0 = time.perf_counter()
        for _ in range(batch):
            torch.matmul(a, b)
        synchronize(torch, device)
        runs.append(round(flops * batch / (time.perf_counter() - t0) / 1e12, 2))
        if time.perf_counter() - started >= seconds:
            break
    return {
        "size": [size, size, size],
        "seconds": round(time.perf_counter() - started, 3),
        "tflops": runs[1:] if len(runs) > 1 else runs,
        "tflops_median": round(median(runs[1:] if len(runs) > 1 else runs) or 0.0, 2),
    }


def _version(text: Any) -> tuple[int, ...] | None:
    if text is None:
        return None
    if isinstance(text, int):  # torch's driver number: 13000 is 13.0
        return (text // 1000, (text % 1000) // 10)
    match = re.match(r"^\s*(\d+)(?:\.(\d+))?", str(text))
    if not match:
        return None
    return (int(match.group(1)), int(match.group(2) or 0))


def _names(values: Any) -> str:
    return ", ".join(str(v) for v in values)


# Each judge: (numbers of the check, thresholds) -> (status, one sentence).


def judge_driver(numbers: dict[str, Any], thresholds: dict[str, Any]) -> tuple[str, str]:
    runtime = _version(numbers.get("runtime_cuda"))
    driver = _version(numbers.get("driver_cuda"))
    error = numbers.get("cuda_init_error") or ""
    if runtime is None:
        return INCOMPLETE, "the image's torch names no CUDA runtime"
    if driver is None:
        if "insufficient" in error or "too old" in error:
            return FAIL, "the driver is too old for the image's CUDA runtime %s: %s" % (
                numbers.get("runtime_cuda"),
                error[:200],
            )
        return INCOMPLETE, "the driver's CUDA version was not read"
    said = "driver %s (CUDA %s) for the image's CUDA runtime %s" % (
        numbers.get("driver_version"),
        "%d.%d" % driver,
        numbers.get("runtime_cuda"),
    )
    if driver[0] < runtime[0]:
        return FAIL, "the driver is too old for the image's CUDA runtime: " + said
    if driver < runtime:
        return PASS, said + " (CUDA minor version compatibility; PTX JIT may not work)"
    if error:
        return FAIL, "CUDA would not start with a driver new enough: " + error[:200]
    return PASS, said


def judge_ecc(numbers: dict[str, Any], thresholds: dict[str, Any]) -> tuple[str, str]:
    bad = []
    unknown = []
    for gpu in numbers.get("gpus") or []:
        vol, agg = gpu.get("volatile_uncorrected"), gpu.get("aggregate_uncorrected")
        if vol is None and agg is None:
            unknown.append(gpu.get("uuid"))
        if vol:
            bad.append("%s: %d uncorrected since the driver loaded" % (gpu.get("uuid"), vol))
        limit = thresholds.get("max_aggregate_uncorrected_ecc")
        if agg and limit is not None and agg > int(limit):
            bad.append("%s: %d uncorrected in its life (limit %s)" % (gpu.get("uuid"), agg, limit))
    if bad:
        return FAIL, "; ".join(bad)
    if unknown and len(unknown) == len(numbers.get("gpus") or []):
        return SKIPPED, "ECC is off or not reported on %s" % _names(unknown)
    if not numbers.get("gpus"):
        return INCOMPLETE, "no GPU's ECC counts were read"
    return PASS, "no uncorrected ECC error (volatile; aggregate within its limit)"


def judge_row_remapping(numbers: dict[str, Any], thresholds: dict[str, Any]) -> tuple[str, str]:
    bad, supported = [], 0
    for gpu in numbers.get("gpus") or []:
        if gpu.get("pending") is None and gpu.get("failure") is None:
            continue
        supported += 1
        if gpu.get("pending"):
            bad.append("%s: a row remapping is pending (reset the GPU)" % gpu.get("uuid"))
        if gpu.get("failure"):
            bad.append("%s: row remapping failed (the GPU needs service)" % gpu.get("uuid"))
    if bad:
        return FAIL, "; ".join(bad)
    if not numbers.get("gpus"):
        return INCOMPLETE, "no GPU's row remapping was read"
    if not supported:
        return SKIPPED, "no GPU here remaps rows (older GPUs retire pages instead)"
    return PASS, "no row remapping pending or failed on %d GPU(s)" % supported


def judge_retired_pages(numbers: dict[str, Any], thresholds: dict[str, Any]) -> tuple[str, str]:
    bad, supported = [], 0
    limit = thresholds.get("max_retired_pages")
    for gpu in numbers.get("gpus") or []:
        counts = [gpu.get("single_bit"), gpu.get("double_bit")]
        if all(c is None for c in counts) and gpu.get("pending") is None:
            continue
        supported += 1
        if gpu.get("pending"):
            bad.append("%s: a page retirement is pending (reset the GPU)" % gpu.get("uuid"))
        total = sum(c for c in counts if c)
        if limit is not None and total > int(limit):
            bad.append("%s: %d retired pages (limit %s)" % (gpu.get("uuid"), total, limit))
    if bad:
        return FAIL, "; ".join(bad)
    if not numbers.get("gpus"):
        return INCOMPLETE, "no GPU's retired pages were read"
    if not supported:
        return SKIPPED, "no GPU here retires pages (row remapping replaces it)"
    return PASS, "no page retirement pending on %d GPU(s)" % supported


def judge_xid(numbers: dict[str, Any], thresholds: dict[str, Any]) -> tuple[str, str]:
    if not numbers.get("read"):
        said = "kernel log not read: %s" % numbers.get("why_not_read")
        return (INCOMPLETE if thresholds.get("require_kernel_log") else RECORDED), said
    fatal = {int(x) for x in thresholds.get("fatal_xids") or DEFAULT_FATAL_XIDS}
    found = [e for e in numbers.get("events") or [] if int(e["xid"]) in fatal]
    if found:
        return FAIL, "XID %s in the kernel log (%s)" % (
            _names(sorted({e["xid"] for e in found})),
            found[-1]["text"][:160],
        )
    others = sorted({e["xid"] for e in numbers.get("events") or []})
    if others:
        return PASS, "no fatal XID; recorded: XID %s" % _names(others)
    return PASS, "no XID event in %s line(s) of %s" % (numbers.get("lines_read"), numbers["source"])


def judge_throttle(numbers: dict[str, Any], thresholds: dict[str, Any]) -> tuple[str, str]:
    samples = numbers.get("samples") or []
    if not samples:
        return INCOMPLETE, "no throttle reason was sampled: %s" % (
            numbers.get("why_not_sampled") or "nvidia-smi gave none"
        )
    seen: dict[str, set[str]] = {}
    for sample in samples:
        for reason in THROTTLE_FAILING:
            if sample.get(reason):
                seen.setdefault(reason, set()).add(str(sample.get("uuid")))
    for uuid, delta in (numbers.get("counter_deltas_us") or {}).items():
        for counter, reason in (
            ("hw_therm_slowdown", "hw_thermal_slowdown"),
            ("hw_power_brake", "hw_power_brake_slowdown"),
            ("sw_therm_slowdown", "sw_thermal_slowdown"),
        ):
            if (delta.get(counter) or 0) > 0:
                seen.setdefault(reason, set()).add(uuid)
    when = "under the BF16 load" if numbers.get("under_load") else "at rest (no load at this level)"
    if seen:
        return FAIL, "; ".join(
            "%s active %s on %s" % (r, when, _names(sorted(u))) for r, u in sorted(seen.items())
        )
    floor = thresholds.get("min_bf16_tflops")
    slow = [
        "rank %s: BF16 load %.1f TFLOP/s (median of %d) under the floor %s"
        % (load.get("rank"), load["tflops_median"], len(load.get("tflops") or []), floor)
        for load in numbers.get("load") or []
        if floor is not None
        and load.get("tflops_median") is not None
        and load["tflops_median"] < float(floor)
    ]
    if slow:
        return FAIL, "; ".join(slow)
    return PASS, "no HW slowdown, HW thermal, power brake or SW thermal in %d sample(s) %s" % (
        len(samples),
        when,
    )


def judge_pcie_link(numbers: dict[str, Any], thresholds: dict[str, Any]) -> tuple[str, str]:
    bad, unknown = [], []
    for gpu in numbers.get("gpus") or []:
        width, max_width = gpu.get("current_width"), gpu.get("max_width")
        gen, max_gen = gpu.get("best_gen"), gpu.get("max_gen")
        if None in (width, max_width, gen, max_gen):
            unknown.append(str(gpu.get("uuid")))
            continue
        if width < max_width:
            bad.append("%s: link x%d of x%d (trained down)" % (gpu.get("uuid"), width, max_width))
        if gen < max_gen and gpu.get("under_load"):
            bad.append(
                "%s: gen %d of %d under load (trained down)" % (gpu.get("uuid"), gen, max_gen)
            )
    if bad:
        return FAIL, "; ".join(bad)
    if not numbers.get("gpus") or len(unknown) == len(numbers.get("gpus") or []):
        return INCOMPLETE, "no GPU's PCIe link was read"
    return PASS, "; ".join(
        "%s gen %s x%s (max gen %s x%s)"
        % (
            g.get("uuid"),
            g.get("best_gen"),
            g.get("current_width"),
            g.get("max_gen"),
            g.get("max_width"),
        )  # fmt: skip
        for g in numbers.get("gpus") or []
    )


def _judge_floors(numbers: dict[str, Any], floors: list[tuple[str, str, Any]]) -> tuple[str, str]:
    """Each GPU's median of repeats against each floor (None: recorded, not judged)."""
    if numbers.get("not_at_level"):
        return SKIPPED, "not measured at level %s" % numbers["not_at_level"]
    bad, said = [], []
    judged = False
    for gpu in numbers.get("gpus") or []:
        for key, label, floor in floors:
            value = gpu.get(key + "_median_gbps")
            if value is None:
                continue
            said.append("%s %s %.1f GB/s" % (gpu.get("uuid") or gpu.get("rank"), label, value))
            if floor is None:
                continue
            judged = True
            if value < float(floor):
                bad.append(
                    "%s %s %.1f GB/s (median of %d) under the floor %s GB/s"
                    % (
                        gpu.get("uuid") or gpu.get("rank"),
                        label,
                        value,
                        len(gpu.get(key + "_gbps") or []),
                        floor,
                    )  # fmt: skip
                )
    if bad:
        return FAIL, "; ".join(bad)
    if not said:
        return INCOMPLETE, "no copy was measured"
    if not judged:
        return RECORDED, "no floor given: " + "; ".join(said)
    return PASS, "; ".join(said)


def judge_pcie_bandwidth(numbers: dict[str, Any], thresholds: dict[str, Any]) -> tuple[str, str]:
    return _judge_floors(
        numbers,
        [
            ("h2d", "host-to-device", thresholds.get("min_h2d_gbps")),
            ("d2h", "device-to-host", thresholds.get("min_d2h_gbps")),
        ],
    )


def judge_memory_bandwidth(numbers: dict[str, Any], thresholds: dict[str, Any]) -> tuple[str, str]:
    return _judge_floors(numbers, [("d2d", "device copy", thresholds.get("min_d2d_gbps"))])


def judge_nvlink(numbers: dict[str, Any], thresholds: dict[str, Any]) -> tuple[str, str]:
    bad, active_total = [], 0
    for gpu in numbers.get("gpus") or []:
        links = gpu.get("links") or {}
        active = sum(1 for link in links.values() if link.get("active"))
        inactive = sorted((n for n, link in links.items() if not link.get("active")), key=int)
        active_total += active
        want = int(gpu.get("expected_links") or 0)
        if want and active < want:
            bad.append(
                "%s: %d of %d NVLink(s) active (the topology shows NV%d; inactive: link %s)"
                % (gpu.get("label"), active, want, want, _names(inactive) or "none listed")
            )
    if bad:
        return FAIL, "; ".join(bad)
    if not any(int(g.get("expected_links") or 0) for g in numbers.get("gpus") or []):
        return SKIPPED, "the topology shows no NVLink between GPUs here (%d link(s) active)" % (
            active_total
        )
    return PASS, "every NVLink the topology shows is active (%d link(s))" % active_total


def judge_processes(numbers: dict[str, Any], thresholds: dict[str, Any]) -> tuple[str, str]:
    floor = thresholds.get("min_free_memory_fraction")
    bad, said = [], []
    for gpu in numbers.get("gpus") or []:
        total, free = gpu.get("total_mib"), gpu.get("free_mib")
        others = gpu.get("others") or []
        held = sum(p.get("used_mib") or 0 for p in others)
        if others:
            said.append(
                "%s: %d other process(es) hold %.0f MiB" % (gpu.get("uuid"), len(others), held)
            )
        if floor is not None and total and free is not None and free < float(floor) * total:
            bad.append(
                "%s: %.1f GiB free of %.1f GiB before the checks (floor %.0f%%)%s"
                % (
                    gpu.get("uuid"),
                    free / 1024,
                    total / 1024,
                    float(floor) * 100,
                    "; other processes: "
                    + _names(
                        "%s (pid %s, %.0f MiB)"
                        % (p.get("name"), p.get("pid"), p.get("used_mib") or 0)
                        for p in others
                    )
                    if others
                    else "",
                )  # fmt: skip
            )
    if bad:
        return FAIL, "; ".join(bad)
    if not numbers.get("gpus"):
        return INCOMPLETE, "no GPU's memory use was read"
    if floor is None:
        return RECORDED, "no free-memory floor given; " + ("; ".join(said) or "no other process")
    return PASS, "; ".join(said) or "no other process on the GPUs; free memory above the floor"


def judge_persistence(numbers: dict[str, Any], thresholds: dict[str, Any]) -> tuple[str, str]:
    modes = {str(g.get("uuid")): g.get("persistence_mode") for g in numbers.get("gpus") or []}
    off = sorted(u for u, m in modes.items() if m != "Enabled")
    if not modes:
        return INCOMPLETE, "no GPU's persistence mode was read"
    if off:
        said = "persistence mode is %s on %s" % (_names({modes[u] for u in off}), _names(off))
        return (FAIL if thresholds.get("require_persistence") else RECORDED), said
    return PASS, "persistence mode enabled on %d GPU(s)" % len(modes)


def judge_fabric(numbers: dict[str, Any], thresholds: dict[str, Any]) -> tuple[str, str]:
    fabrics = [g for g in numbers.get("gpus") or [] if g.get("state") is not None]
    if not numbers.get("gpus"):
        return INCOMPLETE, "no GPU's fabric state was read"
    if not fabrics:
        return SKIPPED, "no NVSwitch fabric here (fabric state N/A on every GPU)"
    bad = [
        "%s: fabric %s, %s" % (g.get("uuid"), g.get("state"), g.get("status"))
        for g in fabrics
        if g.get("state") != "Completed" or g.get("status") not in ("Success", None)
    ]
    if bad:
        return FAIL, "the fabric manager has not registered every GPU: " + "; ".join(bad)
    return PASS, "fabric Completed, Success on %d GPU(s)" % len(fabrics)


def judge_budget(numbers: dict[str, Any], thresholds: dict[str, Any]) -> tuple[str, str]:
    budget = thresholds.get("budget_s")
    seconds = numbers.get("seconds")
    if seconds is None:
        return INCOMPLETE, "the level's time was not measured"
    if budget is None:
        return RECORDED, "level %s took %.2f s; no budget given" % (numbers.get("level"), seconds)
    said = "level %s took %.2f s (%s) of its %s s budget" % (
        numbers.get("level"), seconds, numbers.get("measured"), budget)  # fmt: skip
    return (PASS if seconds <= float(budget) else FAIL), said


def judge_dcgm(numbers: dict[str, Any], thresholds: dict[str, Any]) -> tuple[str, str]:
    if not numbers.get("present"):
        return SKIPPED, "dcgmi is not here: %s (not a failure)" % numbers.get("why_absent")
    return RECORDED, "dcgmi diag -r %s: %s (recorded beside imagekit's checks)" % (
        numbers.get("level"), numbers.get("verdict"))  # fmt: skip


#: check name -> its judge; the probe writes each check's status with it, and imagekit
#: judges the reported numbers again with the same function.
HEALTH_JUDGES = {
    "driver": judge_driver,
    "ecc": judge_ecc,
    "row_remapping": judge_row_remapping,
    "retired_pages": judge_retired_pages,
    "xid": judge_xid,
    "throttle": judge_throttle,
    "pcie_link": judge_pcie_link,
    "pcie_bandwidth": judge_pcie_bandwidth,
    "memory_bandwidth": judge_memory_bandwidth,
    "nvlink": judge_nvlink,
    "processes": judge_processes,
    "persistence": judge_persistence,
    "fabric": judge_fabric,
    "budget": judge_budget,
    "dcgm": judge_dcgm,
}
#: the checks that need a load or a copy: run at standard and extended, not at quick.
MEASURED = ("pcie_bandwidth", "memory_bandwidth")
#: the checks of what the driver and the kernel say of the node (none on a CPU self-test).
NODE_READ = ("driver", "ecc", "row_remapping", "retired_pages", "xid", "throttle", "pcie_link",
             "nvlink", "processes", "persistence", "fabric")  # fmt: skip


def health_numbers(
    smi: dict[str, Any] | None,
    samples: list[dict[str, Any]],
    counters_before: dict[str, Any] | None,
    topology: dict[str, Any] | None,
    nvlink_status: dict[str, dict[str, Any]],
    nvlink_errors: dict[str, Any],
    own_pids: list[int],
    free_at_start: dict[str, int],
    under_load: bool,
) -> dict[str, dict[str, Any]]:
    """The numbers of each read-only check from one node's reads (pure: tested on the lent
    H100's captures)."""
    gpus = (smi or {}).get("gpus") or []
    numbers: dict[str, dict[str, Any]] = {}
    numbers["ecc"] = {
        "gpus": [
            {"uuid": g["uuid"], "ecc_mode": g.get("ecc_mode"),
             "volatile_uncorrected": g["ecc"].get("volatile_uncorrected"),
             "aggregate_uncorrected": g["ecc"].get("aggregate_uncorrected"),
             "volatile": g["ecc"].get("volatile"), "aggregate": g["ecc"].get("aggregate")}
            for g in gpus
        ]
    }  # fmt: skip
    numbers["row_remapping"] = {"gpus": [dict(g["remapped_rows"], uuid=g["uuid"]) for g in gpus]}
    numbers["retired_pages"] = {"gpus": [dict(g["retired_pages"], uuid=g["uuid"]) for g in gpus]}
    by_uuid: dict[str, list[dict[str, Any]]] = {}
    for sample in samples:
        by_uuid.setdefault(str(sample.get("uuid")), []).append(sample)
    deltas = {}
    for g in gpus:
        before = (counters_before or {}).get(g["uuid"])
        if before is None:
            continue
        after = g.get("clock_reason_counters_us") or {}
        deltas[g["uuid"]] = {
            k: (after.get(k) or 0) - (v or 0) for k, v in before.items() if after.get(k) is not None
        }
    numbers["throttle"] = {
        "under_load": under_load,
        "samples": samples,
        "counter_deltas_us": deltas,
        "reasons_now": {g["uuid"]: g.get("clock_reasons") for g in gpus},
    }
    pcie = []
    for g in gpus:
        seen = [int(x["pcie_gen"]) for x in by_uuid.get(g["uuid"], []) if x.get("pcie_gen")]
        current = g["pcie"].get("current_gen")
        gens: list[int] = seen + ([int(current)] if current is not None else [])
        pcie.append(
            dict(
                g["pcie"],
                uuid=g["uuid"],
                gens_under_load=seen,
                under_load=bool(seen),
                best_gen=max(gens) if gens else None,
            )
        )
    numbers["pcie_link"] = {"gpus": pcie}
    expected = nvlink_expected(topology)
    links = []
    for g in gpus:
        status = nvlink_status.get(g["uuid"]) or {}
        label = "GPU%s" % status["index"] if "index" in status else None
        if label is None:  # no nvlink -s entry: the topology's label by position
            label = "GPU%d" % gpus.index(g)
        links.append(
            {
                "uuid": g["uuid"],
                "label": label,
                "links": status.get("links") or {},
                "expected_links": expected.get(label, 0),
                "errors": nvlink_errors.get(g["uuid"]) or {},
            }  # fmt: skip
        )
    numbers["nvlink"] = {"gpus": links}
    procs = []
    for g in gpus:
        others = [p for p in g.get("processes") or [] if p.get("pid") not in own_pids]
        mem = g.get("memory_mib") or {}
        free = free_at_start.get(g["uuid"])
        procs.append(
            {
                "uuid": g["uuid"],
                "total_mib": mem.get("total"),
                "free_mib": free / MIB if free is not None else mem.get("free"),
                "free_from": "torch.cuda.mem_get_info at the rank's start"
                if free is not None
                else "nvidia-smi",
                "used_mib": mem.get("used"),
                "others": others,
                "own_pids": own_pids,
            }  # fmt: skip
        )
    numbers["processes"] = {"gpus": procs}
    numbers["persistence"] = {
        "gpus": [{"uuid": g["uuid"], "persistence_mode": g.get("persistence_mode")} for g in gpus]
    }
    numbers["fabric"] = {"gpus": [dict(g["fabric"], uuid=g["uuid"]) for g in gpus]}
    return numbers


def run_dcgm(level: int) -> dict[str, Any]:
    """``dcgmi diag -r LEVEL -j`` where dcgmi is on PATH: its verdict recorded, never ours."""
    import shutil

    found = shutil.which("dcgmi")
    if found is None:
        return {"present": False, "level": level, "why_absent": "dcgmi is not on PATH"}
    try:
        proc = subprocess.run(  # noqa: S603 - DCGM's own CLI, our arguments
            [found, "diag", "-r", str(level), "-j"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=3600,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"present": True, "level": level, "verdict": "did not finish: %s" % exc}
    text = proc.stdout.decode("utf-8", "replace")
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    said = re.findall(r'"(?:status|result)"\s*:\s*"(Pass|Fail|Warn|Skip)\w*"', text, re.I)
    verdict = "Fail" if any(s.lower() == "fail" for s in said) else ("Pass" if said else "unread")
    return {
        "present": True,
        "level": level,
        "exit_code": proc.returncode,
        "verdict": "%s (exit %d)" % (verdict, proc.returncode),
        "document": document,
        "output_tail": (text or proc.stderr.decode("utf-8", "replace"))[-4000:],
    }


# --------------------------------------------------------------------------- the run


class Context:
    """Where this process stands: the launcher's variables, the spec, the mode."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.self_test = bool(spec.get("self_test"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.world)))
        self.launched = "RANK" in os.environ
        self.host = socket.gethostname()
        self.level = str(spec.get("level") or "standard")
        self.thresholds: dict[str, Any] = dict(spec.get("thresholds") or {})
        fault = spec.get("fault") or {}
        self.fault_rank = fault.get("rank")
        self.fault = fault if self.fault_rank == self.rank else {}

    def expect(self) -> dict[str, Any]:
        expect = dict(self.spec.get("expect") or {})
        expect.update(self.fault.get("expect") or {})  # fault injection: a wrong expectation
        return expect


def environment() -> dict[str, str]:
    return {
        key: value
        for key, value in sorted(os.environ.items())
        if key.startswith(_ENV_PREFIXES) or key in _ENV_KEYS
    }


def base_report(ctx: Context) -> dict[str, Any]:
    return {
        "probe": PROBE_NAME,
        "probe_version": PROBE_VERSION,
        "mode": "self-test" if ctx.self_test else "gpu",
        "level": ctx.level,
        "scope": SELF_TEST_SCOPE if ctx.self_test else GPU_SCOPE,
        "host": ctx.host,
        "started_at": utc_now(),
        "finished_at": None,
        "launched_by": "torch.distributed.run" if ctx.launched else "a single process",
        "world_size": ctx.world,
        "local_world_size": ctx.local_world,
        "backend": "gloo" if ctx.self_test else "nccl",
        "python": platform.python_version(),
        "versions": {},
        "environment": environment(),
        "nvlink_multicast": (
            "off (NCCL_NVLS_ENABLE=0)"
            if os.environ.get("NCCL_NVLS_ENABLE") == "0"
            else "not disabled (NCCL decides)"
        ),
        "ranks": [],
        "checks": {},
        "errors": [],
    }


def write_report(path: str, report: dict[str, Any]) -> None:
    """The report into PATH, whole or not at all; ``-``: one marked line on stdout (a Job's
    log carries it: imagekit gpu-preflight REF --report LOG --pod POD_JSON)."""
    report["finished_at"] = utc_now()
    if path == "-":
        text = json.dumps(report, sort_keys=True, ensure_ascii=True)
        sys.stdout.write("\n" + REPORT_MARKER + text + "\n")
        sys.stdout.flush()
        return
    tmp = path + ".partial"
    with open(tmp, "w") as handle:
        json.dump(report, handle, indent=2, sort_keys=True, ensure_ascii=True)
        handle.write("\n")
    os.replace(tmp, path)


def rank_checks(torch: Any, ctx: Context, device: Any) -> dict[str, Any]:
    """What one rank finds of its own device: facts, expectations, arches, BF16."""
    found: dict[str, Any] = {"rank": ctx.rank, "local_rank": ctx.local_rank, "host": ctx.host}
    if ctx.self_test:
        found["device"] = {"index": None, "name": "cpu", "capability": None}
        found["expectation_problems"] = []
        found["arch"] = check(SKIPPED, "CPU self-test: no device capability to cover")
    else:
        facts = device_facts(torch, device.index)
        found["device"] = facts
        found["expectation_problems"] = expectation_problems(facts, ctx.expect())
        arch_list, source = arch_flags(torch)
        major, minor = (int(x) for x in facts["capability"].split("."))
        if covers(arch_list, major, minor):
            status, said = PASS, "compiled arches cover capability %s" % facts["capability"]
        else:
            status, said = (
                FAIL,
                "compiled arches [%s] do not cover capability %s"
                % (" ".join(arch_list), facts["capability"]),
            )
        found["arch"] = check(status, said, arch_list=arch_list, source=source)
    size = int(ctx.spec.get("bf16_size", 256 if ctx.self_test else 4096))
    try:
        found["bf16"] = bf16_check(torch, device, size)
    except Exception as exc:  # noqa: BLE001 - a kernel that raises is this check's FAIL
        found["bf16"] = check(FAIL, "the BF16 product raised %s: %s" % (type(exc).__name__, exc))
    return found


def node_facts(ctx: Context) -> dict[str, Any]:
    """What nvidia-smi says of this node: each GPU's row and the topology (rank 0 only)."""
    if ctx.self_test:
        return {"nvidia_smi": "not asked (CPU self-test)"}
    text, why = run_nvidia_smi(
        ["--query-gpu=" + ",".join(_QUERY_FIELDS), "--format=csv,noheader,nounits"]
    )
    facts: dict[str, Any] = {
        "gpus": parse_gpu_query(text) if text else [],
        "nvidia_smi": why or "answered",
    }
    topo, topo_why = run_nvidia_smi(["topo", "-m"])
    facts["topology_raw"] = topo
    facts["topology"] = parse_topology(topo) if topo else None
    facts["topology_error"] = topo_why
    for row in facts["gpus"]:
        row.update(sysfs_locality(row.get("pci.bus_id")))
    return facts


def judge_gpus(
    ctx: Context, ranks: list[dict[str, Any]], node: dict[str, Any], visible: int
) -> dict[str, Any]:
    expect = dict(ctx.spec.get("expect") or {})
    want = expect.get("count")
    problems = []
    if ctx.local_world != visible:
        problems.append(
            "%d process(es) on this node but %d GPU(s) visible" % (ctx.local_world, visible)
        )
    if want is not None and int(want) != ctx.world:
        problems.append(
            "expected %d GPU(s), %d present in the process group" % (int(want), ctx.world)
        )
    by_uuid = {row.get("uuid"): row for row in node.get("gpus") or []}
    gpus = []
    for found in ranks:
        facts = dict(found.get("device") or {})
        row = by_uuid.get(facts.get("uuid"))
        if row is not None:
            facts["ecc_uncorrected_volatile"] = row.get("ecc.errors.uncorrected.volatile.total")
            facts["ecc_uncorrected_aggregate"] = row.get("ecc.errors.uncorrected.aggregate.total")
            facts["mig_mode"] = row.get("mig.mode.current")
            facts["numa_node"] = row.get("numa_node")
            facts["cpu_list"] = row.get("cpu_list")
            facts["nvidia_smi_index"] = row.get("index")
            if facts["ecc_uncorrected_volatile"]:
                found["expectation_problems"].append(
                    "%s uncorrected ECC error(s) since the driver loaded"
                    % facts["ecc_uncorrected_volatile"]
                )
        problems.extend(
            "rank %d (GPU %s on %s): %s"
            % (found["rank"], facts.get("index"), found.get("host"), problem)
            for problem in found.get("expectation_problems") or []
        )
        gpus.append(dict(facts, rank=found["rank"], host=found.get("host")))
    data = {
        "expected": expect,
        "present": ctx.world,
        "visible_on_rank0_node": visible,
        "gpus": gpus,
        "nvidia_smi": node.get("nvidia_smi"),
    }
    if ctx.self_test:
        return check(SKIPPED, "CPU self-test: no GPU to check", **data)
    if problems:
        return check(FAIL, "; ".join(problems), **data)
    names = sorted({str(g.get("name")) for g in gpus})
    return check(PASS, "%d GPU(s): %s" % (ctx.world, ", ".join(str(n) for n in names)), **data)


def judge_all_reduce(ctx: Context, per_rank: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Each size: every rank's elements right; the slowest rank's mean; algbw and busbw."""
    sizes = []
    wrong: list[str] = []
    for index, size in enumerate(per_rank[0]):
        slowest = max(rank_sizes[index]["mean_s"] for rank_sizes in per_rank)
        algbw, busbw = bandwidths(size["bytes"], slowest, ctx.world)
        wrong.extend(
            "rank %d, %s MiB: %s" % (rank, size["size_mib"], line)
            for rank, rank_sizes in enumerate(per_rank)
            for line in rank_sizes[index]["wrong"]
        )
        sizes.append(
            {
                "size_mib": size["size_mib"],
                "bytes": size["bytes"],
                "slowest_rank_mean_s": slowest,
                "slowest_rank_mean_us": round(slowest * 1e6, 2),
                "algbw_gbps": round(algbw, 3),
                "busbw_gbps": round(busbw, 3),
                "all_elements_right": not any(r[index]["wrong"] for r in per_rank),
            }
        )
    warmups = int(ctx.spec.get("warmups", 5))
    iterations = int(ctx.spec.get("iterations", 20))
    data: dict[str, Any] = {
        "sizes": sizes,
        "warmups": warmups,
        "iterations": iterations,
        "dtype": "float32",
        "op": "sum",
        "world_size": ctx.world,
        "busbw_formula": "algbw * 2(n-1)/n (nccl-tests)",
        "min_busbw_gbps": ctx.spec.get("min_busbw"),
    }
    if ctx.world == 1:
        data["note"] = "one rank: the all-reduce is a loopback, no link between GPUs is crossed"
    if wrong:
        return check(FAIL, "; ".join(wrong[:8]), **data)
    floor = ctx.spec.get("min_busbw")
    if floor is not None:
        largest = sizes[-1]
        if ctx.world == 1:
            return check(
                INCOMPLETE,
                "a bus bandwidth floor of %s GB/s cannot be measured on one "
                "rank (bus bandwidth is 0 by definition)" % floor,
                **data,
            )
        if largest["busbw_gbps"] < float(floor):
            return check(
                FAIL,
                "bus bandwidth %.1f GB/s at %s MiB is under the floor %s GB/s"
                % (largest["busbw_gbps"], largest["size_mib"], floor),
                **data,
            )
    summary = ", ".join(
        "%s MiB %.1f/%.1f GB/s" % (s["size_mib"], s["algbw_gbps"], s["busbw_gbps"]) for s in sizes
    )
    return check(
        PASS,
        "every element right at every size on %d rank(s); algbw/busbw %s" % (ctx.world, summary),
        **data,
    )


def torch_versions(torch: Any, node: dict[str, Any]) -> dict[str, Any]:
    versions: dict[str, Any] = {
        "torch": str(torch.__version__),
        "cuda": getattr(torch.version, "cuda", None),
    }
    try:
        nccl = torch.cuda.nccl.version()
        versions["nccl"] = ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else str(nccl)
    except Exception:  # noqa: BLE001 - a CPU build has no NCCL; say so
        versions["nccl"] = None
    drivers = {row.get("driver_version") for row in node.get("gpus") or []}
    versions["driver"] = drivers.pop() if len(drivers) == 1 else (sorted(drivers) or None)
    return versions


def run(ctx: Context, out: str) -> int:
    report = base_report(ctx)
    try:
        # the image's own torch, imported here so that its absence is this probe's report
        torch = importlib.import_module("torch")
        dist = importlib.import_module("torch.distributed")
    except Exception as exc:  # noqa: BLE001 - no torch is this probe's INCOMPLETE
        if ctx.rank == 0:
            report["errors"].append(
                "torch could not be imported: %s: %s" % (type(exc).__name__, exc)
            )
            report["checks"]["torch"] = check(INCOMPLETE, "torch is not importable here")
            write_report(out, report)
        return 0
    visible = (
        0 if ctx.self_test else (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    )
    if not ctx.self_test and visible == 0:
        if ctx.rank == 0:
            report["versions"] = torch_versions(torch, {})
            node = node_facts(ctx)
            report["node"] = {k: v for k, v in node.items() if k != "topology_raw"}
            report["checks"]["gpus"] = check(
                INCOMPLETE,
                "no GPU visible to torch (torch.cuda.is_available() is False)",
                nvidia_smi=node.get("nvidia_smi"),
            )
            report["checks"]["driver"] = driver_without_gpu(torch, ctx)
            write_report(out, report)
        return 0
    if not ctx.self_test and ctx.local_world > visible:
        # NCCL needs a GPU a rank: with more processes than GPUs nothing can be checked.
        if ctx.rank == 0:
            report["versions"] = torch_versions(torch, {})
            report["checks"]["gpus"] = check(
                FAIL,
                "%d process(es) on this node but %d GPU(s) visible: the world size does "
                "not match the GPUs" % (ctx.local_world, visible),
                present=visible,
                processes=ctx.local_world,
            )
            write_report(out, report)
        return 0
    free_at_start = None
    if ctx.self_test:
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", ctx.local_rank)
        torch.cuda.set_device(device)
        free_at_start = int(torch.cuda.mem_get_info(device)[0])  # before NCCL's buffers
    timeout = datetime.timedelta(seconds=float(ctx.spec.get("collective_timeout_s", 600)))
    if not ctx.launched:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
    try:
        kwargs: dict[str, Any] = {"backend": report["backend"], "timeout": timeout}
        if not ctx.self_test:
            kwargs["device_id"] = device
        dist.init_process_group(**kwargs)
    except Exception as exc:  # noqa: BLE001 - NCCL or gloo would not start: INCOMPLETE
        if ctx.rank == 0:
            report["errors"].append(
                "the process group would not start: %s: %s" % (type(exc).__name__, exc)
            )
            report["checks"]["all_reduce"] = check(
                INCOMPLETE, "%s would not start" % report["backend"]
            )
            write_report(out, report)
        return 0
    group_started = time.perf_counter()
    try:
        mine = rank_checks(torch, ctx, device)
        rank_health(torch, dist, ctx, device, mine, free_at_start)
        sizes = [float(s) for s in ctx.spec.get("sizes_mib", [1, 16, 128])]
        if ctx.self_test:
            sizes = [float(s) for s in ctx.spec.get("sizes_mib", [0.0625, 1])]
        warmups = int(ctx.spec.get("warmups", 5))
        iterations = int(ctx.spec.get("iterations", 20))
        skip = bool(ctx.fault.get("skip_collective"))
        mine["all_reduce"] = [
            all_reduce_size(
                torch, dist, device, ctx.rank, ctx.world, size, warmups, iterations, skip=skip
            )
            for size in sizes
        ]
        gathered: list[Any] = [None] * ctx.world
        dist.all_gather_object(gathered, mine)
        if out == "-":
            rank_line(ctx, mine)
        if ctx.rank == 0:
            node = node_facts(ctx) if ctx.local_rank == 0 else {}
            report["versions"] = torch_versions(torch, node)
            checks = report["checks"]
            checks["gpus"] = judge_gpus(ctx, gathered, node, visible)
            checks["arch"] = _merge_rank_checks([g["arch"] for g in gathered], "arch")
            checks["bf16"] = _merge_rank_checks([g["bf16"] for g in gathered], "bf16")
            checks["all_reduce"] = judge_all_reduce(ctx, [g["all_reduce"] for g in gathered])
            if ctx.self_test:
                checks["topology"] = check(SKIPPED, "CPU self-test: no GPU topology")
            elif node.get("topology") is not None:
                checks["topology"] = check(
                    RECORDED, "nvidia-smi topo -m, recorded, not judged", **node["topology"]
                )
                report["topology_raw"] = node.get("topology_raw")
            else:
                checks["topology"] = check(
                    RECORDED, "not recorded: %s" % node.get("topology_error")
                )
            checks.update(judge_health(torch, ctx, gathered))
            if ctx.spec.get("dcgm") is not None:
                dcgm = run_dcgm(int(ctx.spec["dcgm"]))
                status, reason = judge_dcgm(dcgm, ctx.thresholds)
                checks["dcgm"] = check(status, reason, **dcgm)
            report["ranks"] = [
                {k: v for k, v in g.items() if k not in ("all_reduce", "node_raw")}
                for g in gathered
            ]
            commands = ctx.spec.get("commands") or []
            if commands:
                clis = [run_cli(c) for c in commands]
                worst = (
                    FAIL
                    if any(c["status"] == FAIL for c in clis)
                    else (INCOMPLETE if any(c["status"] == INCOMPLETE for c in clis) else PASS)
                )
                checks["serving_cli"] = check(
                    worst, "; ".join(c["reason"] for c in clis), commands=clis
                )
            now = time.perf_counter()
            checks["budget"] = level_budget(ctx, now - group_started, now - _STARTED)
            write_report(out, report)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


def rank_line(ctx: Context, mine: dict[str, Any]) -> None:
    """This rank's own marked line on its stdout, where the report goes to stdout (a Job's
    log): its global rank, its node's rank in the rendezvous (GROUP_RANK, the launcher's),
    its pid and its own all-reduce counts. In a Job of several pods rank 0's report lands
    in one pod's log; these lines bind every other pod's log to its ranks in that report."""
    line = {
        "rank": ctx.rank,
        "group_rank": int(os.environ.get("GROUP_RANK", "0")),
        "local_rank": ctx.local_rank,
        "world_size": ctx.world,
        "pid": os.getpid(),
        "all_reduce": [
            {"size_mib": s["size_mib"], "bytes": s["bytes"], "wrong": len(s["wrong"])}
            for s in mine["all_reduce"]
        ],
    }
    sys.stdout.write("\n" + RANK_MARKER + json.dumps(line, sort_keys=True) + "\n")
    sys.stdout.flush()


def _read_smi_xml() -> tuple[dict[str, Any] | None, str]:
    started = time.perf_counter()
    text, why = run_nvidia_smi(["-q", "-x"])
    if text is None:
        return None, str(why)
    try:
        parsed = parse_smi_xml(text)
    except Exception as exc:  # noqa: BLE001 - XML nvidia-smi could not give: said, not raised
        return None, "nvidia-smi -q -x is not readable XML: %s" % exc
    return parsed, "answered in %.0f ms" % ((time.perf_counter() - started) * 1000)


def rank_health(
    torch: Any, dist: Any, ctx: Context, device: Any, found: dict[str, Any], free: int | None
) -> None:
    """What this rank measures of its GPU at its level (the copies, the BF16 load), and on
    each node's first rank what the node says (nvidia-smi, the kernel log), into FOUND."""
    th = ctx.thresholds
    reader = ctx.local_rank == 0 and not ctx.self_test
    found["pid"] = os.getpid()
    found["free_at_start"] = free
    raw: dict[str, Any] = {}
    if reader:
        before, raw["smi_before"] = _read_smi_xml()
        raw["counters_before"] = {
            g["uuid"]: g.get("clock_reason_counters_us") or {}
            for g in (before or {}).get("gpus", [])
        }
    if ctx.level != "quick":
        repeats = int(th.get("repeats", 5))
        pinned = not ctx.self_test
        host_mib = 16 if ctx.self_test else int(th.get("copy_mib", 256))
        d2d_mib = 16 if ctx.self_test else int(th.get("d2d_mib", 1024))
        found["copies"] = copy_bandwidths(torch, device, host_mib, repeats, ("h2d", "d2h"), pinned)
        found["copies"]["pinned"] = pinned
        found["copies"].update(copy_bandwidths(torch, device, d2d_mib, repeats, ("d2d",), pinned))
    sampler = ThrottleSampler(float(th.get("sample_interval_s", 0.25)))
    load_s = 0.0 if ctx.level == "quick" else float(th.get("load_seconds", 2.0))
    if load_s > 0:
        dist.barrier()  # every GPU of the node under load while the first rank samples
        size = 512 if ctx.self_test else int(th.get("load_size", 8192))
        if reader:
            with sampler:
                found["load"] = bf16_load(torch, device, size, load_s)
        else:
            found["load"] = bf16_load(torch, device, size, 0.5 if ctx.self_test else load_s)
    elif reader:
        sampler.once()
    if not reader:
        return
    smi, raw["smi"] = _read_smi_xml()
    topo, topo_why = run_nvidia_smi(["topo", "-m"])
    status, status_why = run_nvidia_smi(["nvlink", "-s"])
    errors, errors_why = run_nvidia_smi(["nvlink", "-e"])
    raw.update(
        {
            "parsed": smi,
            "samples": sampler.samples,
            "sample_errors": sampler.errors,
            "under_load": load_s > 0,
            "topology": parse_topology(topo) if topo else None,
            "nvlink_status": parse_nvlink_status(status or ""),
            "nvlink_status_read": status_why or "answered",
            "nvlink_errors": parse_nvlink_errors(errors or ""),
            "nvlink_errors_read": errors_why or "answered",
            "topology_read": topo_why or "answered",
            "kernel_log": read_kernel_log(),
        }
    )
    found["node_raw"] = raw


def judge_health(
    torch: Any, ctx: Context, gathered: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Rank 0: every node's reads and every rank's figures as each health check's numbers,
    each judged by its judge against the thresholds imagekit sent."""
    th = ctx.thresholds
    numbers: dict[str, dict[str, Any]] = {}
    checks: dict[str, dict[str, Any]] = {}
    if ctx.self_test:
        skipped = "CPU self-test: no GPU to read (its logic is tested on captures)"
        checks = {name: check(SKIPPED, skipped) for name in NODE_READ}
    else:
        own = [int(g["pid"]) for g in gathered if g.get("pid") is not None]
        free = {
            str((g.get("device") or {}).get("uuid")): int(g["free_at_start"])
            for g in gathered
            if g.get("free_at_start") is not None
        }
        nodes = [g for g in gathered if g.get("node_raw")]
        driver_version, driver_cuda = None, None
        for node in nodes:
            raw = node["node_raw"]
            parsed = raw.get("parsed") or {}
            driver_version = driver_version or parsed.get("driver_version")
            driver_cuda = driver_cuda or parsed.get("cuda_version")
            found = health_numbers(
                parsed, raw.get("samples") or [], raw.get("counters_before"),
                raw.get("topology"), raw.get("nvlink_status") or {},
                raw.get("nvlink_errors") or {}, own, free, bool(raw.get("under_load")),
            )  # fmt: skip
            for name, value in found.items():
                merged = numbers.setdefault(name, {})
                for key, item in value.items():
                    if isinstance(item, list):
                        merged.setdefault(key, []).extend(item)
                    elif isinstance(item, dict):
                        merged.setdefault(key, {}).update(item)
                    else:
                        merged[key] = item
            log = dict(raw.get("kernel_log") or {}, host=node.get("host"))
            xid = numbers.setdefault("xid", {"read": True, "nodes": [], "events": []})
            xid["nodes"].append({k: v for k, v in log.items() if k != "events"})
            xid["events"].extend(dict(e, host=node.get("host")) for e in log.get("events") or [])
            if not log.get("read"):
                xid["read"] = False
                xid["why_not_read"] = "%s: %s" % (node.get("host"), log.get("why_not_read"))
            xid["source"] = log.get("source")
            xid["lines_read"] = xid.get("lines_read", 0) + int(log.get("lines_read") or 0)
            reads = numbers.setdefault("reads", {})
            reads[str(node.get("host"))] = {
                k: raw.get(k)
                for k in (
                    "smi_before",
                    "smi",
                    "topology_read",
                    "nvlink_status_read",
                    "nvlink_errors_read",
                    "sample_errors",
                )  # fmt: skip
            }
        if "throttle" in numbers:
            numbers["throttle"]["load"] = [
                dict(g["load"], rank=g["rank"], uuid=(g.get("device") or {}).get("uuid"))
                for g in gathered
                if g.get("load")
            ]
            if not numbers["throttle"].get("samples"):
                numbers["throttle"]["why_not_sampled"] = "; ".join(
                    "; ".join(r.get("sample_errors") or []) for r in numbers["reads"].values()
                )
        runtime = getattr(torch.version, "cuda", None)
        getter = getattr(getattr(torch, "_C", None), "_cuda_getDriverVersion", None)
        if callable(getter):  # the driver's CUDA version as CUDA itself reports it: 13000
            driver_int = int(getter())
            driver_cuda = "%d.%d" % (driver_int // 1000, (driver_int % 1000) // 10)
        numbers["driver"] = {
            "driver_version": driver_version,
            "driver_cuda": driver_cuda,
            "runtime_cuda": runtime,
            "cuda_init_error": None,
        }
    if ctx.level == "quick":
        numbers["pcie_bandwidth"] = {"not_at_level": ctx.level}
        numbers["memory_bandwidth"] = {"not_at_level": ctx.level}
    else:
        copies = [
            dict(g["copies"], rank=g["rank"], uuid=(g.get("device") or {}).get("uuid"))
            for g in gathered
            if g.get("copies")
        ]
        keep = ("rank", "uuid", "repeats", "pinned")
        numbers["pcie_bandwidth"] = {
            "gpus": [
                {k: v for k, v in c.items() if k in keep or k.startswith(("h2d", "d2h"))}
                for c in copies
            ],
            "unit": "GB/s, the bytes moved once (as nvbandwidth counts them)",
        }
        numbers["memory_bandwidth"] = {
            "gpus": [
                {
                    k: v
                    for k, v in c.items()
                    if k in ("rank", "uuid", "repeats") or k.startswith("d2d")
                }  # fmt: skip
                for c in copies
            ],
            "unit": "GB/s, the bytes copied once (each is read and written: twice this moves)",
        }
    for name, judge in HEALTH_JUDGES.items():
        if name in numbers and name not in checks:
            status, reason = judge(numbers[name], th)
            checks[name] = check(status, reason, **numbers[name])
    if "reads" in numbers:
        checks["node_reads"] = check(RECORDED, "how each node's state was read", **numbers["reads"])
    return checks


def driver_without_gpu(torch: Any, ctx: Context) -> dict[str, Any]:
    """Where torch sees no GPU: whether the driver is too old for the image's CUDA runtime
    (CUDA's own words), so that it is named as that, not as a GPU or kernel that failed."""
    error = None
    try:
        torch.cuda.init()
    except Exception as exc:  # noqa: BLE001 - CUDA's refusal is this check's evidence
        error = "%s: %s" % (type(exc).__name__, exc)
    smi, _why = _read_smi_xml()
    numbers = {
        "driver_version": (smi or {}).get("driver_version"),
        "driver_cuda": (smi or {}).get("cuda_version"),
        "runtime_cuda": getattr(torch.version, "cuda", None),
        "cuda_init_error": error,
    }
    status, reason = judge_driver(numbers, ctx.thresholds)
    return check(status, reason, **numbers)


def level_budget(ctx: Context, seconds_checks: float, seconds_probe: float) -> dict[str, Any]:
    """The level's time against its budget: quick beyond the launch (from the process
    group's start), standard and extended from the probe's start (torch's import, NCCL's
    start; the launcher's own start is measured by imagekit around it)."""
    quick = ctx.level == "quick"
    numbers = {
        "level": ctx.level,
        "seconds": round(seconds_checks if quick else seconds_probe, 3),
        "seconds_checks": round(seconds_checks, 3),
        "seconds_probe": round(seconds_probe, 3),
        "measured": (
            "from the process group's start to the report (beyond the launch)"
            if quick
            else "from the probe's start to the report (torch's import and NCCL's start "
            "included; the launcher's own start is not)"
        ),
    }
    status, reason = judge_budget(numbers, ctx.thresholds)
    if ctx.self_test:  # a budget is a GPU node's; a CPU's time is recorded, not judged
        status, reason = RECORDED, "CPU self-test: %s" % reason
    return check(status, reason, **numbers)


def _merge_rank_checks(results: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """One check over every rank: the worst status, each failing rank named."""
    order = [FAIL, INCOMPLETE, PASS, SKIPPED]
    worst = min((r["status"] for r in results), key=lambda s: order.index(s) if s in order else 0)
    failing = [
        "rank %d: %s" % (i, r["reason"])
        for i, r in enumerate(results)
        if r["status"] in (FAIL, INCOMPLETE)
    ]
    reason = "; ".join(failing) if failing else results[0]["reason"]
    if not failing and len(results) > 1:
        reason = "every rank: " + reason
    return check(worst, reason, ranks=results)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", required=True, help="where rank 0 writes the JSON report (- for stdout)"
    )
    parser.add_argument("--spec-json", default="{}", help="expectations and sizes (imagekit's)")
    parser.add_argument("--self-test", action="store_true", help="gloo on CPU: not a preflight")
    args = parser.parse_args(argv)
    spec = json.loads(args.spec_json)
    if args.self_test:
        spec["self_test"] = True
    ctx = Context(spec)
    try:
        return run(ctx, args.out)
    except Exception as exc:  # noqa: BLE001 - rank 0 keeps the failure in the report
        if ctx.rank == 0:
            report = base_report(ctx)
            report["errors"].append(
                "the probe failed: %s: %s\n%s"
                % (type(exc).__name__, exc, traceback.format_exc()[-4000:])
            )
            report["checks"]["probe"] = check(
                INCOMPLETE, "the probe raised %s" % type(exc).__name__
            )
            write_report(args.out, report)
        raise


if __name__ == "__main__":
    sys.exit(main())
