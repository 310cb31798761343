"""The GPU probe's report read back, and the verdict imagekit decides from it.

The report comes out of the image under test (or a Job's pod), so it is a trust boundary: it
must be the probe's own document (every top-level key known, each check a status from the
probe's vocabulary) or it is refused as bad input. The probe decides nothing: here every
check must be present and say PASS for GPU_PREFLIGHT_PASS (the topology is RECORDED, never
judged), any FAIL makes GPU_PREFLIGHT_FAIL naming it, and anything that could not be
decided (no GPU, NCCL would not start, a timeout, a check missing, a CPU self-test) makes
GPU_PREFLIGHT_INCOMPLETE. A report cannot print its way into a pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from imagekit.errors import UsageError
from imagekit.kinds.gpu_preflight import (
    AllReduceFigure,
    GpuCheck,
    GpuFacts,
    GpuPreflightPredicate,
    GpuPreflightStatus,
    PreflightLevel,
    Where,
)
from imagekit.version import __version__

CheckState = Literal["PASS", "FAIL", "INCOMPLETE", "SKIPPED", "RECORDED"]
#: The checks a preflight must report, each PASS, for GPU_PREFLIGHT_PASS.
REQUIRED = ("gpus", "arch", "bf16", "all_reduce")
SELF_TEST_SENTENCE = "CPU self-test, not a GPU preflight"


class ProbeCheck(BaseModel):
    """One check: its status and sentence; its numbers are the check's own (kept as given)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    status: CheckState
    reason: str


class ProbeReport(BaseModel):
    """The probe's one JSON document (imagekit/gpu/probe.py writes it on rank 0)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    probe: Literal["imagekit-gpu-preflight"]
    probe_version: Literal[1]
    mode: Literal["gpu", "self-test"]
    level: PreflightLevel | None = None
    scope: str
    host: str
    started_at: str
    finished_at: str | None
    launched_by: str
    world_size: int
    local_world_size: int
    backend: str
    python: str
    versions: dict[str, Any]
    environment: dict[str, str]
    nvlink_multicast: str
    ranks: list[dict[str, Any]]
    checks: dict[str, ProbeCheck]
    errors: list[str]
    node: dict[str, Any] | None = None
    topology_raw: str | None = None

    def check(self, name: str) -> dict[str, Any]:
        """A check's whole document (status, reason and its numbers), or {}."""
        found = self.checks.get(name)
        return found.model_dump() if found is not None else {}


def parse_report(data: bytes, source: str) -> ProbeReport:
    """The probe's report from its bytes; anything else is bad input naming SOURCE."""
    try:
        return ProbeReport.model_validate(json.loads(data))
    except (ValueError, ValidationError) as exc:
        first = str(exc).splitlines()
        said = " ".join(line.strip() for line in first[:3])
        raise UsageError(
            f"{source} is not a report of imagekit's GPU probe: {said}",
            hint="give the report.json the probe wrote (imagekit gpu-preflight --emit-job "
            "prints where the Job writes it)",
        ) from None


@dataclass(frozen=True)
class Verdict:
    status: GpuPreflightStatus
    sentence: str
    failing: tuple[str, ...]
    self_test: bool = False

    @property
    def ok(self) -> bool:
        return self.status is GpuPreflightStatus.PASS


def decide(report: ProbeReport | None, *, why_none: str = "no report") -> Verdict:
    """The preflight's status from the probe's report (None: no report came back)."""
    if report is None:
        return Verdict(GpuPreflightStatus.INCOMPLETE, f"not decided: {why_none}", ())
    failing = tuple(
        f"{name}: {c.reason}" for name, c in report.checks.items() if c.status == "FAIL"
    )
    open_ = [f"{name}: {c.reason}" for name, c in report.checks.items() if c.status == "INCOMPLETE"]
    if report.mode == "self-test":
        worked = not failing and not open_
        said = (
            "every check of the probe's logic passed" if worked else "; ".join([*failing, *open_])
        )
        return Verdict(
            GpuPreflightStatus.INCOMPLETE,
            f"{SELF_TEST_SENTENCE} ({said})",
            failing,
            self_test=True,
        )
    if failing:
        return Verdict(GpuPreflightStatus.FAIL, "; ".join(failing), failing)
    missing = [name for name in REQUIRED if name not in report.checks]
    open_ += [f"{name}: not reported" for name in missing]
    if open_:
        return Verdict(GpuPreflightStatus.INCOMPLETE, "; ".join(open_), ())
    not_passed = [n for n in REQUIRED if report.checks[n].status != "PASS"]
    if not_passed:
        return Verdict(GpuPreflightStatus.INCOMPLETE, f"not passed: {', '.join(not_passed)}", ())
    gpus = report.check("gpus")
    return Verdict(GpuPreflightStatus.PASS, str(gpus.get("reason", "")), ())


def _facts(report: ProbeReport) -> list[GpuFacts]:
    return [
        GpuFacts(
            rank=int(gpu.get("rank", 0)),
            host=gpu.get("host"),
            name=str(gpu.get("name")),
            memory_gib=gpu.get("memory_gib"),
            capability=gpu.get("capability"),
            uuid=gpu.get("uuid"),
            numa_node=gpu.get("numa_node"),
            cpu_list=gpu.get("cpu_list"),
        )
        for gpu in report.check("gpus").get("gpus") or []
    ]


def _figures(report: ProbeReport) -> list[AllReduceFigure]:
    return [
        AllReduceFigure(
            size_mib=float(size["size_mib"]),
            slowest_rank_mean_us=float(size["slowest_rank_mean_us"]),
            algbw_gbps=float(size["algbw_gbps"]),
            busbw_gbps=float(size["busbw_gbps"]),
            all_elements_right=bool(size["all_elements_right"]),
        )
        for size in report.check("all_reduce").get("sizes") or []
    ]


def _topology(report: ProbeReport) -> dict[str, Any] | None:
    found = report.check("topology")
    if not found.get("matrix"):
        return None
    return {k: found[k] for k in ("devices", "matrix", "affinity") if k in found}


def predicate_of(
    report: ProbeReport,
    verdict: Verdict,
    *,
    scope: str,
    where: Where,
    image_id: str | None,
    pod: str | None,
    expected: dict[str, Any],
) -> GpuPreflightPredicate:
    """What is signed and recorded of a preflight: its verdict, GPUs, figures and versions."""
    return GpuPreflightPredicate(
        status=verdict.status,
        scope=scope,
        where=where,
        node=report.host,
        image_id=image_id,
        pod=pod,
        world_size=report.world_size,
        level=report.level,
        gpus=_facts(report),
        expected=expected,
        checks=[
            GpuCheck(name=n, status=c.status, reason=c.reason) for n, c in report.checks.items()
        ],
        failing=list(verdict.failing),
        all_reduce=_figures(report),
        topology=_topology(report),
        versions=report.versions,
        preflight_at=report.finished_at or report.started_at,
        imagekit_version=__version__,
    )
