"""`imagekit pipeline NAME`: every stage for one plan, in order, stopping at the first no.

doctor -> build (with the plan's assertions) -> audit -> push to R -> mirror to M (copy, then
verify by diffID) -> final pull from M by digest -> GPU preflight of the pulled digest where
a GPU is visible (SKIPPED, saying why, where none is) -> ledger verify. The pipeline only chains
the stages: each one writes its own evidence and appends its own ledger record, exactly as
when it is run alone, so nothing here records twice.

With a signing key (``sign_key``) every stage that proves something about the image signs it
beside the image in the registry (imagekit/attest), as each does when run alone with
``--sign-key``: the push stage signs the build's SLSA provenance and the audit's verdict and
vulnerability scan onto the pushed digest (the audit ran before the push, on the engine's
image, whose config the pushed manifest names), the mirror signs its verdict binding the
mirror's digest to the pushed one (after copying the attestations across), and the final
pull signs what the target pulled. A key that cannot sign is exit 2 before any stage runs;
an attestation the registry refused stops the run there (exit 3), its stage's verdict,
evidence and record kept, the record saying "not attested".

A plan of several platforms (``base.platforms``, docs/multi-platform.md) runs as: doctor
(each platform runs here, the base resolves for each) -> build (imagekit.builders.platforms:
each platform built and asserted, one index pushed by digest to R) -> an audit stage a
platform (``audit linux/arm64``: that platform's image read from R by its digest, emulated
under qemu-user where it is not this host's) -> mirror the index to M (copied whole, every
platform's image verified by diffID) -> final pull from M of the index by digest (the engine
takes this host's platform) -> ledger verify. There is no push stage: the index is in R by
digest before any audit (the build pushes it; a failed audit leaves it there untagged, as a
rejected build does), and only an index whose every platform passed its audit is mirrored.
With ``sign_key`` the build signs the index's SLSA provenance (its subjects the index and
each platform's manifest), each platform's audit signs its verdict and scan onto that
platform's manifest, the mirror copies them and signs one binding of the whole index, and
the final pull signs the index and the manifest this host pulled.

Fail-closed: the first stage that says no (or cannot finish) stops the run; the stages after
it are reported as "not run", never as passed. The exit code is the failing stage's: 1 when a
check said no, 3 when something could not be finished, 2 for bad input.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from imagekit.audit.vulns import VulnPolicy
from imagekit.errors import CheckFailed, CouldNotFinish, ImagekitError, UsageError
from imagekit.evidence import new_run_dir, write_bytes, write_json
from imagekit.refs import parse_reference, repository_for
from imagekit.result import StageResult
from imagekit.workspace import Workspace

if TYPE_CHECKING:
    from imagekit.attest.attach import Prepared
    from imagekit.audit.stage import AuditResult
    from imagekit.mirror import MirrorReport


class StageStatus(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    NOT_RUN = "not run"
    SKIPPED = "skipped"  # an optional stage that does not apply here, and why: counts as ok


# The members under short names, for the stage functions below.
PASSED, FAILED, ERROR, NOT_RUN, SKIPPED = StageStatus


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
    sign_key: Path | None = None  # attest every stage that proves something (imagekit/attest)


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
        return all(s.status in (PASSED, SKIPPED) for s in self.stages)

    @property
    def exit_code(self) -> int:
        if self.ok:
            return 0
        if self.error is not None:
            return int(self.error.get("exit_code", 3))
        # A stage that reported (not raised) "error", e.g. a mirror verdict of error.
        return 3 if any(s.status == ERROR for s in self.stages) else 1

    @property
    def ledger_seqs(self) -> tuple[int, ...]:
        """Every record the run's stages appended."""
        return tuple(range(self.ledger_seq_before + 1, self.ledger_seq_after + 1))

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
            "ledger_records": list(self.ledger_seqs),
            "error": self.error,
        }


def _last_seq(workspace: Workspace) -> int:
    from imagekit.ledger import iter_records

    if not workspace.ledger_path.exists():
        return 0
    seq = 0
    with iter_records(workspace.ledger_path) as records:
        for record in records:
            seq = record.seq
    return seq


def _rel(workspace: Workspace, path: Path | str | None) -> str | None:
    if path is None:
        return None
    p = Path(path)
    try:
        return str(p.resolve().relative_to(workspace.root.resolve()))
    except ValueError:
        return str(p)


@dataclass(frozen=True)
class Run:
    """What every stage of one run may read besides the results before it."""

    workspace: Workspace
    name: str
    options: PipelineOptions
    push_repo: str
    mirror_repo: str
    echo: TextIO


# The results gathered so far, by stage name; a stage is handed those it ``needs`` only.
Results = Mapping[str, StageResult]


@dataclass(frozen=True)
class Step:
    """What a stage returns: its own result (the seam: ok, exit code, evidence, records) and
    the line the pipeline's table shows for it."""

    result: StageResult
    detail: str
    digest: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


StageRun = Callable[["Run", "Results"], Step]


@dataclass(frozen=True)
class Stage:
    """One stage of the pipeline: its name, the earlier stages whose results it reads, and
    how it runs, for a plan of one image (``run``) and for a plan of several platforms
    (``index``, with ``index_needs``; None: the stage is not one of such a plan's, as the
    push, which the index build does itself). ``each_platform`` makes it one stage a platform
    (``audit linux/arm64``) for a plan of several. ``when`` says why an optional stage does
    not apply (it is SKIPPED, saying so, and counts as ok), or None when it runs.

    A new stage is one of these in PIPELINE; its result meets StageResult."""

    name: str
    needs: tuple[str, ...]
    run: StageRun | None
    index: StageRun | None = None
    index_needs: tuple[str, ...] | None = None
    each_platform: Callable[[str], StageRun] | None = None
    when: Callable[[Run], str | None] | None = None


ResultT = TypeVar("ResultT")


def _need(results: Results, name: str, kind: type[ResultT]) -> ResultT:
    """The result of the earlier stage ``name``, of the type that stage returns."""
    result = results[name]
    if not isinstance(result, kind):  # PIPELINE names a stage that returns something else
        raise TypeError(f"stage {name} returned {type(result).__name__}, not {kind.__name__}")
    return result


def _doctor(run: Run, results: Results) -> Step:
    from imagekit.flows.doctor import run_doctor

    registries = [("push", run.options.registry), ("mirror", run.options.mirror)]
    report = run_doctor(
        run.workspace, run.name, registries=registries, base_override=run.options.base_override
    )
    run_dir = new_run_dir(run.workspace.evidence_dir, run.name, "doctor")
    path = run_dir / "doctor.json"
    write_json(path, report.to_json())
    for line in report.lines():
        run.echo.write(f"doctor: {line}\n")
    report = replace(report, evidence=path)
    if not report.ok:
        failed = ", ".join(c.name for c in report.failed)
        return Step(report, f"said no: {failed}")
    return Step(report, f"{len(report.checks)} checks")


def _build(run: Run, results: Results) -> Step:
    from imagekit.builders.buildkit import build_plan
    from imagekit.builders.options import BuildOptions

    result = build_plan(
        run.workspace,
        run.name,
        BuildOptions(base_override=run.options.base_override),
        echo=run.echo,
    )
    return Step(
        result,
        "built; assertions passed",
        digest=result.image_id,
        data={"tag": result.tag, "image_id": result.image_id, "builder": result.builder},
    )


def _audit(run: Run, results: Results) -> Step:
    from imagekit.audit.stage import AuditRequest, audit
    from imagekit.builders.buildkit import BuildResult

    built = _need(results, "build", BuildResult)
    # The stage appends its own records (audit, vulnerability-scan).
    request = AuditRequest(
        ref=built.tag or built.image_id,
        plan=run.name,
        profile=run.options.profile,
        vulns=run.options.vulns,
    )
    result = audit(run.workspace, request)
    return Step(result, _audit_detail(run, result), digest=built.image_id)


def _audit_detail(run: Run, result: AuditResult) -> str:
    """The audit's status, and the findings that fail it when its status alone would not."""
    status = result.verdict.status
    # As `imagekit audit` exits: known vulnerabilities under --fail-on fail the stage, so the
    # image is not pushed. An unknown scan (no database, the service silent) is in the
    # audit's records and fails nothing, as in `imagekit audit`.
    if result.exit_code != 0 and status.accepted:
        findings = len(result.vulns.findings)
        return (
            f"{status}; {findings} vulnerability findings (--fail-on {run.options.vulns.fail_on})"
        )
    return str(status)


def _attest_pushed(run: Run, results: Results) -> Callable[[str], Mapping[str, Prepared]] | None:
    """What the push stage signs for the pushed digest: the build's provenance and the
    audit's verdict and scan (None without a signing key), attached after its record."""
    from imagekit.attest.attach import Prepared
    from imagekit.attest.signer import KeyFileSigner
    from imagekit.audit.stage import AuditResult, prepare_pushed_audit
    from imagekit.builders.buildkit import BuildResult, prepare_built
    from imagekit.errors import RegistryError
    from imagekit.kinds.audit import AUDIT_V1
    from imagekit.kinds.vulnerability_scan import COSIGN_VULN_V1
    from imagekit.registry import RegistryClient

    if run.options.sign_key is None:
        return None
    signer = KeyFileSigner.from_file(run.options.sign_key)
    built = _need(results, "build", BuildResult)
    audited = _need(results, "audit", AuditResult)

    def attest(pushed: str) -> Mapping[str, Prepared]:
        provenance = prepare_built(
            signer, run.workspace, built, pushed, base_override=run.options.base_override
        )
        reference = parse_reference(pushed)
        try:
            with RegistryClient() as client:
                config = str(client.resolve(reference).config_digest)
        except RegistryError as exc:
            why = f"the pushed image's config could not be read: {exc}"
            audit = Prepared.nothing(AUDIT_V1, signer.key_id, why)
            scan = Prepared.nothing(COSIGN_VULN_V1, signer.key_id, why)
        else:
            audit, scan = prepare_pushed_audit(signer, audited, reference, config)
        return {"attestation": provenance, "audit_attestation": audit, "vuln_attestation": scan}

    return attest


def _push(run: Run, results: Results) -> Step:
    from imagekit.builders.buildkit import BuildResult
    from imagekit.builders.push import push_and_record
    from imagekit.runtime.engine import connect

    built = _need(results, "build", BuildResult)
    run_dir = new_run_dir(run.workspace.evidence_dir, run.name, "push")
    log = run_dir / "push.log"
    write_bytes(log, f"imagekit: pushing {built.tag} to {run.push_repo}\n".encode())
    # The pipeline pushes only what its audit passed, and records it as `build --push` does.
    pushed = push_and_record(
        run.workspace,
        connect(),
        built.tag,
        run.push_repo,
        log,
        plan=run.name,
        image_id=built.image_id,
        attest=_attest_pushed(run, results),
    )
    detail = pushed.pushed + ("; provenance and audit attested" if pushed.attestations else "")
    return Step(pushed, detail, digest=pushed.manifest_digest, data={"pushed": pushed.pushed})


def _mirror_destination(run: Run, results: Results) -> str:
    from imagekit.builders.buildkit import BuildResult

    tag = _need(results, "build", BuildResult).tag
    return f"{run.mirror_repo}:{tag.rpartition(':')[2]}"


def _pinned_copy(destination: str, report: MirrorReport, key: str) -> str | None:
    """The mirror's copy pinned by the digest its report names under ``key``, once the
    mirror stage passed."""
    digest = (report.destination or {}).get(key)
    if report.exit_code == 0 and digest:
        return str(parse_reference(destination).pinned_only(digest))
    return None


def _mirrored(destination: str, report: MirrorReport) -> str | None:
    """The mirror's copy pinned by digest, once the mirror stage passed."""
    return _pinned_copy(destination, report, "manifest_digest")


def _mirror_copy(run: Run, source: str, destination: str) -> MirrorReport:
    """The mirror stage: ``source`` copied to ``destination`` and verified (and, with a
    signing key, the binding signed), for one image or an index."""
    from imagekit.mirror import MirrorOptions, mirror

    return mirror(
        source,
        destination,
        options=MirrorOptions(copy=True, plan=run.name, sign_key=run.options.sign_key),
        workspace=run.workspace,
    )


def _mirror(run: Run, results: Results) -> Step:
    from imagekit.builders.push import PushResult

    pushed = _need(results, "push", PushResult)
    destination = _mirror_destination(run, results)
    report = _mirror_copy(run, pushed.pushed, destination)
    mirrored = _mirrored(destination, report)
    return Step(
        report,
        report.message
        if report.message.startswith(str(report.verdict))
        else (f"{report.verdict}: {report.message}"),
        digest=(report.destination or {}).get("manifest_digest"),
        data={"verdict": str(report.verdict), "destination": mirrored or destination},
    )


def _final_pull(run: Run, results: Results) -> Step:
    from imagekit.mirror import MirrorReport

    mirrored = _mirrored(_mirror_destination(run, results), _need(results, "mirror", MirrorReport))
    return _pull_mirrored(run, mirrored, of_index=False)


def _pull_mirrored(run: Run, mirrored: str | None, *, of_index: bool) -> Step:
    """The final pull of what the mirror wrote (an image, or an index), recorded under the
    plan and signed as the pipeline was asked."""
    from imagekit.pull import final_pull

    assert mirrored is not None  # noqa: S101 - mirror passed
    result = final_pull(
        run.workspace, mirrored, record=True, plan=run.name, sign_key=run.options.sign_key
    )
    index = f"{result.manifest_digest} of the index, " if of_index else ""
    return Step(
        result,
        f"{result.status}: {index}image ID {result.image_id}",
        digest=str(result.manifest_digest),
        data={"reference": mirrored, "image_id": result.image_id},
    )


def _ledger(run: Run, results: Results) -> Step:
    from imagekit.ledger import verify

    report = verify(run.workspace)
    first = report.first
    return Step(report, "chain and evidence verify" if report.ok else f"broken: {first}")


# A plan of several platforms: the build pushes the index; each platform is audited from the
# registry; the index is mirrored and verified platform by platform; the engine pulls its own.


def _build_platforms(run: Run, results: Results) -> Step:
    from imagekit.builders.options import BuildOptions
    from imagekit.builders.platforms import build_platforms

    result = build_platforms(
        run.workspace,
        run.name,
        BuildOptions(
            base_override=run.options.base_override,
            push=run.push_repo,
            sign_key=run.options.sign_key,
        ),
        echo=run.echo,
    )
    listed = ", ".join(image.platform for image in result.images)
    return Step(
        result,
        f"{listed} built and asserted; index pushed by digest",
        digest=result.index_digest,
        data={
            "pushed": result.pushed,
            "builder": result.builder,
            "platforms": [
                {
                    "platform": image.platform,
                    "manifest_digest": image.manifest_digest,
                    "assertions": image.assertions.status,
                    "execution": image.assertions.execution.how
                    if image.assertions.execution is not None
                    else None,
                }
                for image in result.images
            ],
        },
    )


def _audit_platform(platform: str) -> Callable[[Run, Results], Step]:
    """The audit stage of one platform: its image in the pushed index, read by its digest."""

    def stage(run: Run, results: Results) -> Step:
        from imagekit.audit.stage import AuditRequest, audit, emulation
        from imagekit.builders.platforms import PlatformsResult

        built = _need(results, "build", PlatformsResult)
        [image] = [i for i in built.images if i.platform == platform]
        request = AuditRequest(
            ref=image.pushed,
            plan=run.name,
            profile=run.options.profile,
            vulns=run.options.vulns,
            platform=platform,
            sign_key=run.options.sign_key,
        )
        result = audit(run.workspace, request)
        how = emulation(result.scope) or "native"
        return Step(
            result,
            f"{_audit_detail(run, result)} ({how})",
            digest=image.manifest_digest,
            data={"platform": platform, "image": image.pushed, "execution": how},
        )

    return stage


def _index_destination(run: Run, results: Results) -> str:
    """The mirror's tag for the index: the build's run (a copy is pushed by tag)."""
    from imagekit.builders.platforms import PlatformsResult

    built = _need(results, "build", PlatformsResult)
    return f"{run.mirror_repo}:{built.evidence_dir.name}"


def _mirrored_index(destination: str, report: MirrorReport) -> str | None:
    """The mirror's copy of the index pinned by its digest, once every platform verified."""
    return _pinned_copy(destination, report, "index_digest") if report.platforms else None


def _mirror_index(run: Run, results: Results) -> Step:
    from imagekit.builders.platforms import PlatformsResult

    built = _need(results, "build", PlatformsResult)
    destination = _index_destination(run, results)
    report = _mirror_copy(run, built.pushed, destination)
    mirrored = _mirrored_index(destination, report)
    if report.exit_code == 0 and mirrored is None:  # one platform verified: not the index
        raise CheckFailed(
            f"the mirror verified {built.pushed} as one image, not each platform of its index",
            hint="docs/multi-platform.md",
        )
    verified = [str((p.destination or {}).get("platform")) for p in report.platforms]
    return Step(
        report,
        f"{report.verdict}: {len(verified)} platforms verified by diffID",
        digest=(report.destination or {}).get("index_digest"),
        data={
            "verdict": str(report.verdict),
            "destination": mirrored or destination,
            "platforms": {
                str((p.destination or {}).get("platform")): str(p.verdict) for p in report.platforms
            },
        },
    )


def _final_pull_index(run: Run, results: Results) -> Step:
    from imagekit.mirror import MirrorReport

    report = _need(results, "mirror", MirrorReport)
    mirrored = _mirrored_index(_index_destination(run, results), report)
    return _pull_mirrored(run, mirrored, of_index=True)


def _gpu_preflight(run: Run, results: Results) -> Step:
    """The final image on this host's GPUs (imagekit.gpu): the serving node's preflight."""
    from imagekit.gpu.launch import Expectations, ProbeOptions
    from imagekit.gpu.stage import PreflightRequest, deferred_cli, gpu_preflight
    from imagekit.plans.load import load_named_plan
    from imagekit.pull import PullResult

    pulled = _need(results, "final-pull", PullResult)
    reference = pulled.reference.pinned_only(pulled.expected_digest)
    plan = load_named_plan(run.workspace, run.name, base_override=run.options.base_override)
    gpu = plan.plan.gpu
    expect = Expectations(
        gpus=gpu.count if gpu else None,
        gpu_name=gpu.name if gpu else None,
        min_memory_gib=gpu.min_memory_gib if gpu else None,
        min_capability=gpu.min_capability if gpu else None,
    )
    profile = run.options.profile or plan.plan.audit_profile
    request = PreflightRequest(
        options=ProbeOptions(expect=expect, commands=deferred_cli(profile)),
        reference=str(reference),
        plan=run.name,
        sign_key=run.options.sign_key,
    )
    result = gpu_preflight(run.workspace, request)
    return Step(
        result,
        f"{result.status}: {result.verdict.sentence}",
        digest=result.image_id,
        data={"status": str(result.status), "reference": result.reference},
    )


def _gpus_here(run: Run) -> str | None:
    from imagekit.gpu.launch import gpus_visible

    return gpus_visible()


# The pipeline, in order: one list for every plan (see Stage). A stage reads only the results
# it names; the first that is not ok stops the run; an optional stage that does not apply
# is skipped and says why.
PIPELINE: tuple[Stage, ...] = (
    Stage("doctor", (), _doctor, index=_doctor),
    Stage("build", (), _build, index=_build_platforms),
    Stage("audit", ("build",), _audit, each_platform=_audit_platform),
    Stage("push", ("build", "audit"), _push),
    Stage("mirror", ("build", "push"), _mirror, index=_mirror_index, index_needs=("build",)),
    Stage("final-pull", ("build", "mirror"), _final_pull, index=_final_pull_index),
    Stage(
        "gpu-preflight",
        ("final-pull",),
        _gpu_preflight,
        index=_gpu_preflight,
        when=_gpus_here,
    ),
    Stage("ledger", (), _ledger, index=_ledger),
)
STAGES = tuple(stage.name for stage in PIPELINE)


def stages_for(platforms: tuple[str, ...]) -> tuple[Stage, ...]:
    """The stages of one run: PIPELINE as it is for a plan of one image; for a plan of
    several platforms, each stage's index form, one stage a platform where it says so."""
    if not platforms:
        return tuple(stage for stage in PIPELINE if stage.run is not None)
    found: list[Stage] = []
    for stage in PIPELINE:
        needs = stage.index_needs if stage.index_needs is not None else stage.needs
        if stage.each_platform is not None:
            found += [
                Stage(f"{stage.name} {p}", needs, stage.each_platform(p), when=stage.when)
                for p in platforms
            ]
        elif stage.index is not None:
            found.append(Stage(stage.name, needs, stage.index, when=stage.when))
    return tuple(found)


def _plan_platforms(workspace: Workspace, name: str, base_override: str | None) -> tuple[str, ...]:
    """The platforms of a plan of several, else (): a plan that does not load is the build
    stage's to report, as for any plan."""
    from imagekit.plans.load import load_named_plan

    try:
        loaded = load_named_plan(workspace, name, base_override=base_override)
    except ImagekitError:
        return ()
    return tuple(loaded.plan.base.targets) if loaded.multi_platform else ()


def _outcome(name: str, step: Step) -> StageOutcome:
    """A stage's line in the table, judged from its result alone."""
    result = step.result
    if result.ok:
        status = PASSED
    else:
        status = ERROR if result.exit_code == CouldNotFinish.exit_code else FAILED
    return StageOutcome(
        name,
        status,
        step.detail,
        digest=step.digest,
        evidence=str(result.evidence) if result.evidence is not None else None,
        data=step.data,
    )


def run_pipeline(
    workspace: Workspace, name: str, options: PipelineOptions, *, echo: TextIO | None = None
) -> PipelineResult:
    """Run every stage for plan ``name``; a stage's no or failure stops the rest."""
    echo = echo or sys.stderr
    run = Run(
        workspace=workspace,
        name=name,
        options=options,
        push_repo=repository_for(options.registry, name),
        mirror_repo=repository_for(options.mirror, name),
        echo=echo,
    )
    if run.push_repo == run.mirror_repo:
        raise UsageError(
            f"--registry and --mirror both name {run.push_repo}",
            hint="a mirror is a second registry (or another repository)",
        )
    platforms = _plan_platforms(workspace, name, options.base_override)
    if options.sign_key is not None:  # a key that cannot sign: exit 2 before any stage
        from imagekit.attest.signer import KeyFileSigner

        KeyFileSigner.from_file(options.sign_key)
    run_dir = new_run_dir(workspace.evidence_dir, name, "pipeline")
    seq_before = _last_seq(workspace)
    outcomes: list[StageOutcome] = []
    results: dict[str, StageResult] = {}
    error: dict[str, Any] | None = None
    stopped = False
    for stage in stages_for(platforms):
        if stopped:
            outcomes.append(StageOutcome(stage.name, NOT_RUN))
            continue
        skipped = stage.when(run) if stage.when is not None else None
        if skipped is not None:
            outcomes.append(StageOutcome(stage.name, SKIPPED, skipped))
            echo.write(f"pipeline: {stage.name} {SKIPPED}: {skipped}\n")
            continue
        assert stage.run is not None  # noqa: S101 - stages_for keeps runnable stages
        echo.write(f"pipeline: {stage.name} ...\n")
        started = time.monotonic()
        try:
            step = stage.run(run, {need: results[need] for need in stage.needs if need in results})
        except ImagekitError as exc:
            status = FAILED if isinstance(exc, CheckFailed) else ERROR
            outcome = StageOutcome(stage.name, status, exc.message.splitlines()[0])
            error = {"stage": stage.name, **exc.to_json()}
        else:
            results[stage.name] = step.result
            outcome = _outcome(stage.name, step)
        outcome = replace(
            outcome,
            seconds=round(time.monotonic() - started, 1),
            evidence=_rel(workspace, outcome.evidence),
        )
        outcomes.append(outcome)
        echo.write(f"pipeline: {stage.name} {outcome.status} {outcome.detail}\n")
        if outcome.status not in (PASSED, SKIPPED):
            stopped = True
    result = PipelineResult(
        plan=name,
        registry=run.push_repo,
        mirror=run.mirror_repo,
        stages=tuple(outcomes),
        evidence=run_dir / "pipeline.json",
        ledger_seq_before=seq_before,
        ledger_seq_after=_last_seq(workspace),
        error=error,
    )
    write_json(result.evidence, result.to_json())
    return result
