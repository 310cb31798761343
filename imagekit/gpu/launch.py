"""Starting the GPU probe under torch's own launcher: on this host, or in the image.

The probe is never started by a launcher of imagekit's: ``python3 -m torch.distributed.run``
starts one process a GPU (``--nproc-per-node gpu``, torch's own count of the visible GPUs,
unless a number is given) and, for several nodes, joins them through its own rendezvous
options, which are passed through as given (``--nnodes 2 --node-rank 0 --rdzv-backend c10d
--rdzv-endpoint HOST:29400``). What imagekit adds is the wall-clock limit: the launcher
and every rank it started run in a process tree (or a container) that is killed whole on
the limit, SIGINT or SIGTERM, so a collective that hangs leaves no process behind.

In the image (``--gpus all`` or a CDI device, no network, a larger /dev/shm for NCCL's
shared-memory transport) the probe is mounted read-only and writes its report into
a folder mounted for it alone; on the host it runs in the Python given (the one holding
torch), its report written into the evidence folder.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagekit.errors import UsageError
from imagekit.gpu.health import LEVEL_SETTINGS, resolve_thresholds
from imagekit.gpu.judges import Asked
from imagekit.gpu.report import REPORT_CAP, ProbeReport, parse_report
from imagekit.kinds.gpu_preflight import MAX_GPUS, PreflightLevel, name_pattern
from imagekit.runners.engine import EngineRunner
from imagekit.runners.host import HostRunner
from imagekit.runners.seam import Devices, Limits, Mount, RunSpec, run_to_end
from imagekit.runtime.container import ProcessRun, gpu_refusal

if TYPE_CHECKING:
    from imagekit.plans.model import GpuExpectation

PROBE_IN_CONTAINER = "/imagekit-gpu/probe.py"
OUT_IN_CONTAINER = "/imagekit-out"
DEFAULT_SIZES_MIB = (1.0, 16.0, 128.0)
DEFAULT_TIMEOUT_S = 900.0
#: The launcher's rendezvous options that may be passed through (for several nodes), each
#: with the form its value must have: nothing else reaches the launcher's command line (no
#: ``-m`` or ``--no-python`` that would run something else than the probe, no script path).
_INT = r"[0-9]{1,6}"
_HOST = r"[A-Za-z0-9._:\[\]-]{1,253}"
RENDEZVOUS_OPTIONS: Mapping[str, str] = {
    "--nnodes": rf"{_INT}(:{_INT})?",
    "--node-rank": _INT,
    "--rdzv-backend": r"c10d|etcd|etcd-v2|static",
    "--rdzv-endpoint": rf"{_HOST}(:{_INT})?",
    "--rdzv-id": r"[A-Za-z0-9._-]{1,128}",
    "--master-addr": _HOST,
    "--master-port": _INT,
}
LAUNCHER_OPTIONS = tuple(
    spelling
    for name in RENDEZVOUS_OPTIONS
    for spelling in (name, "--" + name[2:].replace("-", "_"))
)
#: Bounds a value of the options must keep: past them a run is a mistake, not a preflight.
MAX_SIZE_MIB = 16384.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MIN_TIMEOUT_S = 1.0
MAX_REPEATS = 100_000
_CAPABILITY = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}")


def rendezvous_args(args: Sequence[str]) -> tuple[str, ...]:
    """``--launcher-arg`` values as ``--option=value``, each a rendezvous option of
    torch.distributed.run with a value of its form (given as ``--opt=value`` or as two
    arguments); anything else is bad input naming it."""
    out: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        name, eq, value = arg.partition("=")
        canonical = "--" + name[2:].replace("_", "-") if name.startswith("--") else name
        if canonical not in RENDEZVOUS_OPTIONS:
            raise UsageError(
                f"--launcher-arg {arg}: not one of torch.distributed.run's rendezvous options "
                "imagekit passes through",
                hint=f"one of {', '.join(RENDEZVOUS_OPTIONS)}, as --launcher-arg=--nnodes=2",
            )
        if not eq:
            if not rest:
                raise UsageError(
                    f"--launcher-arg {arg}: the option's value is missing",
                    hint=f"--launcher-arg={arg}=VALUE",
                )
            value = rest.pop(0)
        if not re.fullmatch(RENDEZVOUS_OPTIONS[canonical], value):
            raise UsageError(f"--launcher-arg {arg}: {value!r} is not a value of {canonical}")
        out.append(f"{canonical}={value}")
    return tuple(out)


def _finite(value: float, option: str, low: float, high: float, *, low_open: bool) -> None:
    below = value <= low if low_open else value < low
    if isinstance(value, bool) or not math.isfinite(value) or below or value > high:
        side = f"over {low:g}" if low_open else f"at least {low:g}"
        raise UsageError(f"{option} {value}: give a finite number {side} and at most {high:g}")


# NCCL's settings a user exports for the node carry into the container as they are.
_PASSED_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_SYMM_MEM", "NVSHMEM_")


@dataclass(frozen=True)
class Expectations:
    """What the node must have: from the plan's ``gpu:`` section or the options, each value
    checked here, where it is given (a count a whole number in range, the memory finite,
    the capability X.Y, the name pattern compiled), never first on the GPU node."""

    gpus: int | None = None
    gpu_name: str | None = None
    min_memory_gib: float | None = None
    min_capability: str | None = None

    def __post_init__(self) -> None:
        gpus = self.gpus
        if gpus is not None and (isinstance(gpus, bool) or not 1 <= gpus <= MAX_GPUS):
            raise UsageError(
                f"--gpus {gpus}: a preflight needs 1 to {MAX_GPUS} GPUs",
                hint="give the number of GPUs the node must have, e.g. --gpus 8",
            )
        if self.gpu_name is not None:
            try:
                name_pattern(self.gpu_name, "--gpu-name")
            except ValueError as exc:
                raise UsageError(str(exc), hint="a pattern such as H20 or 'H100|H200'") from None
        if self.min_memory_gib is not None:
            _finite(self.min_memory_gib, "--min-memory-gib", 0, 65536, low_open=True)
        if self.min_capability is not None and not _CAPABILITY.fullmatch(self.min_capability):
            raise UsageError(
                f"--min-capability {self.min_capability}: not a compute capability X.Y",
                hint="--min-capability 9.0",
            )

    def to_json(self) -> dict[str, Any]:
        found = {
            "count": self.gpus,
            "name": self.gpu_name,
            "min_memory_gib": self.min_memory_gib,
            "min_capability": self.min_capability,
        }
        return {k: v for k, v in found.items() if v is not None}

    @classmethod
    def of_plan(
        cls,
        section: GpuExpectation | None,
        *,
        gpus: int | None = None,
        gpu_name: str | None = None,
        min_memory_gib: float | None = None,
        min_capability: str | None = None,
    ) -> Expectations:
        """The one place a plan's ``gpu:`` section becomes expectations: each value given
        (a command's option) wins over the section's, which stands for the rest."""
        return cls(
            gpus=gpus if gpus is not None else (section.count if section else None),
            gpu_name=gpu_name or (section.name if section else None),
            min_memory_gib=min_memory_gib
            if min_memory_gib is not None
            else (section.min_memory_gib if section else None),
            min_capability=min_capability or (section.min_capability if section else None),
        )


@dataclass(frozen=True)
class ProbeOptions:
    """How the probe runs: its expectations, its sizes and repetitions, its limits."""

    expect: Expectations = field(default_factory=Expectations)
    sizes_mib: tuple[float, ...] = DEFAULT_SIZES_MIB
    warmups: int = 5
    iterations: int = 20
    min_busbw: float | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    nproc_per_node: int | None = None  # None: torch's own count ("gpu")
    launcher_args: tuple[str, ...] = ()
    self_test: bool = False
    #: serving CLI checks the CPU audit deferred, re-run on the GPU host (argv, flags)
    commands: tuple[Mapping[str, Any], ...] = ()
    #: a fault injected into one rank, to test the check itself (never for a real run)
    fault: Mapping[str, Any] | None = None
    #: the health checks' level and thresholds (imagekit.gpu.health); DCGM's level, if any
    level: PreflightLevel = "standard"
    thresholds: Mapping[str, Any] | None = None  # None: the level's and the generic floors
    dcgm: int | None = None

    def __post_init__(self) -> None:
        nproc = self.nproc_per_node
        if nproc is not None and (isinstance(nproc, bool) or not 1 <= nproc <= 1024):
            raise UsageError(f"--nproc-per-node {nproc}: 1 to 1024")
        if not self.sizes_mib:
            raise UsageError("--sizes: give positive sizes in MiB, e.g. 1,16,128")
        for size in self.sizes_mib:
            _finite(size, "--sizes", 0, MAX_SIZE_MIB, low_open=True)
        if not 0 <= self.warmups <= MAX_REPEATS or not 1 <= self.iterations <= MAX_REPEATS:
            raise UsageError(
                f"--warmups must be 0 to {MAX_REPEATS} and --iterations 1 to {MAX_REPEATS}"
            )
        if self.min_busbw is not None:
            _finite(self.min_busbw, "--min-busbw", 0, 1e6, low_open=True)
        _finite(self.timeout_s, "--timeout", MIN_TIMEOUT_S, MAX_TIMEOUT_S, low_open=False)
        object.__setattr__(self, "launcher_args", rendezvous_args(self.launcher_args))

    def asked(self) -> Asked:
        """What the report is held to: these expectations, sizes and floor."""
        spec = self.spec()
        return Asked(
            gpus=self.expect.gpus,
            gpu_name=self.expect.gpu_name,
            min_memory_gib=self.expect.min_memory_gib,
            min_capability=self.expect.min_capability,
            sizes_mib=tuple(float(s) for s in spec["sizes_mib"]),
            warmups=self.warmups,
            iterations=self.iterations,
            min_busbw=self.min_busbw,
            commands=len(self.commands),
            self_test=self.self_test,
            level=self.level,
            thresholds=dict(spec["thresholds"]),
        )

    def expected(self) -> dict[str, Any]:
        """What is recorded and signed as expected: the expectations, the floor, the level and
        the health thresholds the report was judged against (so the verdict can be judged
        again from the record alone)."""
        found = self.expect.to_json()
        if self.min_busbw is not None:
            found["min_busbw_gbps"] = self.min_busbw
        spec = self.spec()
        found["level"] = spec["level"]
        found["thresholds"] = spec["thresholds"]
        return found

    def spec(self) -> dict[str, Any]:
        """The probe's ``--spec-json``."""
        spec: dict[str, Any] = {
            "expect": self.expect.to_json(),
            "sizes_mib": list(self.sizes_mib),
            "warmups": self.warmups,
            "iterations": self.iterations,
            "collective_timeout_s": self.timeout_s,
        }
        if self.min_busbw is not None:
            spec["min_busbw"] = self.min_busbw
        spec["level"] = self.level
        spec["thresholds"] = (
            dict(self.thresholds)
            if self.thresholds is not None
            else resolve_thresholds(self.level).for_probe()
        )
        level_sizes = LEVEL_SETTINGS[self.level].sizes_mib
        if level_sizes is not None and self.sizes_mib == DEFAULT_SIZES_MIB:
            spec["sizes_mib"] = list(level_sizes)
        if self.dcgm is not None:
            spec["dcgm"] = self.dcgm
        if self.commands:
            spec["commands"] = [dict(c) for c in self.commands]
        if self.fault:
            spec["fault"] = dict(self.fault)
        if self.self_test:
            spec["self_test"] = True
            if self.sizes_mib == DEFAULT_SIZES_MIB:
                spec["sizes_mib"] = [0.0625, 1.0]  # a CPU all-reduce of 128 MiB takes long
        return spec


@dataclass(frozen=True)
class ProbeOutcome:
    """What came back of a run: the report (None when none did), and why there was none."""

    report: ProbeReport | None
    run: ProcessRun
    report_path: Path
    why_none: str | None = None
    #: the engine refused the GPU request (no NVIDIA runtime, no such CDI device)
    refused: str | None = None


@contextmanager
def probe_path() -> Iterator[Path]:
    """The probe shipped as package data, as a real path the engine can bind-mount."""
    with resources.as_file(resources.files("imagekit.gpu").joinpath("probe.py")) as path:
        yield path


def launcher_argv(python: str, probe: str, out: str, options: ProbeOptions) -> list[str]:
    nproc = "gpu" if options.nproc_per_node is None else str(options.nproc_per_node)
    if options.self_test and options.nproc_per_node is None:
        nproc = "2"  # gloo on CPU: two processes prove the collective's arithmetic
    return [
        python,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        nproc,
        *options.launcher_args,
        probe,
        "--out",
        out,
        "--spec-json",
        json.dumps(options.spec(), sort_keys=True),
    ]


def run_on_host(options: ProbeOptions, run_dir: Path, python: str | None = None) -> ProbeOutcome:
    """The probe on this host's GPUs, in PYTHON (this interpreter by default)."""
    python = python or sys.executable
    if shutil.which(python) is None and not Path(python).exists():
        raise UsageError(f"--python {python}: no such interpreter", hint="give the one with torch")
    out = run_dir / "gpu-preflight-report.json"
    with probe_path() as probe:
        argv = launcher_argv(python, str(probe), str(out), options)
        shown = ("python3", *argv[1:-1], "SPEC")
        shown = tuple("probe.py" if a == str(probe) else a for a in shown)
        spec = RunSpec(argv=tuple(argv), stage="gpu-preflight", shown=shown, output="gpu-probe")
        run = run_to_end(HostRunner(), spec, run_dir, options.timeout_s)
    return _outcome(run, out)


def run_in_image(
    client: str,
    image_id: str,
    options: ProbeOptions,
    run_dir: Path,
    *,
    gpus: str | None = "all",
    cdi_devices: tuple[str, ...] = (),
    shm_size: str = "16g",
    env: Mapping[str, str] | None = None,
) -> ProbeOutcome:
    """The probe in the image, on the GPUs the engine gives it, with no network."""
    out_dir = run_dir / "gpu-probe-out"
    out_dir.mkdir()
    os.chmod(out_dir, 0o777)  # noqa: S103 - the image's user writes its report here
    passed = {k: v for k, v in os.environ.items() if k.startswith(_PASSED_PREFIXES)}
    passed.update(env or {})
    with probe_path() as probe:
        argv = launcher_argv("-", PROBE_IN_CONTAINER, f"{OUT_IN_CONTAINER}/report.json", options)[
            1:
        ]
        shown = ("docker", "run", "...", image_id, "python3", *argv[:-1], "SPEC")
        spec = RunSpec(
            image=image_id,
            argv=("python3", *argv),
            stage="gpu-preflight",
            label="io.imagekit.gpu-preflight=1",
            network="none",
            devices=Devices(
                gpus=None if options.self_test else gpus,
                cdi=() if options.self_test else cdi_devices,
                shm_size=shm_size,
            ),
            env={"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", **passed},  # noqa: S108
            mounts=(
                Mount(probe, PROBE_IN_CONTAINER),
                Mount(out_dir, OUT_IN_CONTAINER, read_only=False),
            ),
            limits=Limits(scratch=(("/tmp", "1g"),)),  # noqa: S108 - the container's /tmp
            shown=shown,
            output="gpu-probe",
        )
        run = run_to_end(EngineRunner(client), spec, run_dir, options.timeout_s)
    outcome = _outcome(run, out_dir / "report.json")
    refused = gpu_refusal(run)
    if refused is not None:
        return ProbeOutcome(None, run, outcome.report_path, f"no GPU visible: {refused}", refused)
    return outcome


def _outcome(run: ProcessRun, out: Path) -> ProbeOutcome:
    if out.is_file():
        size = out.stat().st_size
        if size > REPORT_CAP:
            return ProbeOutcome(None, run, out, f"the report is {size} bytes, over {REPORT_CAP}")
        try:
            return ProbeOutcome(parse_report(out.read_bytes(), "what the run wrote"), run, out)
        except UsageError as exc:  # what the image wrote is not the probe's: not decided
            return ProbeOutcome(None, run, out, exc.message)
    if run.timed_out:
        why = (
            f"timed out after {run.seconds:g} s: every rank was killed (a collective that "
            "hangs, or a rank that never joined)"
        )
    else:
        said = run.stderr.last_words(300) or run.stdout.last_words(300)
        if "Cuda is not available" in said:
            why = f"no GPU visible: torch.distributed.run says {said}"
        else:
            why = f"the launcher exited {run.exit_code} without a report: {said}"
    return ProbeOutcome(None, run, out, why)


def gpus_visible() -> str | None:
    """None when this host shows a GPU (``nvidia-smi -L`` lists one), else why not: the
    pipeline's GPU preflight is skipped, saying so, where no GPU is visible."""
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return "no GPU visible on this host (nvidia-smi is not on PATH)"
    try:
        listed = subprocess.run(  # noqa: S603 - a fixed program
            ["nvidia-smi", "-L"],  # noqa: S607 - found on PATH above
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no GPU visible on this host (nvidia-smi -L: {exc})"
    gpus = [line for line in listed.stdout.splitlines() if line.startswith("GPU ")]
    if listed.returncode != 0 or not gpus:
        said = (listed.stderr or listed.stdout).strip().splitlines()
        return f"no GPU visible on this host (nvidia-smi -L: {said[-1] if said else 'none'})"
    return None
