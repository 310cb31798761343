"""The core checks of the GPU probe's report: each one's strict model and its judge.

A judge decides its check from the numbers (imagekit.gpu.judges says what a judge is given
and answers), never from the probe's status word: as many GPUs listed as the world size,
one a rank; each GPU's name, memory and capability against what was asked; the compiled
arches cover each GPU; every BF16 product finite and within imagekit's bound of FP32; every
all-reduce size asked present, its figures consistent (imagekit computes the bandwidths
from the bytes and the time) and every element right; the bus bandwidth at the largest size
over the floor. ``CORE_JUDGES`` is their table; imagekit.gpu.report joins it with the health
checks' into ``JUDGES``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pydantic import Field

from imagekit.gpu.judges import (
    CheckModel,
    Decision,
    GpuFact,
    Judge,
    JudgeContext,
    StrictModel,
)
from imagekit.gpu.probe import BF16_REL_ERROR_BOUND, MIB, covers
from imagekit.kinds.gpu_preflight import name_matches


class GpusCheck(CheckModel):
    expected: dict[str, Any] | None = None
    present: int | None = Field(default=None, ge=0)
    processes: int | None = Field(default=None, ge=0)
    visible_on_rank0_node: int | None = Field(default=None, ge=0)
    gpus: list[GpuFact] = Field(default_factory=list)
    nvidia_smi: str | None = None


class ArchRank(CheckModel):
    arch_list: list[str] = Field(default_factory=list)
    source: str | None = None


class ArchCheck(CheckModel):
    ranks: list[ArchRank] = Field(default_factory=list)


class Bf16Rank(CheckModel):
    size: list[int] | None = None
    finite: bool | None = None
    relative_error: float | None = Field(default=None, ge=0)
    bound: float | None = None
    reference: str | None = None
    seconds: float | None = Field(default=None, ge=0)
    note: str | None = None


class Bf16Check(CheckModel):
    ranks: list[Bf16Rank] = Field(default_factory=list)


class AllReduceSize(StrictModel):
    size_mib: float = Field(gt=0)
    bytes: int = Field(ge=1)
    slowest_rank_mean_s: float = Field(ge=0)
    slowest_rank_mean_us: float = Field(ge=0)
    algbw_gbps: float = Field(ge=0)
    busbw_gbps: float = Field(ge=0)
    all_elements_right: bool


class AllReduceCheck(CheckModel):
    sizes: list[AllReduceSize] = Field(default_factory=list)
    warmups: int | None = Field(default=None, ge=0)
    iterations: int | None = Field(default=None, ge=1)
    dtype: str | None = None
    op: str | None = None
    world_size: int | None = Field(default=None, ge=1)
    busbw_formula: str | None = None
    min_busbw_gbps: float | None = None
    note: str | None = None


class TopologyCheck(CheckModel):
    devices: list[str] = Field(default_factory=list)
    matrix: dict[str, dict[str, str]] = Field(default_factory=dict)
    affinity: dict[str, dict[str, str]] = Field(default_factory=dict)
    legend: str | None = None
    notes: list[str] = Field(default_factory=list)


class CliRun(CheckModel):
    argv: list[str] = Field(default_factory=list)
    exit_code: int | None = None
    output_tail: str | None = None
    missing_flags: list[str] = Field(default_factory=list)


class ServingCliCheck(CheckModel):
    commands: list[CliRun] = Field(default_factory=list)


class NoNumbers(CheckModel):
    """A check that carries only its words (the probe's own failures: no torch, a raise)."""


def _gpu_label(gpu: GpuFact) -> str:
    return f"rank {gpu.rank} ({gpu.name}{f' on {gpu.host}' if gpu.host else ''})"


def _capability(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


def judge_gpus(check: GpusCheck, ctx: JudgeContext) -> Decision:
    """As many GPUs as the world size, one a rank; each one's name, memory and capability
    against what was asked; no uncorrected ECC error; the count against what was asked."""
    asked = ctx.asked
    gpus = check.gpus
    problems: list[str] = []
    open_: list[str] = []
    if not gpus:
        return Decision.incomplete("the report lists no GPU")
    if len(gpus) != ctx.world_size:
        problems.append(f"{len(gpus)} GPU(s) listed for a world size of {ctx.world_size}")
    ranks = sorted(g.rank for g in gpus)
    if ranks != list(range(len(gpus))):
        problems.append(f"the GPUs' ranks are {ranks}, not one each of 0..{len(gpus) - 1}")
    uuids = [g.uuid for g in gpus if g.uuid]
    if len(set(uuids)) != len(uuids):
        problems.append("a GPU UUID is listed for two ranks")
    visible = check.visible_on_rank0_node
    if visible is not None and visible != ctx.local_world_size:
        problems.append(f"{ctx.local_world_size} process(es) on the node, {visible} GPU(s) visible")
    if check.present is not None and check.present != ctx.world_size:
        problems.append(f"{check.present} GPU(s) present for a world size of {ctx.world_size}")
    if asked.gpus is not None and ctx.world_size != asked.gpus:
        problems.append(f"expected {asked.gpus} GPU(s), {ctx.world_size} in the process group")
    one_node = ctx.world_size == ctx.local_world_size
    for gpu in gpus:
        who = _gpu_label(gpu)
        if one_node and gpu.host is not None and gpu.host != ctx.host:
            problems.append(f"{who} ran on {gpu.host}, not on the report's host {ctx.host}")
        if asked.gpu_name and not name_matches(asked.gpu_name, gpu.name):
            problems.append(f"{who}: name {gpu.name!r} does not match {asked.gpu_name!r}")
        if asked.min_memory_gib is not None:
            gib = gpu.gib
            if gib is None:
                open_.append(f"{who}: memory not reported")
            elif gib < asked.min_memory_gib:
                problems.append(f"{who}: memory {gib:.2f} GiB < {asked.min_memory_gib:g} GiB")
        if asked.min_capability is not None:
            if gpu.capability is None:
                open_.append(f"{who}: compute capability not reported")
            elif _capability(gpu.capability) < _capability(asked.min_capability):
                problems.append(f"{who}: capability {gpu.capability} < {asked.min_capability}")
        if gpu.ecc_uncorrected_volatile:
            problems.append(
                f"{who}: {gpu.ecc_uncorrected_volatile} uncorrected ECC error(s) since the "
                "driver loaded"
            )
    names = ", ".join(sorted({g.name for g in gpus}))
    return Decision.of(problems, open_, f"{len(gpus)} GPU(s): {names}")


def judge_arch(check: ArchCheck, ctx: JudgeContext) -> Decision:
    """Each GPU's capability covered by the arches its rank's torch was compiled for."""
    if len(check.ranks) != ctx.world_size:
        return Decision.incomplete(
            f"arches reported for {len(check.ranks)} of {ctx.world_size} rank(s)"
        )
    if not ctx.gpus:
        return Decision.incomplete("no GPU listed to hold the arches against")
    problems: list[str] = []
    open_: list[str] = []
    for gpu in ctx.gpus:
        if gpu.rank >= len(check.ranks) or gpu.capability is None:
            open_.append(f"{_gpu_label(gpu)}: no capability or arch list")
            continue
        arches = check.ranks[gpu.rank].arch_list
        if not covers(arches, *_capability(gpu.capability)):
            problems.append(
                f"{_gpu_label(gpu)}: compiled arches [{' '.join(arches)}] do not cover "
                f"capability {gpu.capability}"
            )
    return Decision.of(problems, open_, "the compiled arches cover every GPU's capability")


def judge_bf16(check: Bf16Check, ctx: JudgeContext) -> Decision:
    """Every rank's BF16 product finite and within the bound of FP32 (imagekit's bound)."""
    if len(check.ranks) != ctx.world_size:
        return Decision.incomplete(
            f"a BF16 product reported for {len(check.ranks)} of {ctx.world_size} rank(s)"
        )
    problems: list[str] = []
    open_: list[str] = []
    worst = 0.0
    for rank, found in enumerate(check.ranks):
        if found.finite is False:
            problems.append(f"rank {rank}: the BF16 product has non-finite values")
        elif found.relative_error is None or found.finite is None:
            said = f"rank {rank}: {found.reason}"
            (problems if found.status == "FAIL" else open_).append(said)
        elif not found.relative_error <= BF16_REL_ERROR_BOUND:
            problems.append(
                f"rank {rank}: the BF16 product differs from FP32 by "
                f"{found.relative_error:.3g} relative (bound {BF16_REL_ERROR_BOUND:g})"
            )
        else:
            worst = max(worst, found.relative_error)
    return Decision.of(
        problems,
        open_,
        f"finite on every rank, at most {worst:.2g} relative to FP32 "
        f"(bound {BF16_REL_ERROR_BOUND:g})",
    )


def _bandwidths(nbytes: int, seconds: float, world: int) -> tuple[float, float]:
    if seconds <= 0:
        return 0.0, 0.0
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (world - 1) / world


def _near(stated: float, computed: float) -> bool:
    """The probe rounds its figures to 3 decimals (and microseconds to 2)."""
    return math.isclose(stated, computed, rel_tol=1e-3, abs_tol=0.01)


def judge_all_reduce(check: AllReduceCheck, ctx: JudgeContext) -> Decision:
    """Every size asked present with finite, consistent figures and every element right; the
    bus bandwidth (imagekit's, from bytes and time) at the largest size over the floor."""
    asked = ctx.asked
    sizes = check.sizes
    if not sizes:
        return Decision.incomplete("no all-reduce size reported")
    problems: list[str] = []
    open_: list[str] = []
    if check.world_size is not None and check.world_size != ctx.world_size:
        problems.append(f"run on {check.world_size} rank(s), the world size is {ctx.world_size}")
    wanted = asked.sizes_mib or tuple(s.size_mib for s in sizes)
    stated = [s.size_mib for s in sizes]
    missing = [w for w in wanted if not any(math.isclose(w, s) for s in stated)]
    if missing:
        open_.append(f"size(s) {', '.join(f'{m:g} MiB' for m in missing)} not reported")
    if check.iterations is not None and check.iterations < asked.iterations:
        open_.append(f"{check.iterations} timed run(s), {asked.iterations} asked")
    busbw: dict[float, float] = {}
    for size in sizes:
        at = f"{size.size_mib:g} MiB"
        numel = max(1, int(size.size_mib * MIB) // 4)
        if size.bytes != numel * 4:
            problems.append(f"{at}: {size.bytes} bytes is not that size")
        if not size.all_elements_right:
            problems.append(f"{at}: not every element of the sum was right")
        algbw, bus = _bandwidths(size.bytes, size.slowest_rank_mean_s, ctx.world_size)
        consistent = (
            _near(size.slowest_rank_mean_us, size.slowest_rank_mean_s * 1e6)
            and _near(size.algbw_gbps, algbw)
            and _near(size.busbw_gbps, bus)
        )
        if not consistent:
            problems.append(
                f"{at}: the stated figures ({size.slowest_rank_mean_us:g} us, algbw "
                f"{size.algbw_gbps:g}, busbw {size.busbw_gbps:g} GB/s) do not follow from "
                f"{size.bytes} bytes in {size.slowest_rank_mean_s:g} s on "
                f"{ctx.world_size} rank(s)"
            )
        busbw[size.size_mib] = bus
    largest = max(busbw)
    if asked.min_busbw is not None:
        if ctx.world_size == 1:
            open_.append(
                f"a bus bandwidth floor of {asked.min_busbw:g} GB/s cannot be measured on one "
                "rank (bus bandwidth is 0 by definition)"
            )
        elif busbw[largest] < asked.min_busbw:
            problems.append(
                f"bus bandwidth {busbw[largest]:.1f} GB/s at {largest:g} MiB is under the "
                f"floor {asked.min_busbw:g} GB/s"
            )
    summary = ", ".join(f"{s:g} MiB {b:.1f} GB/s" for s, b in busbw.items())
    return Decision.of(
        problems,
        open_,
        f"every element right at every size on {ctx.world_size} rank(s); busbw {summary}",
    )


def judge_topology(check: TopologyCheck, ctx: JudgeContext) -> Decision:
    return Decision.recorded(check.reason)


def judge_serving_cli(check: ServingCliCheck, ctx: JudgeContext) -> Decision:
    """Each serving CLI asked re-run on the GPU node: exit 0 and every required flag listed."""
    if len(check.commands) != ctx.asked.commands:
        return Decision.incomplete(
            f"{len(check.commands)} serving CLI check(s) reported, {ctx.asked.commands} asked"
        )
    problems = [
        f"{' '.join(run.argv)}: exit {run.exit_code}"
        + (f", help lacks {', '.join(run.missing_flags)}" if run.missing_flags else "")
        for run in check.commands
        if run.exit_code != 0 or run.missing_flags
    ]
    return Decision.of(problems, [], f"{len(check.commands)} serving CLI check(s) parsed")


def judge_words(check: NoNumbers, ctx: JudgeContext) -> Decision:
    """A check with no numbers only ever says what could not be done: never a pass."""
    return Decision.incomplete(check.reason)


CORE_JUDGES: Mapping[str, Judge[Any]] = MappingProxyType(
    {
        "gpus": Judge(GpusCheck, judge_gpus, required=True),
        "arch": Judge(ArchCheck, judge_arch, required=True),
        "bf16": Judge(Bf16Check, judge_bf16, required=True),
        "all_reduce": Judge(AllReduceCheck, judge_all_reduce, required=True),
        "topology": Judge(TopologyCheck, judge_topology),
        "serving_cli": Judge(ServingCliCheck, judge_serving_cli),
        "torch": Judge(NoNumbers, judge_words),
        "probe": Judge(NoNumbers, judge_words),
    }
)
