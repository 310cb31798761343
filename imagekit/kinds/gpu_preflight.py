"""The GPU preflight's kind: its statuses, record details, signed predicate, import and rule.

The preflight (imagekit.gpu) runs the image's torch on the GPUs of the node that will serve
it, one process a GPU under torch's launcher: each GPU's model, memory and capability
against what the plan expects, the compiled arches, a BF16 product against FP32, NCCL
all-reduce correctness and bandwidth, the topology recorded. Statuses:

- ``GPU_PREFLIGHT_PASS``: every check passed on every rank. A hardware and communication
  check: no weights were loaded, no serving engine started, and its figures are not a
  performance benchmark.
- ``GPU_PREFLIGHT_FAIL``: a check said no; each failing check and rank is named.
- ``GPU_PREFLIGHT_INCOMPLETE``: it could not be decided (no GPU visible, NCCL would not
  start, the run timed out, a CPU self-test); never a pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, StrictInt, field_validator

from imagekit.attest.rules import Requirement, Signed
from imagekit.kinds.details import ImportedMark, RecordDetails, attestation_field
from imagekit.kinds.spec import (
    AgedRequirement,
    AgedRule,
    Imported,
    KindSpec,
    PolicyEntry,
    Predicate,
    PredicateModel,
    statuses_of,
)

if TYPE_CHECKING:
    from imagekit.attest.collect import Collected

GPU_PREFLIGHT_V1 = "https://imagekit.dev/attestation/gpu-preflight/v1"


class GpuPreflightStatus(StrEnum):
    PASS = "GPU_PREFLIGHT_PASS"  # noqa: S105 - a status, not a password
    FAIL = "GPU_PREFLIGHT_FAIL"
    INCOMPLETE = "GPU_PREFLIGHT_INCOMPLETE"


Where = Literal["image", "host", "pod"]
#: The preflight's levels, shortest first (imagekit/gpu/health.py says what each runs).
PreflightLevel = Literal["quick", "standard", "extended"]
PREFLIGHT_LEVELS: tuple[PreflightLevel, ...] = ("quick", "standard", "extended")


class _Figures(PredicateModel):
    # What is signed and written into the ledger and --json is JSON that strict parsers
    # read: never a bare NaN or Infinity.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class GpuFacts(_Figures):
    """One GPU as the rank that ran on it saw it."""

    rank: int
    host: str | None = None
    name: str
    memory_gib: float | None = None
    capability: str | None = None
    uuid: str | None = None
    numa_node: int | None = None
    cpu_list: str | None = None


class GpuCheck(PredicateModel):
    name: str
    status: str = Field(description="PASS, FAIL, INCOMPLETE, SKIPPED or RECORDED")
    reason: str


class AllReduceFigure(_Figures):
    size_mib: float
    slowest_rank_mean_us: float
    algbw_gbps: float
    busbw_gbps: float
    all_elements_right: bool


class GpuPreflightPredicate(_Figures):
    """What `imagekit gpu-preflight` proved about the subject image on a GPU node, signed."""

    status: str = Field(description=", ".join(GpuPreflightStatus))
    scope: str
    where: Where = Field(description="image (run by the engine), pod (a Job's pod) or host")
    node: str = Field(description="the host name of the node (rank 0's)")
    image_id: str | None = Field(default=None, description="the image ID the engine or pod ran")
    pod: str | None = Field(default=None, description="namespace/name, where a pod ran it")
    world_size: int
    level: PreflightLevel | None = Field(
        default=None, description="quick, standard or extended; none: before levels"
    )
    gpus: list[GpuFacts]
    expected: dict[str, Any] = Field(description="count, name pattern, memory, capability")
    checks: list[GpuCheck]
    failing: list[str]
    all_reduce: list[AllReduceFigure]
    topology: dict[str, Any] | None = Field(
        default=None, description="nvidia-smi topo -m as a matrix, with each GPU's affinity"
    )
    versions: dict[str, Any]
    model_validation: Literal["not_run"] = Field(
        default="not_run", description="no weights are loaded by a preflight"
    )
    preflight_at: str = Field(description="RFC 3339 UTC time the preflight finished")
    imagekit_version: str


class GpuPreflightDetails(RecordDetails):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    where: Where | None = Field(default=None, description="image, pod or host")
    image_id: str | None = None
    pod: str | None = None
    pod_uid: str | None = Field(
        default=None, description="the pod's uid, where imagekit read the pod itself (--cluster)"
    )
    node: str | None = None
    pods: list[dict[str, Any]] | None = Field(
        default=None,
        description="a Job of several pods (--cluster --nodes N): each pod, its node, its "
        "completion index, its imageID and the ranks its log showed",
    )
    world_size: int | None = None
    level: PreflightLevel | None = None
    gpu_names: list[str] | None = None
    checks: dict[str, str] | None = None
    failing: list[str] | None = None
    busbw_gbps: float | None = Field(
        default=None, description="bus bandwidth at the largest all-reduce size"
    )
    versions: dict[str, Any] | None = None
    attestation: str | None = attestation_field("the signed attestation")
    imported: ImportedMark = None


def details_of(predicate: GpuPreflightPredicate) -> GpuPreflightDetails:
    """The record a signed (or about to be signed) preflight makes."""
    return GpuPreflightDetails(
        where=predicate.where,
        image_id=predicate.image_id,
        pod=predicate.pod,
        node=predicate.node,
        world_size=predicate.world_size,
        level=predicate.level,
        gpu_names=sorted({g.name for g in predicate.gpus}),
        checks={c.name: c.status for c in predicate.checks},
        failing=predicate.failing,
        busbw_gbps=predicate.all_reduce[-1].busbw_gbps if predicate.all_reduce else None,
        versions=predicate.versions,
    )


def _record(predicate: GpuPreflightPredicate) -> Imported:
    return Imported(predicate.status, predicate.scope, details_of(predicate))


def _token(pattern: str) -> str:
    return rf"(?<![A-Za-z0-9])(?:{pattern})(?![A-Za-z0-9])"


def name_pattern(pattern: str, what: str = "the GPU name pattern") -> str:
    """PATTERN, once it compiles as the token it is matched as (a ValueError naming WHAT and
    the regex's own words otherwise): read where it is given (an option, a plan, a policy),
    never first on the GPU node."""
    if not pattern.strip() or len(pattern) > 256:
        raise ValueError(f"{what} {pattern!r}: give a pattern of a GPU's name, e.g. H20")
    try:
        re.compile(_token(pattern), re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"{what} {pattern!r} is not a regular expression: {exc.msg}") from None
    return pattern


def name_matches(pattern: str, name: str) -> bool:
    """Whether PATTERN names the GPU as a whole token of its name, case aside: ``H20`` is
    "NVIDIA H20-3e", never "NVIDIA H200" (the probe's own rule, imagekit/gpu/probe.py)."""
    return re.search(_token(pattern), name, re.IGNORECASE) is not None


#: The most GPUs a count may name (a process group across many nodes; a sanity bound).
MAX_GPUS = 65536


_STATUS = statuses_of("gpu-preflight", GpuPreflightStatus)


class GpuPreflightRequirement(AgedRequirement):
    status: tuple[Annotated[str, AfterValidator(_STATUS)], ...] = Field(
        default=(GpuPreflightStatus.PASS.value,), min_length=1
    )
    min_gpus: StrictInt | None = Field(
        default=None, ge=1, le=MAX_GPUS, description="at least this many GPUs"
    )
    gpu_name: str | None = Field(default=None, description="every GPU's name matches this")
    min_level: PreflightLevel | None = Field(
        default=None,
        description="the preflight ran at least this level (quick < standard < "
        "extended); one from before levels reaches none",
    )

    @field_validator("gpu_name")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        return None if value is None else name_pattern(value, "gpu_name")


def _reaches(level: str | None, minimum: str) -> bool:
    """Whether a preflight's LEVEL (None: from before levels) reaches MINIMUM."""
    if level not in PREFLIGHT_LEVELS:
        return False
    return PREFLIGHT_LEVELS.index(level) >= PREFLIGHT_LEVELS.index(minimum)


SIGNED_PREFLIGHT = Signed(GPU_PREFLIGHT_V1, GpuPreflightPredicate, "preflight_at", "GPU preflight")


@dataclass(frozen=True)
class GpuPreflightRule(AgedRule[GpuPreflightRequirement]):
    """The newest signed preflight of the image: its status one of those allowed, on at least
    the GPUs asked for, each named as asked, no older than the maximum age."""

    predicate_type: str = GPU_PREFLIGHT_V1

    def evaluate(self, collected: Collected, now: datetime) -> list[Requirement]:
        rule = self.requirement
        what = f"gpu preflight status in {{{', '.join(rule.status)}}}"
        if rule.min_gpus:
            what += f" on at least {rule.min_gpus} GPU(s)"
        if rule.gpu_name:
            what += f" named {rule.gpu_name}"
        if rule.min_level:
            what += f" at level {rule.min_level} or above"

        def judge(predicate: GpuPreflightPredicate) -> list[str]:
            problems = []
            if predicate.status not in rule.status:
                problems.append(f"status {predicate.status}")
            if rule.min_gpus and len(predicate.gpus) < rule.min_gpus:
                problems.append(f"{len(predicate.gpus)} GPU(s)")
            if rule.gpu_name:
                pattern = rule.gpu_name
                others = sorted(
                    {g.name for g in predicate.gpus if not name_matches(pattern, g.name)}
                )
                if others or not predicate.gpus:
                    problems.append(f"GPU(s) {', '.join(others) or 'none'}")
            if rule.min_level and not _reaches(predicate.level, rule.min_level):
                problems.append(f"level {predicate.level or 'none recorded'}")
            return problems

        def said(predicate: GpuPreflightPredicate) -> str:
            return f"{predicate.status} on {len(predicate.gpus)} GPU(s) of {predicate.node}"

        return self.newest(what, SIGNED_PREFLIGHT, collected, now, judge, said)


GPU_PREFLIGHT_POLICY = PolicyEntry[GpuPreflightRequirement](
    key="gpu_preflight",
    form=GpuPreflightRequirement | None,
    rule=GpuPreflightRule,
    description="the newest signed GPU preflight's status, GPUs and age",
)


GPU_PREFLIGHT = KindSpec(
    name="gpu-preflight",
    details=GpuPreflightDetails,
    statuses=tuple(GpuPreflightStatus),
    failing=frozenset({GpuPreflightStatus.FAIL, GpuPreflightStatus.INCOMPLETE}),
    predicate=Predicate.own(
        GPU_PREFLIGHT_V1, GpuPreflightPredicate, "gpu-preflight-v1.schema.json", _record
    ),
    lock_column="gpu_preflight_status",
    about_images=True,
    identifier_keys=("image_id",),
    policy=GPU_PREFLIGHT_POLICY,
)
