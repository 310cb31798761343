"""The push's kind: an image pushed to a registry by digest, and the SLSA v1 provenance of
its build signed onto it (``--sign-key``), which a policy's ``provenance`` may require.

Provenance is a published predicate (https://slsa.dev/spec/v1.0/provenance): it has no
schema of imagekit's, and ``ledger sync`` does not import it (a build record needs the
build's own evidence); it stays verifiable in the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic import Field

from imagekit.attest.rules import Requirement
from imagekit.kinds.details import RecordDetails, attestation_field
from imagekit.kinds.spec import (
    KindSpec,
    PolicyEntry,
    Predicate,
    RequirementRule,
    TrustedRequirement,
)

if TYPE_CHECKING:
    from imagekit.attest.collect import Collected

SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"


class PushStatus(StrEnum):
    PUSHED = "pushed"


class CopyDetails(RecordDetails):
    """What a registry-to-registry push moved (imagekit.registry.upload.CopyResult)."""

    source: str
    destination: str
    digest: str
    media_type: str
    manifests: int
    blobs_existing: int
    blobs_mounted: int
    blobs_uploaded: int
    blobs_skipped: int
    bytes_uploaded: int
    chunk_resumes: int
    upload_restarts: int


class PushDetails(RecordDetails):
    attestation: str | None = attestation_field("the SLSA v1 provenance")
    audit_attestation: str | None = Field(
        default=None,
        description="`imagekit pipeline --sign-key`: the audit made before the push, signed "
        "onto the pushed digest (its config the audited image's): envelope digest, or "
        "'not attested: WHY'",
    )
    vuln_attestation: str | None = Field(
        default=None,
        description="the same audit's vulnerability scan (cosign's vuln predicate)",
    )
    manifest_digest: str | None = None
    config_digest: str | None = None
    index_digest: str | None = Field(default=None, description="`build --index`: the tag's")
    transfer: CopyDetails | None = Field(
        default=None, description="the registry builder's push: blobs mounted, uploaded, kept"
    )


class ProvenanceRequirement(TrustedRequirement):
    """A build's provenance: a fact about how the image was made, which no later build can
    supersede, so it has no maximum age (a rebuild is another image)."""

    plan: str | None = None
    base: str | None = Field(default=None, description="the base image's manifest digest")


@dataclass(frozen=True)
class ProvenanceRule(RequirementRule[ProvenanceRequirement]):
    """A signed SLSA v1 provenance from imagekit build, of the plan and on the base named."""

    predicate_type: str = SLSA_PROVENANCE_V1

    def evaluate(self, collected: Collected, now: datetime) -> list[Requirement]:
        rule = self.requirement
        parts = [f"plan {rule.plan}" if rule.plan else "", f"base {rule.base}" if rule.base else ""]
        name = "provenance from " + " on ".join(p for p in parts if p)
        reasons = []
        for attestation in collected.verified:
            if attestation.predicate_type != SLSA_PROVENANCE_V1:
                continue
            definition = attestation.statement.predicate.get("buildDefinition") or {}
            parameters = definition.get("externalParameters") or {}
            plan = (parameters.get("plan") or {}).get("name")
            bases = {
                f"sha256:{dep.get('digest', {}).get('sha256')}"
                for dep in definition.get("resolvedDependencies") or []
                if isinstance(dep, dict)
            }
            problems = []
            if rule.plan and plan != rule.plan:
                problems.append(f"plan {plan}")
            if rule.base and rule.base not in bases:
                problems.append("another base")
            if not problems:
                return [Requirement(name, True, "SLSA v1 provenance", attestation.envelope_digest)]
            reasons.append(f"{attestation.envelope_digest.short}: {', '.join(problems)}")
        return [Requirement(name, False, "; ".join(reasons) or "no signed SLSA v1 provenance")]


PROVENANCE_POLICY = PolicyEntry[ProvenanceRequirement](
    key="provenance", form=ProvenanceRequirement | None, rule=ProvenanceRule
)


PUSH = KindSpec(
    name="push",
    details=PushDetails,
    statuses=(PushStatus.PUSHED,),
    predicate=Predicate(SLSA_PROVENANCE_V1),
    identifier_keys=("manifest_digest", "config_digest"),
    policy=PROVENANCE_POLICY,
)
