"""The stages of `imagekit pipeline`, in order: each one's row, and how each is chained.

A row (:class:`Stage`) names a stage, the earlier stages whose results it reads, and how it
runs for a plan of one image and for a plan of several platforms. A stage that proves
something about the image is run the one way every stage is (imagekit.result.Runner):
:class:`Chained` makes its request from the run and the results before it, runs it as
``run(workspace, request)``, and reads the line the pipeline's table shows from its result.
The stage writes its own evidence and appends its own records, as when it is run alone.
imagekit.flows.pipeline runs the rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TextIO, TypeVar

from imagekit import mirror, pull
from imagekit.attest.attach import Prepared
from imagekit.audit import stage as audit_stage
from imagekit.audit.stage import AuditRequest, AuditResult
from imagekit.builders import choice, push
from imagekit.builders.buildkit import BuildResult
from imagekit.builders.options import BuildOptions
from imagekit.builders.platforms import PlatformsResult
from imagekit.builders.push import PushRequest, PushResult
from imagekit.errors import CheckFailed
from imagekit.evidence import new_run_dir, write_bytes, write_json
from imagekit.flows.pipeline_result import PipelineOptions
from imagekit.gpu import stage as gpu_stage
from imagekit.gpu.launch import Expectations, ProbeOptions
from imagekit.gpu.stage import PreflightRequest, PreflightResult
from imagekit.mirror import MirrorReport, MirrorRequest
from imagekit.pull import PullRequest, PullResult
from imagekit.refs import parse_reference
from imagekit.result import Runner, StageResult
from imagekit.workspace import Workspace


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

    A new stage is one of these in PIPELINE, its run a :class:`Chained`; its result meets
    StageResult."""

    name: str
    needs: tuple[str, ...]
    run: StageRun | None
    index: StageRun | None = None
    index_needs: tuple[str, ...] | None = None
    each_platform: Callable[[str], StageRun] | None = None
    when: Callable[[Run], str | None] | None = None


Request = TypeVar("Request")
Result = TypeVar("Result", bound=StageResult)


@dataclass(frozen=True)
class Chained(Generic[Request, Result]):
    """A stage's run in the pipeline: its ``request`` made from the run and the results
    before it, the stage run as every stage is (``runner(workspace, request)``), and its
    ``line`` in the table read from its result (and the results before it)."""

    request: Callable[[Run, Results], Request]
    runner: Runner[Request, Result]
    line: Callable[[Run, Results, Result], Step]

    def __call__(self, run: Run, results: Results) -> Step:
        result = self.runner(run.workspace, self.request(run, results))
        return self.line(run, results, result)


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


def _build_request(run: Run, results: Results) -> choice.BuildRequest:
    options = BuildOptions(base_override=run.options.base_override)  # the engine builder
    return choice.BuildRequest(run.name, options, echo=run.echo)


def _built(run: Run, results: Results, result: choice.Built) -> Step:
    return Step(
        result,
        "built; assertions passed",
        digest=result.image_id,
        data={"tag": result.tag, "image_id": result.image_id, "builder": result.builder},
    )


_build = Chained(_build_request, choice.run, _built)


def _audit_request(run: Run, results: Results) -> AuditRequest:
    built = _need(results, "build", BuildResult)
    # The stage appends its own records (audit, vulnerability-scan).
    return AuditRequest(
        ref=built.tag or built.image_id,
        plan=run.name,
        profile=run.options.profile,
        vulns=run.options.vulns,
    )


def _audited(run: Run, results: Results, result: AuditResult) -> Step:
    digest = _need(results, "build", BuildResult).image_id
    return Step(result, _audit_detail(run, result), digest=digest)


_audit = Chained(_audit_request, audit_stage.run, _audited)


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
    from imagekit.attest.signer import KeyFileSigner
    from imagekit.audit.stage import prepare_pushed_audit
    from imagekit.builders.buildkit import prepare_built
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


def _push_request(run: Run, results: Results) -> PushRequest:
    built = _need(results, "build", BuildResult)
    run_dir = new_run_dir(run.workspace.evidence_dir, run.name, "push")
    log = run_dir / "push.log"
    write_bytes(log, f"imagekit: pushing {built.tag} to {run.push_repo}\n".encode())
    # The pipeline pushes only what its audit passed, and records it as `build --push` does.
    return PushRequest(
        built.tag,
        run.push_repo,
        log,
        plan=run.name,
        image_id=built.image_id,
        attest=_attest_pushed(run, results),
    )


def _pushed(run: Run, results: Results, pushed: PushResult) -> Step:
    detail = pushed.pushed + ("; provenance and audit attested" if pushed.attestations else "")
    return Step(pushed, detail, digest=pushed.manifest_digest, data={"pushed": pushed.pushed})


_push = Chained(_push_request, push.run, _pushed)


def _mirror_destination(run: Run, results: Results) -> str:
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


def _mirror_request(run: Run, source: str, destination: str) -> MirrorRequest:
    """The mirror stage's request: ``source`` copied to ``destination`` and verified (and,
    with a signing key, the binding signed), for one image or an index."""
    options = mirror.MirrorOptions(copy=True, plan=run.name, sign_key=run.options.sign_key)
    return MirrorRequest(source, destination, options)


def _mirror_pushed(run: Run, results: Results) -> MirrorRequest:
    pushed = _need(results, "push", PushResult)
    return _mirror_request(run, pushed.pushed, _mirror_destination(run, results))


def _mirrored_line(run: Run, results: Results, report: MirrorReport) -> Step:
    destination = _mirror_destination(run, results)
    mirrored = _mirrored(destination, report)
    return Step(
        report,
        report.message
        if report.message.startswith(str(report.verdict))
        else (f"{report.verdict}: {report.message}"),
        digest=(report.destination or {}).get("manifest_digest"),
        data={"verdict": str(report.verdict), "destination": mirrored or destination},
    )


_mirror = Chained(_mirror_pushed, mirror.run, _mirrored_line)


def _mirrored_image(run: Run, results: Results) -> str | None:
    report = _need(results, "mirror", MirrorReport)
    return _mirrored(_mirror_destination(run, results), report)


def _final_pull_of(
    mirrored: Callable[[Run, Results], str | None], *, of_index: bool
) -> Chained[PullRequest, PullResult]:
    """The final pull of what the mirror wrote (an image, or an index: ``mirrored`` reads its
    copy pinned by digest from the results), recorded under the plan and signed as the
    pipeline was asked."""

    def request(run: Run, results: Results) -> PullRequest:
        reference = mirrored(run, results)
        assert reference is not None  # noqa: S101 - mirror passed
        return PullRequest(reference, record=True, plan=run.name, sign_key=run.options.sign_key)

    def line(run: Run, results: Results, result: PullResult) -> Step:
        index = f"{result.manifest_digest} of the index, " if of_index else ""
        return Step(
            result,
            f"{result.status}: {index}image ID {result.image_id}",
            digest=str(result.manifest_digest),
            data={"reference": mirrored(run, results), "image_id": result.image_id},
        )

    return Chained(request, pull.run, line)


_final_pull = _final_pull_of(_mirrored_image, of_index=False)


def _ledger(run: Run, results: Results) -> Step:
    from imagekit.ledger import verify

    report = verify(run.workspace)
    first = report.first
    return Step(report, "chain and evidence verify" if report.ok else f"broken: {first}")


# A plan of several platforms: the build pushes the index; each platform is audited from the
# registry; the index is mirrored and verified platform by platform; the engine pulls its own.


def _platforms_request(run: Run, results: Results) -> choice.BuildRequest:
    options = BuildOptions(
        base_override=run.options.base_override,
        push=run.push_repo,
        sign_key=run.options.sign_key,
    )
    return choice.BuildRequest(run.name, options, echo=run.echo)


def _platforms_built(run: Run, results: Results, built: choice.Built) -> Step:
    if not isinstance(built, PlatformsResult):  # the plan of several platforms is one
        raise TypeError(f"stage build returned {type(built).__name__}, not PlatformsResult")
    listed = ", ".join(image.platform for image in built.images)
    return Step(
        built,
        f"{listed} built and asserted; index pushed by digest",
        digest=built.index_digest,
        data={
            "pushed": built.pushed,
            "builder": built.builder,
            "platforms": [
                {
                    "platform": image.platform,
                    "manifest_digest": image.manifest_digest,
                    "assertions": image.assertions.status,
                    "execution": image.assertions.execution.how
                    if image.assertions.execution is not None
                    else None,
                }
                for image in built.images
            ],
        },
    )


_build_platforms = Chained(_platforms_request, choice.run, _platforms_built)


def _audit_platform(platform: str) -> StageRun:
    """The audit stage of one platform: its image in the pushed index, read by its digest."""

    def image(results: Results) -> Any:
        built = _need(results, "build", PlatformsResult)
        [found] = [i for i in built.images if i.platform == platform]
        return found

    def request(run: Run, results: Results) -> AuditRequest:
        return AuditRequest(
            ref=image(results).pushed,
            plan=run.name,
            profile=run.options.profile,
            vulns=run.options.vulns,
            platform=platform,
            sign_key=run.options.sign_key,
        )

    def line(run: Run, results: Results, result: AuditResult) -> Step:
        how = audit_stage.emulation(result.scope) or "native"
        found = image(results)
        return Step(
            result,
            f"{_audit_detail(run, result)} ({how})",
            digest=found.manifest_digest,
            data={"platform": platform, "image": found.pushed, "execution": how},
        )

    return Chained(request, audit_stage.run, line)


def _index_destination(run: Run, results: Results) -> str:
    """The mirror's tag for the index: the build's run (a copy is pushed by tag)."""

    built = _need(results, "build", PlatformsResult)
    return f"{run.mirror_repo}:{built.evidence_dir.name}"


def _mirrored_index(destination: str, report: MirrorReport) -> str | None:
    """The mirror's copy of the index pinned by its digest, once every platform verified."""
    return _pinned_copy(destination, report, "index_digest") if report.platforms else None


def _mirror_built_index(run: Run, results: Results) -> MirrorRequest:
    built = _need(results, "build", PlatformsResult)
    return _mirror_request(run, built.pushed, _index_destination(run, results))


def _index_mirrored(run: Run, results: Results, report: MirrorReport) -> Step:
    built = _need(results, "build", PlatformsResult)
    destination = _index_destination(run, results)
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


_mirror_index = Chained(_mirror_built_index, mirror.run, _index_mirrored)


def _mirrored_index_of(run: Run, results: Results) -> str | None:
    report = _need(results, "mirror", MirrorReport)
    return _mirrored_index(_index_destination(run, results), report)


_final_pull_index = _final_pull_of(_mirrored_index_of, of_index=True)


def _preflight_request(run: Run, results: Results) -> PreflightRequest:
    """The final image on this host's GPUs (imagekit.gpu): the serving node's preflight."""
    from imagekit.plans.load import load_named_plan

    pulled = _need(results, "final-pull", PullResult)
    reference = pulled.reference.pinned_only(pulled.expected_digest)
    plan = load_named_plan(run.workspace, run.name, base_override=run.options.base_override)
    profile = run.options.profile or plan.plan.audit_profile
    expect = Expectations.of_plan(plan.plan.gpu)
    return PreflightRequest(
        options=ProbeOptions(expect=expect, commands=gpu_stage.deferred_cli(profile)),
        reference=str(reference),
        plan=run.name,
        sign_key=run.options.sign_key,
    )


def _preflighted(run: Run, results: Results, result: PreflightResult) -> Step:
    return Step(
        result,
        f"{result.status}: {result.verdict.sentence}",
        digest=result.image_id,
        data={"status": str(result.status), "reference": result.reference},
    )


_gpu_preflight = Chained(_preflight_request, gpu_stage.run, _preflighted)


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
