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

PROBE_NAME = "imagekit-gpu-preflight"
PROBE_VERSION = 1
PASS, FAIL, INCOMPLETE, SKIPPED, RECORDED = "PASS", "FAIL", "INCOMPLETE", "SKIPPED", "RECORDED"
MIB = 1024 * 1024
REPORT_MARKER = "@@IMAGEKIT_GPU_REPORT@@ "
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
    if ctx.self_test:
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", ctx.local_rank)
        torch.cuda.set_device(device)
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
    try:
        mine = rank_checks(torch, ctx, device)
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
        if ctx.rank == 0:
            node = node_facts(ctx) if ctx.local_rank == 0 else {}
            report["versions"] = torch_versions(torch, node)
            report["ranks"] = [{k: v for k, v in g.items() if k != "all_reduce"} for g in gathered]
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
            write_report(out, report)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


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
