"""The audit stage: resolve the image, run the probe, decide, scan, keep the evidence, record.

One function, :func:`audit`, is what ``imagekit audit`` calls. It chains the runner (probe in
a locked-down container, or on this host with ``--host``), the status decision, the
vulnerability stage, the evidence folder and the ledger. The raw probe output is streamed
into the evidence folder as it is printed (imagekit.audit.output), so even a report that
cannot be read, a run that hit the wall-clock limit, or one that was interrupted is kept.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from imagekit import evidence
from imagekit.attest.attach import AttestOutcome, Prepared
from imagekit.attest.seal import sign_record_attach
from imagekit.attest.signer import Signer, signer_of
from imagekit.audit.attestation import AuditFacts, attach_audit, prepare_audit
from imagekit.audit.profiles import Profile, load_profile, probe_spec
from imagekit.audit.report import (
    HOST_SCOPE,
    SCOPE,
    AuditVerdict,
    ProbeReport,
    condensed,
    decide,
)
from imagekit.audit.runner import (
    DEFAULT_TIMEOUT_S,
    Limits,
    read_report,
    run_in_container,
)
from imagekit.audit.runner import run_on_host as _run_on_host
from imagekit.audit.vulns import FailOn, Finding, VulnPolicy, VulnScan, fails, scan
from imagekit.errors import CouldNotFinish
from imagekit.kinds.audit import AUDIT_V1
from imagekit.kinds.vulnerability_scan import COSIGN_VULN_V1
from imagekit.ledger import (
    AuditDetails,
    AuditedImageDetails,
    AuditSummary,
    TagResolution,
    VulnerabilityDatabase,
    VulnerabilityScanDetails,
    VulnerabilitySummary,
    append_record,
)
from imagekit.refs import Reference
from imagekit.runtime.container import ProcessRun
from imagekit.runtime.engine import Engine, connect, execution_for
from imagekit.runtime.images import EngineImage, resolve_image
from imagekit.workspace import Workspace


@dataclass(frozen=True)
class AuditRequest:
    """What to audit and how; ``ref`` is None with ``host`` (and for imagekit.audit_image,
    which takes the reference as its first argument)."""

    ref: str | None = None
    profile: str | None = None
    plan: str | None = None
    offline: bool = False
    host: bool = False
    expected_paths: tuple[str, ...] = ()
    extra_modules: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)
    platform: str | None = None  # os/arch to pull; default: the plan's base platform
    timeout_s: float = DEFAULT_TIMEOUT_S  # the whole probe run's wall-clock limit
    vulns: VulnPolicy = field(default_factory=VulnPolicy)  # database, its age, --fail-on
    sign_key: Path | None = None  # attest the verdict in the image's registry (imagekit/attest)


@dataclass(frozen=True)
class AuditResult:
    target: str
    image: EngineImage | None
    profile: str
    plan: str | None
    verdict: AuditVerdict
    scope: str
    report: ProbeReport
    vulns: VulnScan
    evidence_dir: Path
    report_path: Path
    summary_path: Path
    ledger_seqs: tuple[int, ...]
    probe_run: ProcessRun | None = None
    # How python3 ended when that is not the usual exit 0 ("python3 exited 1 after ...").
    probe_note: str | None = None
    fail_on: FailOn = "findings"
    attestation: AttestOutcome | None = None  # with --sign-key: stored, or why not
    vuln_attestation: AttestOutcome | None = None  # cosign's vuln predicate, the same

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict.status.accepted and not fails(self.vulns, self.fail_on) else 1

    @property
    def ok(self) -> bool:
        """The status was accepted and the vulnerability scan does not fail the audit."""
        return self.exit_code == 0

    @property
    def evidence(self) -> Path:
        """The whole audit report (the raw probe output lies beside it)."""
        return self.report_path

    def to_json(self, *, whole: bool = False) -> dict[str, Any]:
        """The result for --json: checks condensed unless ``whole`` (the evidence file)."""
        image = None
        if self.image is not None:
            digest = self.image.manifest_digest
            image = {
                "requested": self.image.requested,
                "image_id": self.image.image_id,
                "repo_tags": list(self.image.repo_tags),
                "repo_digests": list(self.image.repo_digests),
                "manifest_digest": str(digest) if digest else None,
                "pulled": self.image.pulled,
                "pulled_platform": self.image.pulled_platform,
                "tag_resolution": _tag_resolution(self.image),
            }
        return {
            "target": self.target,
            "image": image,
            "profile": self.profile,
            "plan": self.plan,
            "status": self.verdict.status,
            "status_sentence": self.verdict.sentence,
            "scope": self.scope,
            "failing_checks": list(self.verdict.failing),
            "deferred_checks": list(self.verdict.deferred),
            "skipped_checks": list(self.verdict.skipped),
            "checks": (
                [c.model_dump(mode="json") for c in self.report.checks]
                if whole
                else condensed(self.report)
            ),
            "probe": {
                "mode": self.report.mode,
                "python": self.report.python.model_dump(mode="json"),
                "platform": self.report.platform.model_dump(mode="json"),
                "environment": self.report.environment,
                "duration_s": self.report.duration_s,
                "output_cap_bytes": self.report.output_cap_bytes,
                **_probe_run_json(self.probe_run, self.probe_note),
            },
            "vulnerabilities": {
                **(
                    self.vulns.to_json()
                    if whole
                    else {k: v for k, v in self.vulns.to_json().items() if k not in ("stdout",)}
                ),
                "fail_on": self.fail_on,
                "fails_audit": fails(self.vulns, self.fail_on),
            },
            "evidence": {
                "dir": str(self.evidence_dir),
                "report": str(self.report_path),
                "summary": str(self.summary_path),
            },
            "ledger": {"seqs": list(self.ledger_seqs)},
            **({"attestation": self.attestation.to_json()} if self.attestation else {}),
            **(
                {"vuln_attestation": self.vuln_attestation.to_json()}
                if self.vuln_attestation
                else {}
            ),
        }


def _tag_resolution(image: EngineImage) -> dict[str, str] | None:
    """ "tag X resolved to DIGEST at TIME", when the audit was asked for a registry tag."""
    if image.resolved_tag is None or image.manifest_digest is None:
        return None
    return {
        "tag": image.resolved_tag,
        "digest": str(image.manifest_digest),
        "at": str(image.resolved_at),
        "sentence": f"tag {image.resolved_tag} resolved to {image.manifest_digest} at "
        f"{image.resolved_at}",
    }


def unasked_tag(image: EngineImage) -> str | None:
    """The tag REF named when the engine already held an image under it: the registry was
    not asked what the tag serves (it may serve another image now), so a record names the
    engine's image ID, never the bare tag as if it were the image. None otherwise (pinned,
    pulled after resolving the tag, or an image ID)."""
    if image.pulled or (image.reference is not None and image.reference.digest is not None):
        return None
    requested = image.requested.removeprefix("sha256:")
    if requested and image.image_id.removeprefix("sha256:").startswith(requested):
        return None  # an image ID, or a prefix of one: no tag was named
    return image.requested


def _unasked_scope(image: EngineImage) -> str:
    tag = unasked_tag(image)
    if tag is None:
        return ""
    return (
        f"; the engine's image {image.image_id}, found locally under the tag {tag}: the "
        "registry was not asked what the tag serves"
    )


def _probe_run_json(run: ProcessRun | None, note: str | None) -> dict[str, Any]:
    """How the probe ran: its exit, how much it printed, what was kept (and where)."""
    if run is None:
        return {}
    return {
        "exit_code": run.exit_code,
        "note": note,
        "stdout_bytes": run.stdout.total,
        "stdout_cut_bytes": run.stdout.cut,
        "raw_output": [p.name for p in (*run.stdout.files, *run.stderr.files)],
    }


def plan_inputs(workspace: Workspace, name: str) -> tuple[str, list[str], list[str], str]:
    """A plan's audit profile, find_spec modules, overlay destinations and base platform (the
    first a plan of several platforms lists; --platform picks another)."""
    from imagekit.plans.load import plan_path, read_plan_checks

    plan = read_plan_checks(
        plan_path(workspace.plans_dir, name), dockerfiles_dir=workspace.dockerfiles_dir
    )
    profile = plan.audit_profile
    if profile.endswith((".yaml", ".yml")):
        profile = str(workspace.root / profile)
    destinations = [o.destination for o in plan.overlays]
    return profile, list(plan.assertions.find_spec), destinations, plan.base.targets[0]


def _summary_markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# audit: {result['target']}",
        "",
        f"- status: **{result['status']}**",
        f"- {result['status_sentence']}",
        f"- scope: {result['scope']}",
        f"- profile: {result['profile']}; plan: {result['plan']}",
    ]
    if result["probe"].get("note"):
        lines.append(f"- probe: {result['probe']['note']}")
    if result["image"]:
        lines.append(
            f"- image ID: {result['image']['image_id']}; manifest digest: "
            f"{result['image']['manifest_digest']}"
        )
    vulns = result["vulnerabilities"]
    lines.append(f"- vulnerabilities: {vulns['status']}: {vulns['reason']}")
    lines += [f"  - {Finding(**f).line()}" for f in vulns["findings"]]
    lines += ["", "## checks", ""]
    for c in result["checks"]:
        lines.append(f"### {c['name']}: {c['status']} ({c['duration_s']} s)")
        lines.append("")
        lines.append(f"- proves: {c['proves']}")
        lines.append(f"- result: {c['reason']}")
        lines.append(f"- command: `{' '.join(c['command'])}` exit {c['exit_code']}")
        for note in c.get("output_notes", []):
            lines.append(f"- note: {note}")
        if "raw_failure" in c:
            raw = c["raw_failure"]
            lines.append(
                f"- raw failure kept: `{' '.join(raw['command'] or [])}` exit {raw['exit_code']}"
            )
            lines += ["", "```", raw["stderr_excerpt"].rstrip(), "```"]
        for stream in ("stdout_excerpt", "stderr_excerpt"):
            if c[stream].strip():
                lines += ["", f"{stream.split('_')[0]}:", "```", c[stream].rstrip(), "```"]
        lines.append("")
    return "\n".join(lines) + "\n"


def emulation(scope: str) -> str:
    """``emulated (qemu-...)`` when the audit's scope says its probe ran emulated, else "".

    The pipeline names it beside each platform's audit."""
    marker = scope.find("emulated (")
    return scope[marker : scope.index(")", marker) + 1] if marker >= 0 else ""


def _scan_scope(result: AuditResult) -> str:
    """What the vulnerability scan looked in: its source (the database, offline), and how."""
    database = result.vulns.database
    source = result.vulns.source
    if database:
        source += f" {database['digest']} ({database['described']})"
    emulated = emulation(result.scope)
    return f"{source} over the Python distributions the probe found installed" + (
        f" (the probe ran {emulated})" if emulated else ""
    )


def _key_versions(result: AuditResult) -> dict[str, dict[str, str | None]]:
    """The key versions the probe read (``versions=`` for the record), nothing when it read
    none: the lock's prepared_versions come from here, an absent distribution as None."""
    check = result.report.check("versions")
    found = check.data.get("versions") if check is not None else None
    if not isinstance(found, dict):
        return {}
    return {"versions": {str(k): None if v is None else str(v) for k, v in found.items()}}


def _record(
    workspace: Workspace,
    result: AuditResult,
    vulns_path: Path,
    attested: tuple[Prepared, Prepared] | None = None,
) -> tuple[int, ...]:
    """Append the audit and vulnerability-scan records, of one plan and image; their seqs.

    With ATTESTED, each record names the envelope that is to be attached after it (or
    "not attested: WHY" when there is none); the result says whether the registry stored it.
    """
    images = {"image": result.image.requested} if result.image is not None else {}
    unasked = unasked_tag(result.image) if result.image is not None else None
    if result.image is not None and unasked is not None:
        images = {"image": result.image.image_id, "tag": unasked}
    image_id = result.image.image_id if result.image else None
    resolution = _tag_resolution(result.image) if result.image is not None else None
    resolved: dict[str, Any] = {}
    if resolution is not None:
        images["tag"] = resolution["tag"]
        resolved["tag_resolution"] = TagResolution(**resolution)

    def append(
        kind: str, status: str, scope: str, evidence: Path, details: AuditedImageDetails
    ) -> int:
        return append_record(
            workspace,
            kind,
            plan=result.plan,
            images=images,
            status=status,
            scope=scope,
            evidence=evidence,
            details=details,
        ).seq

    audit_details = AuditDetails(
        **({"attestation": attested[0].ledger_value} if attested is not None else {}),
        profile=result.profile,
        image_id=image_id,
        **resolved,
        report=AuditSummary(
            checks={c.name: c.status for c in result.report.checks},
            failing=list(result.verdict.failing),
            deferred=list(result.verdict.deferred),
            skipped=list(result.verdict.skipped),
            **_key_versions(result),
        ),
    )
    audit_seq = append(
        "audit", result.verdict.status, result.scope, result.report_path, audit_details
    )
    database = result.vulns.database
    scan_details = VulnerabilityScanDetails(
        **({"attestation": attested[1].ledger_value} if attested is not None else {}),
        profile=result.profile,
        image_id=image_id,
        report=VulnerabilitySummary(
            reason=result.vulns.reason,
            audited=result.vulns.audited,
            findings=len(result.vulns.findings),
            finding_ids=sorted({f.id for f in result.vulns.findings}),
            not_audited=len(result.vulns.not_audited),
            fail_on=result.fail_on,
        ),
        **({"database": VulnerabilityDatabase(**database)} if database else {}),
        **resolved,
    )
    scan_seq = append(
        "vulnerability-scan", result.vulns.status, _scan_scope(result), vulns_path, scan_details
    )
    return (audit_seq, scan_seq)


def run(
    workspace: Workspace, request: AuditRequest, *, engine: Engine | None = None
) -> AuditResult:
    """Audit an image (or this host), write the evidence, append the ledger records."""
    signer = _signer(request)  # bad input (a key that cannot sign) refused before anything runs
    database = None
    if request.vulns.database is not None:  # bad input: refused before anything runs
        from imagekit.audit.osv import load_database  # pip-audit's modules, only when used

        database = load_database(request.vulns.database)
    profile_name = request.profile
    modules = list(request.extra_modules)
    expected = list(request.expected_paths)
    platform = request.platform
    if request.plan:
        plan_profile, plan_modules, destinations, plan_platform = plan_inputs(
            workspace, request.plan
        )
        profile_name = profile_name or plan_profile
        modules += plan_modules
        expected += destinations
        platform = platform or plan_platform
    if not profile_name:
        profile_name = "hopper-host" if request.host else "generic"
    profile: Profile = load_profile(profile_name).with_modules(modules)
    spec = probe_spec(profile, expected_paths=expected, host=request.host)

    image: EngineImage | None = None
    emulated = ""
    if request.host:
        target = f"host:{socket.gethostname()}"
        folder = (request.plan or "host-audit", f"host-{socket.gethostname()}")
        run_dir = evidence.new_run_dir(workspace.evidence_dir, *folder)
        evidence.write_json(run_dir / "spec.json", spec)
        run: ProcessRun = _run_on_host(spec, run_dir=run_dir, timeout_s=request.timeout_s)
    else:
        if not request.ref:
            raise CouldNotFinish("no image to audit", hint="give REF, or --host")
        engine = engine or connect()
        image = resolve_image(engine, request.ref, platform)
        target = image.requested
        digest = image.manifest_digest
        if image.platform is not None:
            execution = execution_for(image.platform)
            if not execution.runs:
                raise CouldNotFinish(
                    f"{target} is a {image.platform} image and cannot run here: "
                    f"{execution.reason}; audit NOT RUN",
                    hint="audit it on a host of that architecture, or install "
                    "qemu-user-static and binfmt-support to emulate it",
                )
            if execution.how == "emulated":
                emulated = f"; {execution.note}: the image's {image.platform} programs ran "
                emulated += "under qemu-user on this host, which proves nothing about speed"
        folder = (request.plan or image.name, str(digest) if digest else image.image_id)
        run_dir = evidence.new_run_dir(workspace.evidence_dir, *folder)
        evidence.write_json(run_dir / "spec.json", spec)
        run = run_in_container(
            engine, image, spec, request.limits, run_dir=run_dir, timeout_s=request.timeout_s
        )
    report, note = read_report(run, target, run_dir)
    verdict = decide(report)
    vulns = scan(
        report.distributions(),
        offline=request.offline,
        database=database,
        max_age_days=request.vulns.max_age_days,
        locations=report.locations(),
    )
    vulns_path = run_dir / "vulnerabilities.json"
    evidence.write_json(vulns_path, vulns.to_json())
    result = AuditResult(
        target=target,
        image=image,
        profile=profile.name,
        plan=request.plan,
        verdict=verdict,
        scope=(HOST_SCOPE if request.host else SCOPE)
        + emulated
        + (_unasked_scope(image) if image is not None else ""),
        report=report,
        vulns=vulns,
        evidence_dir=run_dir,
        report_path=run_dir / "audit-report.json",
        summary_path=run_dir / "summary.md",
        ledger_seqs=(),
        probe_run=run,
        probe_note=note,
        fail_on=request.vulns.fail_on,
    )
    whole = result.to_json(whole=True)
    whole["probe_command"] = list(run.command)
    evidence.write_json(result.report_path, whole)
    evidence.write_bytes(result.summary_path, _summary_markdown(result.to_json()).encode("utf-8"))
    return sign_record_attach(
        result,
        sign=lambda audited: (
            prepare_audit(signer, _facts(audited), _evidence_files(audited)) if signer else ()
        ),
        record=lambda audited, prepared: replace(
            audited, ledger_seqs=_record(workspace, audited, vulns_path, _pair(prepared))
        ),
        attach=lambda prepared: attach_audit(_both(prepared)),
        attached=lambda audited, outcomes: replace(
            audited, attestation=outcomes[0], vuln_attestation=outcomes[1]
        ),
    )


#: the stage under the name it had before every stage was run as ``run(workspace, request)``
audit = run


def _pair(prepared: Sequence[Prepared]) -> tuple[Prepared, Prepared] | None:
    """The audit's and the scan's envelopes, signed together; None when nothing was signed."""
    return _both(prepared) if prepared else None


def _both(prepared: Sequence[Prepared]) -> tuple[Prepared, Prepared]:
    audit_envelope, scan_envelope = prepared
    return audit_envelope, scan_envelope


def _facts(result: AuditResult, *, scope: str | None = None) -> AuditFacts:
    return AuditFacts(
        result.image,
        result.verdict,
        scope or result.scope,
        result.profile,
        result.plan,
        result.report,
        result.vulns,
    )


def _evidence_files(result: AuditResult) -> tuple[Path, ...]:
    return (result.report_path, result.evidence_dir / "vulnerabilities.json", result.summary_path)


def prepare_pushed_audit(
    signer: Signer, result: AuditResult, pushed: Reference, config_digest: str
) -> tuple[Prepared, Prepared]:
    """Sign an audit of the engine's own image for the digest it was pushed as afterwards,
    attaching nothing: the push record names both envelopes first, then they are attached
    (imagekit.builders.push.push_and_record).

    The pipeline audits before it pushes (it pushes only what the audit passed), so the
    image audited had no registry digest yet. The verdict is about the image's content, which
    its config digest names: it is signed onto PUSHED only when the pushed manifest's config
    (CONFIG_DIGEST, read from the registry by the caller) is the audited image's ID, and its
    scope says so. Never raises for a registry fault: each says "not attested".
    """
    image = result.image
    if image is None or image.image_id != config_digest:
        audited = image.image_id if image is not None else "none"
        why = f"the pushed image's config {config_digest} is not the audited image {audited}"
        return (
            Prepared.nothing(AUDIT_V1, signer.key_id, why),
            Prepared.nothing(COSIGN_VULN_V1, signer.key_id, why),
        )
    moved = replace(image, reference=pushed, repo_digests=(str(pushed),))
    scope = (
        f"{result.scope}; audited in the engine as {image.image_id} before it was pushed as "
        f"{pushed.digest}, whose config is that image's"
    )
    return prepare_audit(
        signer, replace(_facts(result, scope=scope), image=moved), _evidence_files(result)
    )


def _signer(request: AuditRequest) -> Signer | None:
    return signer_of(
        request.sign_key,
        nothing_to_attest="--sign-key attests an image in a registry; a --host audit has none"
        if request.host
        else None,
        hint="drop --sign-key, or audit an image",
    )
