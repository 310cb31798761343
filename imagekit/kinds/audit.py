"""The audit's kind: its statuses, record details, signed predicate, import and policy rule.

Statuses are the vocabulary of the public MiniMax-M3 image lock: ``CPU_PASS``,
``CPU_PASS_GPU_CLI_DEFERRED`` (a serving CLI could not parse without a GPU; its CPU-platform
fallback passed) and ``CPU_CHECK_INCOMPLETE`` (a check failed, timed out or could not run).
What each proves: docs/ARCHITECTURE.md, "Statuses, and what each proves".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from pydantic import AfterValidator, Field

from imagekit.attest.rules import Requirement, Signed
from imagekit.errors import ReferenceFormatError
from imagekit.kinds.details import (
    AuditedImageDetails,
    ImportedMark,
    RecordDetails,
    attestation_field,
)
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
from imagekit.refs import parse_platform

if TYPE_CHECKING:
    from imagekit.attest.collect import Collected

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


class AuditPod(RecordDetails):
    """The pod an audit ran in on a cluster (``imagekit audit --cluster``): this pod, by
    its uid, on that node, whose kubelet reported ``image_id``."""

    cluster: str = Field(description="the API server's address")
    namespace: str
    name: str
    uid: str
    node: str | None = None
    image_id: str = Field(description="the container's status.imageID, as the kubelet said")
    isolation: list[str] = Field(description="what the pod was given and denied")


class AuditDetails(AuditedImageDetails):
    report: AuditSummary | None = None
    pod: AuditPod | None = None
    attestation: str | None = attestation_field(
        "the signed attestation", after="when the registry did not take it"
    )
    imported: ImportedMark = None


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


def _record(audit: AuditPredicate) -> Imported:
    details = AuditDetails(
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


#: How the gate reads signed audits: the newest by its signed ``audited_at``.
SIGNED_AUDIT = Signed(AUDIT_V1, AuditPredicate, "audited_at", "audit")


def platform_problem(wanted: str | None, platform: str | None) -> list[str]:
    """Why a verdict about PLATFORM is not one about WANTED (both normalised, as containerd
    compares them: linux/arm64 is linux/arm64/v8), or nothing."""
    if not wanted:
        return []
    try:
        theirs = parse_platform(platform or "")
    except ReferenceFormatError:
        return [f"platform {platform}"]
    if parse_platform(wanted).matches(theirs.os, theirs.architecture, theirs.variant):
        return []
    return [f"platform {platform}"]


def checked_platform(value: str | None) -> str | None:
    """A policy's platform, refused unless it parses as os/arch[/variant]."""
    if value is not None:
        try:
            parse_platform(value)
        except ReferenceFormatError as exc:
            raise ValueError(exc.message) from None
    return value


#: The platform a requirement on the signed audit asks for (the audit's own, and its
#: vulnerability scan's): the gate holds an index on that platform's image.
AuditedPlatform = Annotated[
    str | None,
    Field(description="os/arch[/variant] audited"),
    AfterValidator(checked_platform),
]


class AuditRequirement(AgedRequirement):
    status: tuple[Annotated[str, AfterValidator(statuses_of("audit", AuditStatus))], ...] = Field(
        default=PASSING, min_length=1
    )
    platform: AuditedPlatform = None


AR = TypeVar("AR", bound=AgedRequirement)


@dataclass(frozen=True)
class AuditedRule(AgedRule[AR]):
    """A rule on the newest signed audit of the image (its status, or its vulnerability
    scan): of the platform asked for, no older than the maximum age."""

    predicate_type: str = AUDIT_V1

    def newest_audit(
        self,
        what: str,
        collected: Collected,
        now: datetime,
        judge: Callable[[AuditPredicate], list[str]],
        said: Callable[[AuditPredicate], str],
    ) -> list[Requirement]:
        """The requirement WHAT held by the newest signed audit: JUDGE's problems with it,
        then its platform where it is not the one asked for."""

        def judged(predicate: AuditPredicate) -> list[str]:
            return judge(predicate) + platform_problem(self.platform, predicate.platform)

        return self.newest(what, SIGNED_AUDIT, collected, now, judged, said)


@dataclass(frozen=True)
class AuditRule(AuditedRule[AuditRequirement]):
    """The newest signed audit of the image: its status one of those allowed, of the
    platform asked for, no older than the maximum age."""

    def evaluate(self, collected: Collected, now: datetime) -> list[Requirement]:
        allowed = self.requirement.status

        def judge(predicate: AuditPredicate) -> list[str]:
            return [] if predicate.status in allowed else [f"status {predicate.status}"]

        return self.newest_audit(
            f"audit status in {{{', '.join(allowed)}}}",
            collected,
            now,
            judge,
            lambda p: f"{p.status} ({p.scope})",
        )


AUDIT_POLICY = PolicyEntry[AuditRequirement](
    key="audit",
    form=AuditRequirement | None,
    rule=AuditRule,
    default=AuditRequirement,
    description="the newest signed audit's status, platform and age",
)


AUDIT = KindSpec(
    name="audit",
    details=AuditDetails,
    statuses=tuple(AuditStatus),
    failing=frozenset(s.value for s in AuditStatus if not s.accepted),
    predicate=Predicate.own(AUDIT_V1, AuditPredicate, "audit-v1.schema.json", _record),
    lock_column="audit",
    about_images=True,
    identifier_keys=("image_id",),
    policy=AUDIT_POLICY,
)
