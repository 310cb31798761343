"""The audit's kind: its statuses, record details, signed predicate, import and policy rule.

Statuses are the vocabulary of the public MiniMax-M3 image lock: ``CPU_PASS``,
``CPU_PASS_GPU_CLI_DEFERRED`` (a serving CLI could not parse without a GPU; its CPU-platform
fallback passed) and ``CPU_CHECK_INCOMPLETE`` (a check failed, timed out or could not run).
What each proves: docs/ARCHITECTURE.md, "Statuses, and what each proves".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from imagekit.attest.rules import Newest, Requirement, age_s, age_seconds, newest
from imagekit.kinds.details import AuditedImageDetails, RecordDetails
from imagekit.kinds.spec import Imported, KindSpec, PolicyEntry, Predicate, PredicateModel

if TYPE_CHECKING:
    from imagekit.attest.collect import Collected, VerifiedAttestation

AUDIT_V1 = "https://imagekit.dev/attestation/audit/v1"


class AuditStatus(StrEnum):
    """The audit's overall status, best first; the one vocabulary every module imports."""

    CPU_PASS = "CPU_PASS"  # noqa: S105 - a status, not a password
    CPU_PASS_GPU_CLI_DEFERRED = "CPU_PASS_GPU_CLI_DEFERRED"  # noqa: S105
    CPU_CHECK_INCOMPLETE = "CPU_CHECK_INCOMPLETE"

    @property
    def accepted(self) -> bool:
        """Whether an image may go on: a deferred GPU CLI is still a CPU pass."""
        return self is not AuditStatus.CPU_CHECK_INCOMPLETE


#: The statuses an image may go on with (the default policy's audit requirement).
PASSING: tuple[str, ...] = tuple(s.value for s in AuditStatus if s.accepted)


class AuditSummary(RecordDetails):
    """Which checks ran and how they ended; the whole report is the record's evidence."""

    checks: dict[str, str] | None = None
    failing: list[str] | None = None
    deferred: list[str] | None = None
    skipped: list[str] | None = None
    versions: dict[str, str | None] | None = Field(
        default=None,
        description="the profile's key distributions as the versions check read them, None "
        "for one that is not installed (the image lock's prepared_versions)",
    )


class AuditDetails(AuditedImageDetails):
    report: AuditSummary | None = None
    attestation: str | None = Field(
        default=None,
        description="with --sign-key: the signed attestation's envelope digest, or "
        "'not attested: WHY' when the registry did not take it",
    )
    imported: str | None = Field(
        default=None,
        description="`ledger sync`: imported from a signed attestation, and with which key",
    )


class AuditCheck(PredicateModel):
    name: str
    status: str = Field(description="PASS, FAIL, DEFERRED, SKIPPED, ... as the probe said")
    kind: str
    proves: str = Field(description="what this check's pass proves (its scope)")


class AuditVulnerabilities(PredicateModel):
    status: str = Field(description="clean, findings, unknown or skipped")
    reason: str | None = None
    audited: int | None = None
    findings: int = Field(description="known vulnerabilities found")
    fixable: int = Field(description="of them, those with a fixed version")
    finding_ids: list[str]
    database: dict[str, Any] | None = Field(
        default=None, description="the offline OSV export matched against, when one was"
    )


class AuditPredicate(PredicateModel):
    """What `imagekit audit` proved about the subject image, signed."""

    status: str = Field(description=", ".join(AuditStatus))
    status_sentence: str
    scope: str = Field(description="what was proved and what was not (no GPU, no weights)")
    profile: str
    plan: str | None = None
    platform: str | None = Field(default=None, description="os/arch[/variant] of the image run")
    emulated: bool = Field(description="ran under qemu-user on another architecture")
    image_id: str | None = None
    checks: list[AuditCheck]
    failing: list[str]
    deferred: list[str]
    skipped: list[str]
    vulnerabilities: AuditVulnerabilities
    evidence: dict[str, str] = Field(
        description="file name -> sha256 digest of the raw evidence kept by the auditor"
    )
    audited_at: str = Field(description="RFC 3339 UTC time the audit finished")
    imagekit_version: str


def _imported(attestation: VerifiedAttestation, marked: str) -> Imported | None:
    from pydantic import ValidationError

    try:
        audit = AuditPredicate.model_validate(attestation.statement.predicate)
    except ValidationError:
        return None
    details = AuditDetails(
        attestation=str(attestation.envelope_digest),
        imported=marked,
        profile=audit.profile,
        image_id=audit.image_id,
        report=AuditSummary(
            checks={c.name: c.status for c in audit.checks},
            failing=audit.failing,
            deferred=audit.deferred,
            skipped=audit.skipped,
        ),
    )
    return Imported(audit.status, audit.scope, details)


def newest_audit(collected: Collected) -> Newest[AuditPredicate]:
    """The newest signed audit of this digest (by its signed audited_at): a later audit
    supersedes an earlier one, so a pass followed by a failure is a failure."""
    return newest(
        collected, AUDIT_V1, AuditPredicate, lambda p: p.audited_at, "an imagekit audit/v1"
    )


class AuditRequirement(PredicateModel):
    status: tuple[str, ...] = Field(default=PASSING, min_length=1)
    platform: str | None = None
    max_age: str | None = Field(default=None, description="90m, 24h, 7d: the audit's age")

    @field_validator("max_age")
    @classmethod
    def _age(cls, value: str | None) -> str | None:
        if value is not None:
            age_seconds(value)
        return value


@dataclass(frozen=True)
class AuditRule:
    """The newest signed audit of the image: its status one of those allowed, of the
    platform asked for, no older than the maximum age."""

    requirement: AuditRequirement

    @property
    def platform(self) -> str | None:
        return self.requirement.platform

    def evaluate(self, collected: Collected, now: datetime) -> list[Requirement]:
        rule = self.requirement
        name = f"audit status in {{{', '.join(rule.status)}}}"
        if rule.platform:
            name += f" on {rule.platform}"
        if rule.max_age:
            name += f", at most {rule.max_age} old"
        found = newest_audit(collected)
        attestation, predicate = found.attestation, found.predicate
        if attestation is None or predicate is None:
            why = "no audit attestation signed by the keys given for this digest"
            return [Requirement(name, False, "; ".join([why, *found.unreadable]))]
        problems = []
        if predicate.status not in rule.status:
            problems.append(f"status {predicate.status}")
        if rule.platform and predicate.platform != rule.platform:
            problems.append(f"platform {predicate.platform}")
        age = age_s(predicate.audited_at, now)
        if rule.max_age and (age is None or age > age_seconds(rule.max_age)):
            problems.append(f"audited at {predicate.audited_at}, older than {rule.max_age}")
        where = attestation.envelope_digest
        if problems:
            return [
                Requirement(
                    name, False, f"the newest audit {where.short}: {', '.join(problems)}", where
                )
            ]
        return [Requirement(name, True, f"{predicate.status} ({predicate.scope})", where)]


AUDIT = KindSpec(
    name="audit",
    details=AuditDetails,
    statuses=tuple(AuditStatus),
    failing=frozenset(s.value for s in AuditStatus if not s.accepted),
    predicate=Predicate(AUDIT_V1, AuditPredicate, "audit-v1.schema.json", _imported),
    lock_column="audit",
    about_images=True,
    identifier_keys=("image_id",),
    policy=PolicyEntry(
        key="audit",
        annotation=AuditRequirement | None,
        rule=AuditRule,
        default=AuditRequirement,
    ),
)
