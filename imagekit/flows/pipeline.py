"""`imagekit pipeline NAME`: every stage for one plan, in order, stopping at the first no.

doctor -> build (with the plan's assertions) -> audit -> push to R -> mirror to M (copy, then
verify by diffID) -> final pull from M by digest -> ledger verify. The pipeline only chains
the stages: each one writes its own evidence and appends its own ledger record, exactly as
when it is run alone, so nothing here records twice.

Fail-closed: the first stage that says no (or cannot finish) stops the run; the stages after
it are reported as "not run", never as passed. The exit code is the failing stage's: 1 when a
check said no, 3 when something could not be finished, 2 for bad input.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, TextIO

from imagekit.audit.vulns import VulnPolicy
from imagekit.errors import CheckFailed, ImagekitError, UsageError
from imagekit.evidence import new_run_dir, write_bytes, write_json
from imagekit.refs import parse_reference, repository_for
from imagekit.workspace import Workspace

STAGES = ("doctor", "build", "audit", "push", "mirror", "final-pull", "ledger")


class StageStatus(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    NOT_RUN = "not run"


# The members under short names, for the stage functions below.
PASSED, FAILED, ERROR, NOT_RUN = StageStatus


@dataclass(frozen=True)
class PipelineOptions:
    """Where one run pushes and mirrors, and what its build and audit take instead of the
    plan's own.

    ``profile`` audits with another profile than the plan's (a name or a YAML file), e.g. one
    that says which checks a replica base cannot carry; the audit record names it.
    ``vulns`` is the audit's vulnerability database and --fail-on, as `imagekit audit` takes
    them: findings it fails on stop the run before the push.
    """

    registry: str
    mirror: str
    base_override: str | None = None
    profile: str | None = None
    vulns: VulnPolicy = field(default_factory=VulnPolicy)


@dataclass(frozen=True)
class StageOutcome:
    stage: str
    status: StageStatus
    detail: str = ""
    digest: str | None = None
    seconds: float | None = None
    evidence: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "status": self.status,
            "detail": self.detail,
            "digest": self.digest,
            "seconds": self.seconds,
            "evidence": self.evidence,
            "data": self.data,
        }


@dataclass(frozen=True)
class PipelineResult:
    plan: str
    registry: str
    mirror: str
    stages: tuple[StageOutcome, ...]
    evidence: Path
    ledger_seq_before: int
    ledger_seq_after: int
    error: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return all(s.status == PASSED for s in self.stages)

    @property
    def exit_code(self) -> int:
        if self.ok:
            return 0
        if self.error is not None:
            return int(self.error.get("exit_code", 3))
        # A stage that reported (not raised) "error", e.g. a mirror verdict of error.
        return 3 if any(s.status == ERROR for s in self.stages) else 1

    @property
    def final_reference(self) -> str | None:
        pulled = next((s for s in self.stages if s.stage == "final-pull"), None)
        return pulled.data.get("reference") if pulled and pulled.status == PASSED else None

    def table(self) -> list[str]:
        """The summary table: stage, status, digest, time, evidence path."""

        def status(s: StageOutcome) -> str:
            if not s.detail or s.status == NOT_RUN:
                return s.status
            text = f"{s.status}: {s.detail}"
            return text if len(text) <= 60 else text[:57] + "..."

        rows = [("stage", "status", "digest", "time", "evidence")]
        rows.extend(
            (
                s.stage,
                status(s),
                s.digest or "-",
                f"{s.seconds:.1f}s" if s.seconds is not None else "-",
                s.evidence or "-",
            )
            for s in self.stages
        )
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        return [
            "  ".join([*(row[i].ljust(widths[i]) for i in range(4)), row[4]]).rstrip()
            for row in rows
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "registry": self.registry,
            "mirror": self.mirror,
            "ok": self.ok,
            "exit_code": self.exit_code,
            "final_reference": self.final_reference,
            "stages": [s.to_json() for s in self.stages],
            "evidence": str(self.evidence),
            "ledger_records": list(range(self.ledger_seq_before + 1, self.ledger_seq_after + 1)),
            "error": self.error,
        }


def _last_seq(workspace: Workspace) -> int:
    from imagekit.ledger import read_records

    if not workspace.ledger_path.exists():
        return 0
    records = read_records(workspace.ledger_path)
    return records[-1].seq if records else 0


def _rel(workspace: Workspace, path: Path | str | None) -> str | None:
    if path is None:
        return None
    p = Path(path)
    try:
        return str(p.resolve().relative_to(workspace.root.resolve()))
    except ValueError:
        return str(p)


@dataclass
class _Context:
    """What stages hand to the stages after them."""

    workspace: Workspace
    name: str
    options: PipelineOptions
    push_repo: str
    mirror_repo: str
    echo: TextIO
    no_cache: bool = False
    tag: str | None = None
    image_id: str | None = None
    pushed: str | None = None
    manifest_digest: str | None = None
    mirrored: str | None = None


Stage = Callable[[_Context], StageOutcome]


def _doctor(ctx: _Context) -> StageOutcome:
    from imagekit.flows.doctor import run_doctor

    registries = [("push", ctx.options.registry), ("mirror", ctx.options.mirror)]
    report = run_doctor(
        ctx.workspace, ctx.name, registries=registries, base_override=ctx.options.base_override
    )
    run_dir = new_run_dir(ctx.workspace.evidence_dir, ctx.name, "doctor")
    path = run_dir / "doctor.json"
    write_json(path, report.to_json())
    for line in report.lines():
        ctx.echo.write(f"doctor: {line}\n")
    if not report.ok:
        failed = ", ".join(c.name for c in report.failed)
        return StageOutcome("doctor", FAILED, f"said no: {failed}", evidence=str(path))
    return StageOutcome("doctor", PASSED, f"{len(report.checks)} checks", evidence=str(path))


def _build(ctx: _Context) -> StageOutcome:
    from imagekit.build.buildkit import build_plan
    from imagekit.build.options import BuildOptions

    result = build_plan(
        ctx.workspace,
        ctx.name,
        BuildOptions(base_override=ctx.options.base_override, no_cache=ctx.no_cache),
        echo=ctx.echo,
    )
    ctx.tag, ctx.image_id = result.tag, result.image_id
    return StageOutcome(
        "build",
        PASSED,
        "built; assertions passed",
        digest=result.image_id,
        evidence=str(result.log),
        data={"tag": result.tag, "image_id": result.image_id, "builder": result.builder},
    )


def _audit(ctx: _Context) -> StageOutcome:
    from imagekit.audit.stage import AuditRequest, audit

    assert ctx.image_id is not None  # noqa: S101 - the build stage ran
    # The stage appends its own records (audit, vulnerability-scan).
    request = AuditRequest(
        ref=ctx.tag or ctx.image_id,
        plan=ctx.name,
        profile=ctx.options.profile,
        vulns=ctx.options.vulns,
    )
    result = audit(ctx.workspace, request)
    status = result.verdict.status
    detail = str(status)
    # As `imagekit audit` exits: known vulnerabilities under --fail-on fail the stage, so the
    # image is not pushed. An unknown scan (no database, the service silent) is in the
    # audit's records and fails nothing, as in `imagekit audit`.
    if result.exit_code != 0 and status.accepted:
        findings = len(result.vulns.findings)
        detail = (
            f"{status}; {findings} vulnerability findings (--fail-on {ctx.options.vulns.fail_on})"
        )
    return StageOutcome(
        "audit",
        PASSED if result.exit_code == 0 else FAILED,
        detail,
        digest=ctx.image_id,
        evidence=str(result.report_path),
    )


def _push(ctx: _Context) -> StageOutcome:
    from imagekit.build.push import push_and_record
    from imagekit.runtime.engine import connect

    assert ctx.tag is not None and ctx.image_id is not None  # noqa: S101 - build ran
    run_dir = new_run_dir(ctx.workspace.evidence_dir, ctx.name, "push")
    log = run_dir / "push.log"
    write_bytes(log, f"imagekit: pushing {ctx.tag} to {ctx.push_repo}\n".encode())
    # The pipeline pushes only what its audit passed, and records it as `build --push` does.
    pushed, manifest, _ = push_and_record(
        ctx.workspace, connect(), ctx.tag, ctx.push_repo, log, plan=ctx.name, image_id=ctx.image_id
    )
    ctx.pushed, ctx.manifest_digest = pushed, manifest
    return StageOutcome("push", PASSED, pushed, digest=manifest, evidence=str(log))


def _mirror(ctx: _Context) -> StageOutcome:
    from imagekit.mirror import MirrorOptions, mirror

    assert ctx.pushed is not None and ctx.tag is not None  # noqa: S101 - push ran
    destination = f"{ctx.mirror_repo}:{ctx.tag.rpartition(':')[2]}"
    report = mirror(
        ctx.pushed,
        destination,
        options=MirrorOptions(copy=True, plan=ctx.name),
        workspace=ctx.workspace,
    )
    dst = report.destination or {}
    digest = dst.get("manifest_digest")
    status = PASSED if report.exit_code == 0 else (ERROR if report.exit_code == 3 else FAILED)
    if status == PASSED and digest:
        ctx.mirrored = str(parse_reference(destination).pinned_only(digest))
    return StageOutcome(
        "mirror",
        status,
        report.message
        if report.message.startswith(str(report.verdict))
        else (f"{report.verdict}: {report.message}"),
        digest=digest,
        seconds=None,
        evidence=str(report.evidence) if report.evidence else None,
        data={"verdict": str(report.verdict), "destination": ctx.mirrored or destination},
    )


def _final_pull(ctx: _Context) -> StageOutcome:
    from imagekit.pull import final_pull

    assert ctx.mirrored is not None  # noqa: S101 - mirror ran
    result = final_pull(ctx.workspace, ctx.mirrored, record=True, plan=ctx.name)
    return StageOutcome(
        "final-pull",
        PASSED if result.ok else FAILED,
        f"{result.status}: image ID {result.image_id}",
        digest=str(result.manifest_digest),
        evidence=str(result.evidence) if result.evidence else None,
        data={"reference": ctx.mirrored, "image_id": result.image_id},
    )


def _ledger(ctx: _Context) -> StageOutcome:
    from imagekit.ledger import verify

    report = verify(ctx.workspace)
    first = report.first
    return StageOutcome(
        "ledger",
        PASSED if report.ok else FAILED,
        "chain and evidence verify" if report.ok else f"broken: {first}",
        evidence=str(ctx.workspace.ledger_path),
    )


_STAGE_FUNCTIONS: dict[str, Stage] = {
    "doctor": _doctor,
    "build": _build,
    "audit": _audit,
    "push": _push,
    "mirror": _mirror,
    "final-pull": _final_pull,
    "ledger": _ledger,
}


def run_pipeline(
    workspace: Workspace, name: str, options: PipelineOptions, *, echo: TextIO | None = None
) -> PipelineResult:
    """Run every stage for plan ``name``; a stage's no or failure stops the rest."""
    echo = echo or sys.stderr
    ctx = _Context(
        workspace=workspace,
        name=name,
        options=options,
        push_repo=repository_for(options.registry, name),
        mirror_repo=repository_for(options.mirror, name),
        echo=echo,
    )
    if ctx.push_repo == ctx.mirror_repo:
        raise UsageError(
            f"--registry and --mirror both name {ctx.push_repo}",
            hint="a mirror is a second registry (or another repository)",
        )
    run_dir = new_run_dir(workspace.evidence_dir, name, "pipeline")
    seq_before = _last_seq(workspace)
    outcomes: list[StageOutcome] = []
    error: dict[str, Any] | None = None
    stopped = False
    for stage in STAGES:
        if stopped:
            outcomes.append(StageOutcome(stage, NOT_RUN))
            continue
        echo.write(f"pipeline: {stage} ...\n")
        started = time.monotonic()
        try:
            outcome = _STAGE_FUNCTIONS[stage](ctx)
        except ImagekitError as exc:
            status = FAILED if isinstance(exc, CheckFailed) else ERROR
            outcome = StageOutcome(stage, status, exc.message.splitlines()[0])
            error = {"stage": stage, **exc.to_json()}
        outcome = replace(
            outcome,
            seconds=round(time.monotonic() - started, 1),
            evidence=_rel(workspace, outcome.evidence),
        )
        outcomes.append(outcome)
        echo.write(f"pipeline: {stage} {outcome.status} {outcome.detail}\n")
        if outcome.status != PASSED:
            stopped = True
    result = PipelineResult(
        plan=name,
        registry=ctx.push_repo,
        mirror=ctx.mirror_repo,
        stages=tuple(outcomes),
        evidence=run_dir / "pipeline.json",
        ledger_seq_before=seq_before,
        ledger_seq_after=_last_seq(workspace),
        error=error,
    )
    write_json(result.evidence, result.to_json())
    return result
