"""The predicate types imagekit writes, as models: written from them, read back through them.

``AUDIT_V1`` is imagekit's own type (no published type carries an audit's checks, scope,
profile and evidence digests); its JSON schema is committed as
imagekit/attest/schemas/audit-v1.schema.json and a unit test holds it equal to this model's,
so the document others read and the code that writes it cannot drift apart. The URI names
the type; it is not promised to resolve.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

AUDIT_V1 = "https://imagekit.dev/attestation/audit/v1"
SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"
POLICY_V1 = "https://imagekit.dev/policy/v1"
MIRROR_V1 = "https://imagekit.dev/attestation/mirror-verification/v1"
FINAL_PULL_V1 = "https://imagekit.dev/attestation/final-pull/v1"
#: cosign's vulnerability scan predicate (`cosign verify-attestation --type vuln`).
COSIGN_VULN_V1 = "https://cosign.sigstore.dev/attestation/vuln/v1"
SCHEMAS = Path(__file__).with_name("schemas")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AuditCheck(_Model):
    name: str
    status: str = Field(description="PASS, FAIL, DEFERRED, SKIPPED, ... as the probe said")
    kind: str
    proves: str = Field(description="what this check's pass proves (its scope)")


class AuditVulnerabilities(_Model):
    status: str = Field(description="clean, findings, unknown or skipped")
    reason: str | None = None
    audited: int | None = None
    findings: int = Field(description="known vulnerabilities found")
    fixable: int = Field(description="of them, those with a fixed version")
    finding_ids: list[str]
    database: dict[str, Any] | None = Field(
        default=None, description="the offline OSV export matched against, when one was"
    )


class AuditPredicate(_Model):
    """What `imagekit audit` proved about the subject image, signed."""

    status: str = Field(description="CPU_PASS, CPU_PASS_GPU_CLI_DEFERRED, CPU_CHECK_INCOMPLETE")
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


class MirroredImage(_Model):
    reference: str
    manifest_digest: str
    index_digest: str | None = None
    config_digest: str
    platform: str | None = None


class MirroredPlatform(_Model):
    """One platform of a mirrored index: its two images, its verdict and its diffIDs."""

    platform: str = Field(description="os/arch[/variant]")
    source: MirroredImage
    destination: MirroredImage
    verdict: str = Field(description="identical or content-identical")
    diff_ids: list[str] = Field(description="the diffIDs of DST's layers, each hashed here")


class MirrorPredicate(_Model):
    """What `imagekit mirror` proved: DST (the subject) holds SRC's content."""

    source: MirroredImage
    destination: MirroredImage
    verdict: str = Field(description="identical or content-identical (only these attest)")
    message: str
    diff_ids: list[str] = Field(description="the diffIDs of DST's layers, each hashed here")
    scope: str
    verified_at: str = Field(description="RFC 3339 UTC")
    imagekit_version: str
    platforms: list[MirroredPlatform] | None = Field(
        default=None,
        description="an index verified platform by platform: each platform (source, "
        "destination, verdict and diffIDs above are then its first platform's, and the "
        "verdict the index's, the worst of them); absent for one image",
    )


class FinalPullPredicate(_Model):
    """What a final pull proved on a target: which runtime and store hold which image ID."""

    status: str = Field(description="verified (only verified pulls attest)")
    scope: str
    runtime: str = Field(description="engine or containerd")
    node: str = Field(description="the target's label (--where, default the host name)")
    image_id: str | None = None
    store: str | None = Field(
        default=None, description="the engine's image store, or the containerd snapshotter"
    )
    namespace: str | None = Field(default=None, description="containerd's namespace")
    runtime_version: str | None = None
    checks: list[dict[str, Any]]
    pulled_at: str = Field(description="RFC 3339 UTC")
    imagekit_version: str


def schema_document(model: type[BaseModel], predicate_type: str) -> dict[str, Any]:
    """The JSON schema committed for a predicate model."""
    document = model.model_json_schema()
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    document["$id"] = predicate_type
    return document


def schema_text(model: type[BaseModel], predicate_type: str) -> str:
    return json.dumps(schema_document(model, predicate_type), indent=2, sort_keys=True) + "\n"
