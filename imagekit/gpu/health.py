"""The GPU node's health checks: their levels, their thresholds, their numbers and judges.

The probe (imagekit/gpu/probe.py) reads the node as the cluster health checks do (DCGM's
diagnostic, azurehpc-health-checks, GKE's and EKS's node checks): memory errors, the kernel
log's XID events, clock throttling under a BF16 load, the PCIe link and the copy
bandwidths, NVLink, other processes, the fabric manager, the driver against the image's CUDA
runtime. It writes each check's numbers beside a status word; imagekit decides from the
numbers alone: each check's numbers are validated here by a strict model (a report that
says anything else is not judged, it is INCOMPLETE) and judged again by the probe's own
rule, imported from imagekit's copy of the probe (never the image's), against the thresholds
imagekit sent.

Levels, as DCGM's diagnostic has them: ``quick`` (every read-only check, the BF16 product
and one small all-reduce: under 5 s beyond the launch), ``standard`` (adds the copy
bandwidths and a short BF16 load the throttle sampler watches: under 30 s with the launch)
and ``extended`` (a minute's load and larger all-reduces).

Thresholds come from a named GPU profile shipped with imagekit (imagekit/gpu/profiles/,
each value with its source, an empty floor where nothing is known), then the plan's ``gpu:``
section, then the options, the later winning. A floor is judged on the median of the
repeats, and the numbers say how many ran.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from imagekit import yamldoc
from imagekit.errors import UsageError
from imagekit.files import read_regular
from imagekit.gpu import probe
from imagekit.gpu.judges import CheckModel, Decision, Judge, JudgeContext
from imagekit.kinds.gpu_preflight import PREFLIGHT_LEVELS, PreflightLevel

__all__ = [
    "HEALTH_JUDGES",
    "REPORT_JUDGES",
    "LEVEL_SETTINGS",
    "PREFLIGHT_LEVELS",
    "REQUIRED_AT_LEVEL",
    "GpuProfile",
    "Judgement",
    "LevelSettings",
    "Thresholds",
    "judge_check",
    "load_gpu_profile",
    "resolve_thresholds",
]

State = Literal["PASS", "FAIL", "INCOMPLETE", "SKIPPED", "RECORDED"]


@dataclass(frozen=True)
class LevelSettings:
    """What a level runs and how long it may take."""

    budget_s: float
    #: the all-reduce sizes when none are given (None: the preflight's default sizes)
    sizes_mib: tuple[float, ...] | None
    load_seconds: float
    repeats: int
    about: str


LEVEL_SETTINGS: Mapping[PreflightLevel, LevelSettings] = {
    "quick": LevelSettings(
        5.0,
        (1.0,),
        0.0,
        0,
        "every read-only check (nvidia-smi -q -x, the kernel log, NVLink, the topology), the "
        "BF16 product and one 1 MiB all-reduce; budget 5 s beyond the launch",
    ),
    "standard": LevelSettings(
        30.0,
        None,
        2.0,
        5,
        "quick's checks, the all-reduce at every size, pinned host-device and device copies "
        "(median of 5) and a 2 s BF16 load sampled for throttling; budget 30 s with the launch",
    ),
    "extended": LevelSettings(
        900.0,
        (1.0, 16.0, 128.0, 1024.0, 4096.0),
        60.0,
        20,
        "standard's checks with a 60 s BF16 load, copies repeated 20 times and all-reduces up "
        "to 4 GiB; minutes",
    ),
}

#: The checks a preflight of each level must report (with gpus, arch, bf16, all_reduce).
_READ_ONLY = (*probe.NODE_READ, "budget")
REQUIRED_AT_LEVEL: Mapping[PreflightLevel, tuple[str, ...]] = {
    "quick": _READ_ONLY,
    "standard": (*_READ_ONLY, *probe.MEASURED),
    "extended": (*_READ_ONLY, *probe.MEASURED),
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Thresholds(_Strict):
    """What the health checks are judged against; None: not judged (recorded)."""

    min_h2d_gbps: float | None = Field(default=None, gt=0)
    min_d2h_gbps: float | None = Field(default=None, gt=0)
    min_d2d_gbps: float | None = Field(default=None, gt=0)
    min_bf16_tflops: float | None = Field(default=None, gt=0)
    min_free_memory_fraction: float | None = Field(default=None, ge=0, le=1)
    max_aggregate_uncorrected_ecc: int | None = Field(default=None, ge=0)
    max_retired_pages: int | None = Field(default=None, ge=0)
    fatal_xids: tuple[int, ...] | None = None
    require_kernel_log: bool = False
    require_persistence: bool = False
    budget_s: float | None = Field(default=None, gt=0)
    repeats: int | None = Field(default=None, ge=1)
    copy_mib: int | None = Field(default=None, ge=1)
    d2d_mib: int | None = Field(default=None, ge=1)
    load_seconds: float | None = Field(default=None, ge=0)
    load_size: int | None = Field(default=None, ge=256)
    sample_interval_s: float | None = Field(default=None, gt=0)

    def for_probe(self) -> dict[str, Any]:
        """The probe's ``thresholds`` (what is None is left out)."""
        return self.model_dump(mode="json", exclude_none=True)


#: What every GPU is held to when no profile says more: no source is a GPU model.
GENERIC = Thresholds(
    # a node for serving is given whole: another process holding a tenth of a GPU is a finding
    min_free_memory_fraction=0.9,
    # azurehpc-health-checks customTests/azure_gpu_xid.nhc (XID_EC), from NVIDIA's XID table
    fatal_xids=(48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120),
)


class ProfileValue(_Strict):
    """One threshold of a GPU profile and where it comes from."""

    value: float | None = Field(description="None: nothing is known, the figure is recorded")
    source: str = Field(min_length=1)


class GpuProfile(_Strict):
    """A GPU model's known floors (imagekit/gpu/profiles/NAME.yaml), each with its source."""

    name: str
    description: str
    name_pattern: str = Field(description="a pattern every GPU's name matches (probe's rule)")
    thresholds: dict[str, ProfileValue]
    references: dict[str, ProfileValue] = Field(
        default_factory=dict, description="figures recorded for comparison, never applied"
    )

    def values(self) -> dict[str, Any]:
        return {k: v.value for k, v in self.thresholds.items() if v.value is not None}


def builtin_profiles() -> tuple[str, ...]:
    folder = resources.files("imagekit.gpu").joinpath("profiles")
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml")))


def load_gpu_profile(name_or_file: str) -> GpuProfile:
    """A GPU profile shipped with imagekit by its name (H100, H200, ...), or a YAML file."""
    known = builtin_profiles()
    if name_or_file in known:
        data = (
            resources.files("imagekit.gpu")
            .joinpath("profiles", f"{name_or_file}.yaml")
            .read_bytes()
        )
        origin = f"GPU profile {name_or_file}"
    else:
        path = Path(name_or_file)
        if path.suffix not in {".yaml", ".yml"}:
            raise UsageError(
                f"unknown GPU profile {name_or_file!r}",
                hint=f"one of {', '.join(known)}, or a path to a .yaml GPU profile",
            )
        try:
            data = read_regular(path, "GPU profile")
        except OSError as exc:
            raise UsageError(f"cannot read GPU profile {path}: {exc.strerror}") from None
        origin = str(path)
    try:
        profile = GpuProfile.model_validate(yamldoc.load(data))
        Thresholds.model_validate(profile.values())
    except (yaml.YAMLError, ValidationError) as exc:
        said = str(exc).splitlines()
        raise UsageError(
            f"{origin} is not a GPU profile: {' '.join(s.strip() for s in said[:3])}",
            hint="see imagekit/gpu/profiles/ for the keys",
        ) from None
    return profile


def resolve_thresholds(
    level: PreflightLevel,
    profile: GpuProfile | None = None,
    plan: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
) -> Thresholds:
    """The level's settings, then the generic floors, the profile's, the plan's and the
    options', each later one winning where it says something."""
    settings = LEVEL_SETTINGS[level]
    merged: dict[str, Any] = {
        "budget_s": settings.budget_s,
        "load_seconds": settings.load_seconds,
    }
    if settings.repeats:
        merged["repeats"] = settings.repeats
    merged.update(GENERIC.model_dump(exclude_none=True, exclude_defaults=True))
    for key, known in (profile.thresholds if profile else {}).items():
        if known.value is None:
            merged.pop(key, None)  # nothing is known of this GPU: recorded, not judged
        else:
            merged[key] = known.value
    for layer in (plan, options):
        merged.update({k: v for k, v in (layer or {}).items() if v is not None})
    try:
        return Thresholds.model_validate(merged)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(
            f"threshold {where}: {first['msg']}",
            hint=f"thresholds: {', '.join(Thresholds.model_fields)}",
        ) from None


# --------------------------------------------------------------------------- the numbers


class _Numbers(_Strict):
    """A check's numbers as the probe reports them (its status and sentence aside)."""


class _GpuRef(_Strict):
    uuid: str | None = None


class EccGpu(_GpuRef):
    ecc_mode: str | None = None
    volatile_uncorrected: int | None = Field(default=None, ge=0)
    aggregate_uncorrected: int | None = Field(default=None, ge=0)
    volatile: dict[str, int | None] = Field(default_factory=dict)
    aggregate: dict[str, int | None] = Field(default_factory=dict)


class EccNumbers(_Numbers):
    gpus: list[EccGpu]


class RowRemapGpu(_GpuRef):
    correctable: int | None = Field(default=None, ge=0)
    uncorrectable: int | None = Field(default=None, ge=0)
    pending: bool | None = None
    failure: bool | None = None


class RowRemapNumbers(_Numbers):
    gpus: list[RowRemapGpu]


class RetiredPagesGpu(_GpuRef):
    single_bit: int | None = Field(default=None, ge=0)
    double_bit: int | None = Field(default=None, ge=0)
    pending: bool | None = None


class RetiredPagesNumbers(_Numbers):
    gpus: list[RetiredPagesGpu]


class XidEvent(_Strict):
    pci: str
    xid: int
    text: str
    host: str | None = None


class KernelLogRead(_Strict):
    read: bool
    source: str | None
    why_not_read: str | None
    lines_read: int
    event_count: int
    host: str | None = None


class XidNumbers(_Numbers):
    read: bool
    source: str | None = None
    why_not_read: str | None = None
    lines_read: int = 0
    event_count: int = 0
    events: list[XidEvent]
    nodes: list[KernelLogRead] = Field(default_factory=list)


class ThrottleSample(_Strict):
    uuid: str
    hw_slowdown: bool | None = None
    hw_thermal_slowdown: bool | None = None
    hw_power_brake_slowdown: bool | None = None
    sw_thermal_slowdown: bool | None = None
    sw_power_cap: bool | None = None
    sm_clock_mhz: float | None = None
    pcie_gen: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    t: float | None = Field(default=None, description="when it was taken (seconds, UTC epoch)")


class LoadFigures(_Strict):
    rank: int
    uuid: str | None = None
    size: list[int]
    seconds: float
    tflops: list[float]
    tflops_median: float | None


class ThrottleNumbers(_Numbers):
    under_load: bool
    samples: list[ThrottleSample]
    counter_deltas_us: dict[str, dict[str, int]]
    reasons_now: dict[str, dict[str, bool | None]]
    load: list[LoadFigures] = Field(default_factory=list)
    why_not_sampled: str | None = None


class PcieGpu(_GpuRef):
    max_gen: int | None = None
    current_gen: int | None = None
    max_width: int | None = None
    current_width: int | None = None
    gens_under_load: list[int]
    under_load: bool
    best_gen: int | None = None


class PcieLinkNumbers(_Numbers):
    gpus: list[PcieGpu]


class CopyFigures(_GpuRef):
    rank: int
    repeats: int = Field(ge=1, description="timed copies after one warm-up, each kind")
    pinned: bool | None = None
    h2d_size_mib: int | None = None
    h2d_gbps: list[float] | None = None
    h2d_median_gbps: float | None = None
    d2h_size_mib: int | None = None
    d2h_gbps: list[float] | None = None
    d2h_median_gbps: float | None = None
    d2d_size_mib: int | None = None
    d2d_gbps: list[float] | None = None
    d2d_median_gbps: float | None = None


class CopyNumbers(_Numbers):
    gpus: list[CopyFigures] = Field(default_factory=list)
    unit: str | None = None
    not_at_level: PreflightLevel | None = None


class NvlinkState(_Strict):
    state: str
    active: bool


class NvlinkGpu(_GpuRef):
    label: str
    links: dict[str, NvlinkState]
    expected_links: int = Field(ge=0)
    errors: dict[str, dict[str, int]]


class NvlinkNumbers(_Numbers):
    gpus: list[NvlinkGpu]


class GpuProcess(_Strict):
    pid: int | None
    type: str | None = None
    name: str | None = None
    used_mib: float | None = None


class ProcessesGpu(_GpuRef):
    total_mib: float | None
    free_mib: float | None
    free_from: str
    used_mib: float | None = None
    others: list[GpuProcess]
    own_pids: list[int]


class ProcessesNumbers(_Numbers):
    gpus: list[ProcessesGpu]


class PersistenceGpu(_GpuRef):
    persistence_mode: str | None


class PersistenceNumbers(_Numbers):
    gpus: list[PersistenceGpu]


class FabricGpu(_GpuRef):
    state: str | None
    status: str | None


class FabricNumbers(_Numbers):
    gpus: list[FabricGpu]


class DriverNumbers(_Numbers):
    driver_version: str | None
    driver_cuda: str | None
    runtime_cuda: str | None
    cuda_init_error: str | None = None


class BudgetNumbers(_Numbers):
    level: PreflightLevel
    seconds: float = Field(ge=0)
    seconds_checks: float = Field(ge=0)
    seconds_probe: float = Field(ge=0)
    measured: str


class DcgmNumbers(_Numbers):
    present: bool
    level: int
    why_absent: str | None = None
    exit_code: int | None = None
    verdict: str | None = None
    document: Any = None
    output_tail: str | None = None


_MODELS: Mapping[str, type[_Numbers]] = {
    "driver": DriverNumbers,
    "ecc": EccNumbers,
    "row_remapping": RowRemapNumbers,
    "retired_pages": RetiredPagesNumbers,
    "xid": XidNumbers,
    "throttle": ThrottleNumbers,
    "pcie_link": PcieLinkNumbers,
    "pcie_bandwidth": CopyNumbers,
    "memory_bandwidth": CopyNumbers,
    "nvlink": NvlinkNumbers,
    "processes": ProcessesNumbers,
    "persistence": PersistenceNumbers,
    "fabric": FabricNumbers,
    "budget": BudgetNumbers,
    "dcgm": DcgmNumbers,
}


# --------------------------------------------------------------------------- the judges


@dataclass(frozen=True)
class Judgement:
    """One check judged from its numbers: PASS, FAIL or INCOMPLETE with a sentence;
    SKIPPED (not applicable here, said why) and RECORDED (written down, not judged: a
    kernel log that could not be read, a figure with no floor) decide nothing."""

    state: State
    sentence: str


HealthJudge = Callable[[Mapping[str, Any], Thresholds], Judgement]


def _judge(name: str) -> HealthJudge:
    model = _MODELS[name]
    rule = probe.HEALTH_JUDGES[name]

    def judge(numbers: Mapping[str, Any], thresholds: Thresholds) -> Judgement:
        found = {k: v for k, v in numbers.items() if k not in ("status", "reason")}
        try:
            checked = model.model_validate(found)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top)"
            return Judgement("INCOMPLETE", f"its numbers are not the probe's: {where}: "
                             f"{first['msg']}")  # fmt: skip
        state, sentence = rule(checked.model_dump(), thresholds.for_probe())
        return Judgement(state, sentence)  # type: ignore[arg-type]

    judge.__name__ = f"judge_{name}"
    judge.__doc__ = rule.__doc__
    return judge


#: check name -> its judge (the report's numbers, the thresholds) -> Judgement.
HEALTH_JUDGES: Mapping[str, HealthJudge] = {name: _judge(name) for name in _MODELS}


def judge_check(name: str, numbers: Mapping[str, Any], thresholds: Thresholds) -> Judgement:
    """One health check of a report judged again from its numbers."""
    return HEALTH_JUDGES[name](numbers, thresholds)


class HealthCheck(CheckModel):
    """A health check as the report carries it: the probe's status word and sentence, then
    numbers that the check's own model (``_MODELS``) reads when it is judged. Numbers that do
    not fit that model make the check INCOMPLETE (``judge_check``), never a pass."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True, allow_inf_nan=False)


_DECISION: Mapping[str, Callable[[str], Decision]] = {
    "PASS": Decision.passed,
    "FAIL": Decision.failed,
    "INCOMPLETE": Decision.incomplete,
}


def _thresholds_of(ctx: JudgeContext) -> Thresholds:
    """The thresholds imagekit sent the probe (never the report's own), else the level's."""
    if ctx.asked.thresholds:
        return Thresholds.model_validate(dict(ctx.asked.thresholds))
    return resolve_thresholds(ctx.level or "standard")


def _report_judge(name: str) -> Judge[HealthCheck]:
    def decide(check: HealthCheck, ctx: JudgeContext) -> Decision:
        judged = judge_check(name, check.model_dump(), _thresholds_of(ctx))
        # SKIPPED (not here, said why) and RECORDED (no floor, a log not read) decide nothing
        return _DECISION.get(judged.state, Decision.recorded)(judged.sentence)

    levels = frozenset(level for level, names in REQUIRED_AT_LEVEL.items() if name in names)
    return Judge(HealthCheck, decide, levels=levels)


#: The health checks as the verdict's table takes them: imagekit.gpu.report joins these into
#: ``JUDGES``; each is required of a report of the levels that run it.
REPORT_JUDGES: Mapping[str, Judge[Any]] = {name: _report_judge(name) for name in _MODELS}


def parse_threshold_options(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``--threshold KEY=VALUE`` options as the thresholds' values (YAML scalars: 52,
    true, [79, 94])."""
    found: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or key not in Thresholds.model_fields:
            raise UsageError(
                f"--threshold {pair}: not KEY=VALUE with a known KEY",
                hint=f"one of {', '.join(Thresholds.model_fields)}",
            )
        try:
            found[key] = yamldoc.load(text.encode())
        except yaml.YAMLError:
            raise UsageError(f"--threshold {pair}: {text!r} is not a value") from None
    return found


def thresholds_for(
    level: PreflightLevel,
    profile: str | None,
    plan: Mapping[str, Any] | None,
    pairs: tuple[str, ...] = (),
) -> Thresholds:
    """The thresholds of a run: the level's, the named GPU profile's, the plan's ``gpu:
    thresholds``, then ``--threshold`` options."""
    named = load_gpu_profile(profile) if profile else None
    return resolve_thresholds(level, named, plan, parse_threshold_options(pairs))
