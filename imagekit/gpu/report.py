"""The GPU probe's report read back, and the verdict imagekit decides from its numbers.

The report comes out of the image under test (or a Job's pod, or an interpreter on this
host), so it is a trust boundary read strictly: the probe's own document (every top-level
key known, ``level`` optional), each known check through its judge's model (a key the model
does not know, a rank ``"zero"``, a NaN, ``sizes`` an object, ``gpus`` a string,
``memory_gib: "lots"``: not the probe's report, bad input naming the field). JSON itself is
read by :func:`load_json` (no NaN or Infinity, no key twice, no nesting past what a report
has), the one place to switch to the foundations' bounded reader.

The probe decides nothing. The verdict is imagekit's, from the numbers:

- ``JUDGES: Mapping[str, Judge[Any]]`` (here) is the table of judges: a check's name to its
  :class:`imagekit.gpu.judges.Judge` (``Judge(model, decide, required=False, levels=...)``:
  the check's strict model, ``decide(check, JudgeContext) -> Decision``, whether a GPU
  report must carry it, at which levels). The core checks' judges are
  ``imagekit.gpu.checks.CORE_JUDGES``; the health checks' (imagekit.gpu.health) join the
  table with one line here, ``JUDGES = {**CORE_JUDGES, **REPORT_JUDGES}``, and import their
  types from imagekit.gpu.judges only (never from this module, which imports them).
- Each judge holds its check's numbers to what was asked (:class:`Asked`: the options, the
  plan's ``gpu:`` section) and to imagekit's own invariants (imagekit.gpu.checks).
- The probe's status word may make a check worse (a FAIL it saw stays a FAIL), never better.
  A check the table does not know is recorded, never a pass by itself (its FAIL or
  INCOMPLETE word still lowers the verdict, as any check's); a required check
  missing, or one not decided, is GPU_PREFLIGHT_INCOMPLETE; a CPU self-test is never a pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, ValidationError

from imagekit import jsondoc
from imagekit.errors import UsageError
from imagekit.gpu.checks import CORE_JUDGES, AllReduceCheck, GpusCheck, TopologyCheck
from imagekit.gpu.health import REPORT_JUDGES
from imagekit.gpu.judges import (
    Asked,
    CheckModel,
    CheckState,
    Decision,
    GpuFact,
    Judge,
    JudgeContext,
    Outcome,
    StrictModel,
)
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

SELF_TEST_SENTENCE = "CPU self-test, not a GPU preflight"
#: The most GPUs a process group may claim: past every node a lab has (a sanity bound).
MAX_WORLD = 65536
#: Deeper than the probe's report ever nests (the topology: 4 levels) by a wide margin.
MAX_DEPTH = 32
#: The most of a report imagekit reads, wherever it comes from (host, image, --report): the
#: probe's report is a few hundred KiB on eight GPUs; a larger file is not its report.
REPORT_CAP = 16 << 20


# --------------------------------------------------------------------------- reading


def load_json(data: bytes, source: str) -> Any:
    """One JSON document from outside, through imagekit's one bounded reader
    (imagekit.jsondoc: no NaN or Infinity, no key twice) and no deeper than
    :data:`MAX_DEPTH`; anything else is bad input naming SOURCE."""
    try:
        return jsondoc.loads(data, limit=REPORT_CAP, depth=MAX_DEPTH)
    except jsondoc.JsonRefused as exc:
        raise UsageError(
            f"{source} is not a report of imagekit's GPU probe: not JSON as the probe writes "
            f"it ({exc})",
            hint="give the report.json the probe wrote, or the Job's log that carries it",
        ) from None


# --------------------------------------------------------------------------- the report


class RawCheck(CheckModel):
    """Any check, before its judge reads it: a status word and a sentence; its numbers are
    read by its judge's model (or recorded, for a check no judge knows)."""

    model_config = ConfigDict(extra="allow")


class RankEntry(StrictModel):
    """What one rank found of its own device (the report's ``ranks``): the keys the core
    checks write are typed; a health check's own keys are kept (read by its judge)."""

    model_config = ConfigDict(extra="allow")

    rank: int = Field(ge=0)
    local_rank: int = Field(ge=0)
    host: str
    device: dict[str, Any] = Field(default_factory=dict)
    expectation_problems: list[str] = Field(default_factory=list)
    arch: dict[str, Any] | None = None
    bf16: dict[str, Any] | None = None


class ProbeReport(StrictModel):
    """The probe's one JSON document (imagekit/gpu/probe.py writes it on rank 0)."""

    probe: Literal["imagekit-gpu-preflight"]
    probe_version: Literal[1]
    mode: Literal["gpu", "self-test"]
    level: PreflightLevel | None = None
    scope: str
    host: str = Field(min_length=1, max_length=253)
    started_at: str
    finished_at: str | None
    launched_by: str
    world_size: int = Field(ge=1, le=MAX_WORLD)
    local_world_size: int = Field(ge=1, le=MAX_WORLD)
    backend: str
    python: str
    versions: dict[str, Any]
    environment: dict[str, str]
    nvlink_multicast: str
    ranks: list[RankEntry]
    checks: dict[str, RawCheck]
    errors: list[str]
    node: dict[str, Any] | None = None
    topology_raw: str | None = None

    _parsed: dict[str, CheckModel] = PrivateAttr(default_factory=dict)

    def check(self, name: str) -> dict[str, Any]:
        """A check's whole document (status, reason and its numbers), or {}."""
        found = self.checks.get(name)
        return found.model_dump() if found is not None else {}

    def parsed(self, name: str) -> CheckModel | None:
        """A known check as its judge's model read it (None: not reported, or no judge)."""
        return self._parsed.get(name)

    @property
    def gpus(self) -> tuple[GpuFact, ...]:
        found = self._parsed.get("gpus")
        return tuple(found.gpus) if isinstance(found, GpusCheck) else ()


def _where(loc: tuple[str | int, ...]) -> str:
    return ".".join(str(part) for part in loc) or "the document"


def _refused(source: str, where: str, said: str) -> UsageError:
    return UsageError(
        f"{source} is not a report of imagekit's GPU probe: {where}: {said}",
        hint="give the report.json the probe wrote, or the Job's log that carries it "
        "(imagekit gpu-preflight --emit-job prints the Job)",
    )


def parse_report(data: bytes, source: str) -> ProbeReport:
    """The probe's report from its bytes, every known check read by its judge's model;
    anything else is bad input (exit 2) naming SOURCE and the first field that is wrong."""
    document = load_json(data, source)
    try:
        report = ProbeReport.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise _refused(source, _where(first["loc"]), first["msg"]) from None
    parsed: dict[str, CheckModel] = {}
    for name, raw in report.checks.items():
        judge = JUDGES.get(name)
        if judge is None:
            continue
        try:
            parsed[name] = judge.parse(raw.model_dump())
        except ValidationError as exc:
            first = exc.errors()[0]
            where = _where(("checks", name, *first["loc"]))
            raise _refused(source, where, first["msg"]) from None
    report._parsed = parsed
    return report


#: The table of judges: a check's name to its Judge (the health checks' join it here).
JUDGES: Mapping[str, Judge[Any]] = MappingProxyType({**CORE_JUDGES, **REPORT_JUDGES})
#: The checks every GPU report must carry (whatever its level).
REQUIRED = tuple(name for name, judge in CORE_JUDGES.items() if judge.required)


# --------------------------------------------------------------------------- the verdict


@dataclass(frozen=True)
class CheckVerdict:
    """One check as imagekit decided it (what is recorded and signed of it)."""

    name: str
    state: CheckState
    sentence: str

    @classmethod
    def of(cls, name: str, decision: Decision) -> CheckVerdict:
        return cls(name, _STATE[decision.outcome], decision.sentence)


@dataclass(frozen=True)
class Verdict:
    status: GpuPreflightStatus
    sentence: str
    failing: tuple[str, ...]
    self_test: bool = False
    checks: tuple[CheckVerdict, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status is GpuPreflightStatus.PASS


_STATE: dict[Outcome, CheckState] = {
    Outcome.PASS: "PASS",
    Outcome.FAIL: "FAIL",
    Outcome.INCOMPLETE: "INCOMPLETE",
    Outcome.RECORDED: "RECORDED",
}


def _lowered(decision: Decision, said: RawCheck) -> Decision:
    """The probe's own FAIL or INCOMPLETE lowers the judge's decision, never raises it."""
    if decision.outcome is Outcome.RECORDED:
        return decision
    if said.status == "FAIL" and decision.outcome is not Outcome.FAIL:
        return Decision.failed(said.reason)
    if said.status == "INCOMPLETE" and decision.outcome is Outcome.PASS:
        return Decision.incomplete(said.reason)
    return decision


def context_of(report: ProbeReport, asked: Asked) -> JudgeContext:
    return JudgeContext(
        asked=asked,
        world_size=report.world_size,
        local_world_size=report.local_world_size,
        mode=report.mode,
        level=report.level,
        host=report.host,
        gpus=report.gpus,
    )


def judge_checks(report: ProbeReport, asked: Asked) -> tuple[CheckVerdict, ...]:
    """Every check of the report decided by its judge (an unknown one recorded), and every
    required one the report left out, INCOMPLETE."""
    ctx = context_of(report, asked)
    found: list[CheckVerdict] = []
    for name, said in report.checks.items():
        judge = JUDGES.get(name)
        parsed = report.parsed(name)
        if judge is None or parsed is None:
            # No judge: its numbers decide nothing; its words may still lower, as any check's.
            state: CheckState = said.status if said.status in ("FAIL", "INCOMPLETE") else "RECORDED"
            found.append(
                CheckVerdict(
                    name,
                    state,
                    f"no judge knows this check; the probe said {said.status}: {said.reason}",
                )
            )
            continue
        if report.mode == "self-test" and said.status == "SKIPPED":
            found.append(CheckVerdict(name, "SKIPPED", said.reason))
            continue
        decision = _lowered(judge.decide(parsed, ctx), said)
        found.append(CheckVerdict(name, _STATE[decision.outcome], decision.sentence))
    for name, judge in JUDGES.items():
        wanted = judge.required_at(report.level) or (name == "serving_cli" and asked.commands)
        if wanted and name not in report.checks:
            found.append(CheckVerdict(name, "INCOMPLETE", "not reported"))
    return tuple(found)


def decide(
    report: ProbeReport | None,
    asked: Asked | None = None,
    *,
    why_none: str = "no report",
    extra: tuple[CheckVerdict, ...] = (),
) -> Verdict:
    """The preflight's status from the report's numbers against ASKED (None: no report);
    EXTRA: checks of where the report came from (this host's own GPUs), judged alike."""
    if report is None:
        return Verdict(GpuPreflightStatus.INCOMPLETE, f"not decided: {why_none}", ())
    asked = asked or Asked()
    checks = judge_checks(report, asked) + extra
    failing = tuple(f"{c.name}: {c.sentence}" for c in checks if c.state == "FAIL")
    open_ = [f"{c.name}: {c.sentence}" for c in checks if c.state == "INCOMPLETE"]
    if report.mode == "self-test" or asked.self_test:
        worked = not failing and not open_
        said = (
            "every check of the probe's logic passed" if worked else "; ".join([*failing, *open_])
        )
        return Verdict(
            GpuPreflightStatus.INCOMPLETE,
            f"{SELF_TEST_SENTENCE} ({said})",
            failing,
            self_test=True,
            checks=checks,
        )
    if report.backend != "nccl":
        open_.append(f"backend {report.backend!r}: a GPU preflight runs NCCL")
    # a report from before levels names none: taken at no level (the gate's min_level then
    # refuses it where a level is required); one of another level than asked is not this run
    if asked.level is not None and report.level is not None and report.level != asked.level:
        open_.append(f"the report's level is {report.level}, {asked.level} was asked")
    if failing:
        return Verdict(GpuPreflightStatus.FAIL, "; ".join(failing), failing, checks=checks)
    if open_:
        return Verdict(GpuPreflightStatus.INCOMPLETE, "; ".join(open_), (), checks=checks)
    gpus = next(c for c in checks if c.name == "gpus")
    return Verdict(GpuPreflightStatus.PASS, gpus.sentence, (), checks=checks)


# --------------------------------------------------------------------------- the predicate


def _facts(report: ProbeReport) -> list[GpuFacts]:
    return [
        GpuFacts(
            rank=gpu.rank,
            host=gpu.host,
            name=gpu.name,
            memory_gib=gpu.memory_gib,
            capability=gpu.capability,
            uuid=gpu.uuid,
            numa_node=gpu.numa_node,
            cpu_list=gpu.cpu_list,
        )
        for gpu in report.gpus
    ]


def _figures(report: ProbeReport) -> list[AllReduceFigure]:
    found = report.parsed("all_reduce")
    sizes = found.sizes if isinstance(found, AllReduceCheck) else []
    return [
        AllReduceFigure(
            size_mib=size.size_mib,
            slowest_rank_mean_us=size.slowest_rank_mean_us,
            algbw_gbps=size.algbw_gbps,
            busbw_gbps=size.busbw_gbps,
            all_elements_right=size.all_elements_right,
        )
        for size in sizes
    ]


def _topology(report: ProbeReport) -> dict[str, Any] | None:
    found = report.parsed("topology")
    if not isinstance(found, TopologyCheck) or not found.matrix:
        return None
    return {"devices": found.devices, "matrix": found.matrix, "affinity": found.affinity}


def predicate_of(
    report: ProbeReport,
    verdict: Verdict,
    *,
    scope: str,
    where: Where,
    image_id: str | None,
    pod: str | None,
    expected: dict[str, Any],
    node: str | None = None,
) -> GpuPreflightPredicate:
    """What is signed and recorded of a preflight: imagekit's verdict and each check as it
    decided it, the GPUs, the figures and the versions."""
    return GpuPreflightPredicate(
        status=verdict.status,
        scope=scope,
        where=where,
        node=node or report.host,
        image_id=image_id,
        pod=pod,
        world_size=report.world_size,
        level=report.level,
        gpus=_facts(report),
        expected=expected,
        checks=[GpuCheck(name=c.name, status=c.state, reason=c.sentence) for c in verdict.checks],
        failing=list(verdict.failing),
        all_reduce=_figures(report),
        topology=_topology(report),
        versions=report.versions,
        preflight_at=report.finished_at or report.started_at,
        imagekit_version=__version__,
    )


__all__ = [
    "CORE_JUDGES",
    "JUDGES",
    "REQUIRED",
    "Asked",
    "CheckVerdict",
    "Judge",
    "ProbeReport",
    "Verdict",
    "decide",
    "load_json",
    "parse_report",
    "predicate_of",
]
