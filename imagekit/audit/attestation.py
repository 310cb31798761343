"""The audit's attestation: what the audit proved, as a signed in-toto statement about the
image, stored beside it in its registry (imagekit/attest). Signed at the audit's end, before
its ledger record, so the record names the envelope to be attached (or "not attested: WHY");
attached only once that record is written."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imagekit.attest.attach import AttestOutcome, Prepared, prepare_reference
from imagekit.attest.signer import Signer
from imagekit.audit.report import AuditVerdict, ProbeReport
from imagekit.audit.vulns import VulnScan
from imagekit.kinds.audit import AUDIT_V1, AuditCheck, AuditPredicate, AuditVulnerabilities
from imagekit.kinds.vulnerability_scan import COSIGN_VULN_V1
from imagekit.refs import Digest, Reference
from imagekit.registry.client import RegistryClient
from imagekit.runtime.images import EngineImage
from imagekit.version import __version__


@dataclass(frozen=True)
class AuditFacts:
    """What the audit decided, as the attestation needs it (the stage's result, without
    importing the stage)."""

    image: EngineImage | None
    verdict: AuditVerdict
    scope: str
    profile: str
    plan: str | None
    report: ProbeReport
    vulns: VulnScan


def audit_predicate(result: AuditFacts, evidence_files: tuple[Path, ...]) -> AuditPredicate:
    vulns = result.vulns
    platform = result.image.platform if result.image is not None else None
    return AuditPredicate(
        status=result.verdict.status,
        status_sentence=result.verdict.sentence,
        scope=result.scope,
        profile=result.profile,
        plan=result.plan,
        platform=str(platform) if platform is not None else None,
        emulated="qemu-user" in result.scope,
        image_id=result.image.image_id if result.image is not None else None,
        checks=[
            AuditCheck(name=c.name, status=c.status, kind=c.kind, proves=c.proves)
            for c in result.report.checks
        ],
        failing=list(result.verdict.failing),
        deferred=list(result.verdict.deferred),
        skipped=list(result.verdict.skipped),
        vulnerabilities=AuditVulnerabilities(
            status=vulns.status,
            reason=vulns.reason,
            audited=vulns.audited,
            findings=len(vulns.findings),
            fixable=sum(1 for f in vulns.findings if f.fix_versions),
            finding_ids=sorted({f.id for f in vulns.findings}),
            database=dict(vulns.database) if vulns.database else None,
        ),
        evidence={
            path.name: str(Digest.of_bytes(path.read_bytes()))
            for path in evidence_files
            if path.is_file()
        },
        audited_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        imagekit_version=__version__,
    )


def vuln_predicate(result: AuditFacts, finished: str) -> dict[str, Any]:
    """cosign's vulnerability predicate (its "Vulnerability Scan Record" specification):
    the scanner (pip-audit through imagekit's audit, against OSV), the database, and the
    result (imagekit's scan document, findings with their fixed versions)."""
    vulns = result.vulns
    database = vulns.database or {}
    document = vulns.to_json()
    document.pop("stdout", None)
    document.pop("stderr", None)
    return {
        "invocation": {
            "parameters": {"profile": result.profile, "plan": result.plan},
            "uri": "",
            "event_id": "",
            "builder.id": "imagekit audit",
        },
        "scanner": {
            "uri": "pkg:pypi/pip-audit",
            "version": __version__,
            "db": {
                "uri": str(database.get("name") or vulns.source),
                "version": str(database.get("digest") or ""),
            },
            "result": document,
        },
        "metadata": {"scanStartedOn": finished, "scanFinishedOn": finished},
    }


def prepare_audit(
    signer: Signer, result: AuditFacts, evidence_files: tuple[Path, ...]
) -> tuple[Prepared, Prepared]:
    """Sign the audit's attestation and the vulnerability scan's (cosign's vuln predicate)
    for the image audited, attaching nothing: what the records name before anything is
    pushed. Never raises for a registry fault: each says "not attested" and why."""
    image = result.image
    digest = image.manifest_digest if image is not None else None
    if image is None or image.reference is None or digest is None:
        why = "the audited image has no registry digest to attest"
        return Prepared.nothing(AUDIT_V1, signer.key_id, why), Prepared.nothing(
            COSIGN_VULN_V1, signer.key_id, why
        )
    if not image.pulled and not image.repo_digests:
        why = "the audited image is only in the local engine"
        return Prepared.nothing(AUDIT_V1, signer.key_id, why), Prepared.nothing(
            COSIGN_VULN_V1, signer.key_id, why
        )
    pinned = Reference(image.reference.registry, image.reference.repository, None, digest)
    audit = audit_predicate(result, evidence_files)
    with RegistryClient() as client:
        audited = prepare_reference(
            signer,
            pinned,
            AUDIT_V1,
            audit.model_dump(mode="json"),
            platform=image.platform,
            client=client,
        )
        scanned = prepare_reference(
            signer,
            pinned,
            COSIGN_VULN_V1,
            vuln_predicate(result, audit.audited_at),
            platform=image.platform,
            client=client,
        )
    return audited, scanned


def attach_audit(prepared: tuple[Prepared, Prepared]) -> tuple[AttestOutcome, AttestOutcome]:
    """Attach both prepared envelopes (once their records are written), one client for the
    two; a registry fault is an outcome saying "not attested", never an exception."""
    with RegistryClient() as client:
        return prepared[0].attach(client), prepared[1].attach(client)
