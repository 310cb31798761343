"""`imagekit ledger sync --key PUB`: records proved on other machines, brought home.

A final pull recorded on a cluster node, an audit made by a CI runner: each signed its
attestation beside the image. Sync reads the attestations attached to the images this
ledger names (by digest), verifies each (signed by one of the keys, naming that digest:
imagekit.attest.collect), and appends a record for each one the ledger lacks (no record
carries its envelope digest yet), of the stage's own kind, marked as imported with the key
that signed it. Nothing is ever edited; running it twice appends nothing the second time.

Imported: audit, vulnerability scans (cosign's vuln predicate), mirror verifications and
final pulls. Build provenance is not imported (a build record needs the local build's
evidence); it stays verifiable in the registry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from imagekit.attest.collect import VerifiedAttestation, collect
from imagekit.attest.keys import PublicKey, load_public_key
from imagekit.attest.predicates import (
    AUDIT_V1,
    COSIGN_VULN_V1,
    FINAL_PULL_V1,
    MIRROR_V1,
    AuditPredicate,
    FinalPullPredicate,
    MirrorPredicate,
)
from imagekit.errors import ReferenceFormatError, UsageError
from imagekit.ledger.record import (
    AuditDetails,
    AuditSummary,
    FinalPullDetails,
    MirrorDetails,
    RecordDetails,
    VulnerabilityScanDetails,
)
from imagekit.ledger.store import append_record, iter_records
from imagekit.refs import Digest, Reference, parse_reference
from imagekit.registry.client import RegistryClient
from imagekit.workspace import Workspace


@dataclass(frozen=True)
class Imported:
    seq: int
    kind: str
    image: str
    attestation: Digest
    key: str

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "kind": self.kind,
            "image": self.image,
            "attestation": str(self.attestation),
            "key": self.key,
        }


@dataclass(frozen=True)
class SyncResult:
    images: tuple[str, ...]
    imported: tuple[Imported, ...]
    already: int
    skipped: tuple[str, ...]  # attestations not imported, and why

    @property
    def ok(self) -> bool:
        return True

    def to_json(self) -> dict[str, Any]:
        return {
            "images": list(self.images),
            "imported": [i.to_json() for i in self.imported],
            "already_in_ledger": self.already,
            "skipped": list(self.skipped),
        }


def _pinned_images(workspace: Workspace, plans: Sequence[str]) -> dict[str, str | None]:
    """Every repo@digest the ledger names (of PLANS when given), with the plan it was for."""
    found: dict[str, str | None] = {}
    with iter_records(workspace.ledger_path) as records:
        for record in records:
            if plans and record.plan not in plans:
                continue
            for value in record.images.values():
                try:
                    ref = parse_reference(value)
                except ReferenceFormatError:
                    continue
                if ref.digest is not None:
                    found.setdefault(str(ref.pinned_only()), record.plan)
    return found


# The details keys that name an attestation a record made (the pipeline's push record
# names the audit's too, signed there once the image had a registry digest).
_ATTESTATION_KEYS = ("attestation", "audit_attestation", "vuln_attestation")


def _known(workspace: Workspace) -> set[str]:
    with iter_records(workspace.ledger_path) as records:
        return {
            str(record.details[key])
            for record in records
            for key in _ATTESTATION_KEYS
            if isinstance(record.details.get(key), str)
        }


def _record_of(
    attestation: VerifiedAttestation, marked: str
) -> tuple[str, str, str, RecordDetails, dict[str, str]] | None:
    """(kind, status, scope, details, extra images) for an attestation, or None."""
    predicate = attestation.statement.predicate
    digest = str(attestation.envelope_digest)
    kind = attestation.predicate_type
    try:
        if kind == AUDIT_V1:
            audit = AuditPredicate.model_validate(predicate)
            details: RecordDetails = AuditDetails(
                attestation=digest,
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
            return "audit", audit.status, audit.scope, details, {}
        if kind == FINAL_PULL_V1:
            pull = FinalPullPredicate.model_validate(predicate)
            source = pull.runtime if pull.runtime in ("engine", "containerd") else None
            details = FinalPullDetails(
                attestation=digest,
                imported=marked,
                source=source,
                image_id=pull.image_id,
                where=pull.node,
                namespace=pull.namespace,
            )
            return "final-pull", pull.status, pull.scope, details, {}
        if kind == MIRROR_V1:
            mirror = MirrorPredicate.model_validate(predicate)
            details = MirrorDetails(attestation=digest, imported=marked, message=mirror.message)
            source = f"{mirror.source.reference}"
            return "mirror-verify", mirror.verdict, mirror.scope, details, {"source": source}
        if kind == COSIGN_VULN_V1:
            result = (predicate.get("scanner") or {}).get("result") or {}
            status = str(result.get("status") or "unknown")
            details = VulnerabilityScanDetails(attestation=digest, imported=marked)
            scope = "a vulnerability scan imported from its signed attestation"
            return "vulnerability-scan", status, scope, details, {}
    except ValidationError:
        return None
    return None


def sync_ledger(
    workspace: Workspace,
    key_paths: Sequence[Path],
    plans: Sequence[str] = (),
    *,
    insecure: Sequence[str] = (),
) -> SyncResult:
    if not key_paths:
        raise UsageError("give at least one --key PUB", hint="imagekit ledger sync --key ci.pub")
    keys: tuple[PublicKey, ...] = tuple(load_public_key(path) for path in key_paths)
    images = _pinned_images(workspace, plans)
    known = _known(workspace)
    imported: list[Imported] = []
    skipped: list[str] = []
    already = 0
    with RegistryClient(insecure=insecure) as client:
        for image, plan in images.items():
            ref = parse_reference(image)
            assert ref.digest is not None  # noqa: S101 - _pinned_images keeps pinned ones
            collected = collect(client, Reference(ref.registry, ref.repository), ref.digest, keys)
            for attestation in collected.verified:
                digest = str(attestation.envelope_digest)
                if digest in known:
                    already += 1
                    continue
                marked = f"imported: signed by {attestation.key.key_id} ({attestation.key.source})"
                made = _record_of(attestation, marked)
                if made is None:
                    skipped.append(f"{digest} ({attestation.predicate_type}): not imported")
                    continue
                kind, status, scope, details, extra = made
                record = append_record(
                    workspace,
                    kind,
                    plan=plan,
                    images={"image": image, **extra},
                    status=status,
                    scope=f"{scope} [{marked}; attestation {digest}]",
                    details=details,
                )
                known.add(digest)
                imported.append(
                    Imported(record.seq, kind, image, attestation.envelope_digest, marked)
                )
    return SyncResult(tuple(images), tuple(imported), already, tuple(skipped))
