"""Attaching a signed statement to an image, in both forms the ecosystem reads.

One envelope, stored twice: as a layer of cosign's ``sha256-<hex>.att`` tag of each subject
(what cosign, Kyverno and the policy-controller verify) and as an OCI 1.1 referrer of the
image manifest (what `oras discover` and referrers-aware registries list), the same blob
both times. The writer is imagekit's own registry client.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from imagekit.attest.cosign_tags import att_tag, attach_attestation
from imagekit.attest.dsse import DSSE_MEDIA_TYPE, sign_envelope
from imagekit.attest.signer import Signer
from imagekit.attest.statement import Subject, make_statement
from imagekit.refs import Digest, Reference
from imagekit.registry.client import RegistryClient
from imagekit.registry.manifest import OCI_MANIFEST, Descriptor
from imagekit.registry.referrers import push_referrer

PREDICATE_TYPE_ANNOTATION = "in-toto.io/predicate-type"
CREATED_ANNOTATION = "org.opencontainers.image.created"


@dataclass(frozen=True)
class Attestation:
    """What was attached: the envelope's digest, its subjects and where it is stored."""

    predicate_type: str
    envelope_digest: Digest
    subjects: tuple[Digest, ...]
    key_id: str
    stored: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "predicate_type": self.predicate_type,
            "envelope_digest": str(self.envelope_digest),
            "subjects": [str(s) for s in self.subjects],
            "key_id": self.key_id,
            "stored": list(self.stored),
        }


def _descriptor(client: RegistryClient, repo: Reference, digest: Digest) -> Descriptor:
    head = client.head_manifest(repo, str(digest))
    size = head.size
    if size is None:
        body, media_type, _ = client.get_manifest(repo, digest)
        return Descriptor(media_type, digest, len(body))
    return Descriptor(head.media_type or OCI_MANIFEST, digest, size)


def attest(
    client: RegistryClient,
    repo: Reference,
    subjects: Sequence[Digest],
    predicate_type: str,
    predicate: dict[str, Any],
    signer: Signer,
) -> Attestation:
    """Sign a statement of PREDICATE about SUBJECTS (the image's manifest digest, and its
    index's where it has one) and attach it to each subject in REPO."""
    statement = make_statement(
        tuple(Subject(repo.name, digest) for digest in subjects), predicate_type, predicate
    )
    envelope = sign_envelope(statement, signer)
    stored: list[str] = []
    for subject in subjects:
        attach_attestation(client, repo, subject, envelope, predicate_type)
        stored.append(f"{repo.name}:{att_tag(subject)}")
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for subject in subjects:
        pushed = push_referrer(
            client,
            repo,
            _descriptor(client, repo, subject),
            DSSE_MEDIA_TYPE,
            [(DSSE_MEDIA_TYPE, envelope, {PREDICATE_TYPE_ANNOTATION: predicate_type})],
            annotations={PREDICATE_TYPE_ANNOTATION: predicate_type, CREATED_ANNOTATION: created},
        )
        stored.append(f"referrer {pushed.reference} ({pushed.indexed_by})")
    return Attestation(
        predicate_type, Digest.of_bytes(envelope), tuple(subjects), signer.key_id, tuple(stored)
    )
