"""Attaching a signed statement to an image, in both forms the ecosystem reads.

One envelope, stored twice: as a layer of cosign's ``sha256-<hex>.att`` tag of each subject
(what cosign, Kyverno and the policy-controller verify) and as an OCI 1.1 referrer of the
image manifest (what `oras discover` and referrers-aware registries list), the same blob
both times. The writer is imagekit's own registry client.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from imagekit.attest.cosign_tags import att_tag, attach_attestation
from imagekit.attest.dsse import DSSE_MEDIA_TYPE, sign_envelope
from imagekit.attest.signer import Signer
from imagekit.attest.statement import Subject, make_statement
from imagekit.errors import NotAttested, RegistryError
from imagekit.refs import Digest, Platform, Reference
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


def _store(
    client: RegistryClient,
    repo: Reference,
    subjects: Sequence[Digest],
    predicate_type: str,
    envelope: bytes,
    key_id: str,
) -> Attestation:
    """Attach a signed ENVELOPE to each subject in REPO, in both forms."""
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def cosign_form(subject: Digest) -> str:
        attach_attestation(client, repo, subject, envelope, predicate_type)
        return f"{repo.name}:{att_tag(subject)}"

    def referrer_form(subject: Digest) -> str:
        pushed = push_referrer(
            client,
            repo,
            _descriptor(client, repo, subject),
            DSSE_MEDIA_TYPE,
            [(DSSE_MEDIA_TYPE, envelope, {PREDICATE_TYPE_ANNOTATION: predicate_type})],
            annotations={PREDICATE_TYPE_ANNOTATION: predicate_type, CREATED_ANNOTATION: created},
        )
        return f"referrer {pushed.reference} ({pushed.indexed_by})"

    # The forms are independent tags: written side by side, each its own read-merge-put.
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(cosign_form, s) for s in subjects]
        futures += [pool.submit(referrer_form, s) for s in subjects]
        stored = [future.result() for future in futures]
    return Attestation(
        predicate_type, Digest.of_bytes(envelope), tuple(subjects), key_id, tuple(stored)
    )


def _signed(
    repo: Reference,
    subjects: Sequence[Digest],
    predicate_type: str,
    predicate: dict[str, Any],
    signer: Signer,
) -> bytes:
    statement = make_statement(
        tuple(Subject(repo.name, digest) for digest in subjects), predicate_type, predicate
    )
    return sign_envelope(statement, signer)


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
    envelope = _signed(repo, subjects, predicate_type, predicate, signer)
    return _store(client, repo, subjects, predicate_type, envelope, signer.key_id)


@dataclass(frozen=True)
class AttestOutcome:
    """What a stage's attestation came to: stored (with its digest) or not, and why not.

    A stage that was asked to attest and could not keeps its verdict, evidence and record;
    the record says "not attested" with this reason and the command ends exit 3.
    """

    attestation: Attestation | None
    problem: str | None = None

    @property
    def ledger_value(self) -> str:
        if self.attestation is not None:
            return str(self.attestation.envelope_digest)
        return f"not attested: {self.problem}"

    def raise_unless_stored(self, result: object) -> None:
        """Raise NotAttested (exit 3) carrying the stage's RESULT when nothing was stored."""
        if self.attestation is None:
            error = NotAttested(
                f"not attested: {self.problem}",
                cause=self.problem or "",
                hint="the verdict, its evidence and its record are kept; attest again once "
                "the registry takes pushes",
            )
            error.result = result
            raise error

    def to_json(self) -> dict[str, Any]:
        if self.attestation is not None:
            return {"attested": True, **self.attestation.to_json()}
        return {"attested": False, "problem": self.problem}


def attest_reference(
    signer: Signer,
    reference: Reference,
    predicate_type: str,
    predicate: dict[str, Any],
    *,
    platform: Platform | None = None,
    client: RegistryClient | None = None,
) -> AttestOutcome:
    """Attest the image REFERENCE names (pinned or tagged) in its registry: the subjects are
    its manifest digest and, where it is an index, the index digest too. A registry that
    does not answer or refuses the push is an outcome, not an exception: the caller records
    it and ends exit 3. (Signed and attached at once: a stage that records its verdict
    signs with :func:`prepare_reference`, records, then attaches.)"""
    prepared = prepare_reference(
        signer, reference, predicate_type, predicate, platform=platform, client=client
    )
    return prepared.attach(client)


@dataclass(frozen=True)
class Prepared:
    """A statement signed here and not yet attached: what a record names BEFORE anything is
    pushed, so that nothing reaches the registry unless its record was written (sign, then
    record, then :meth:`attach`). PROBLEM says why there is nothing to attach (the registry
    could not say which digests to attest); the record then says "not attested: WHY"."""

    repo: Reference | None
    subjects: tuple[Digest, ...]
    predicate_type: str
    envelope: bytes | None
    key_id: str
    problem: str | None = None

    @classmethod
    def nothing(cls, predicate_type: str, key_id: str, problem: str) -> Prepared:
        """Nothing to attach, and PROBLEM says why (the record says "not attested: WHY")."""
        return cls(None, (), predicate_type, None, key_id, problem)

    @property
    def envelope_digest(self) -> Digest | None:
        return Digest.of_bytes(self.envelope) if self.envelope is not None else None

    @property
    def ledger_value(self) -> str:
        digest = self.envelope_digest
        return str(digest) if digest is not None else f"not attested: {self.problem}"

    def attach(self, client: RegistryClient | None = None) -> AttestOutcome:
        """Attach the envelope (once its record is written); a registry fault is an
        outcome, as for :func:`attest_reference`."""
        if self.envelope is None or self.repo is None:
            return AttestOutcome(None, self.problem)
        envelope, repo = self.envelope, self.repo
        return _outcome(
            client,
            lambda c: _store(c, repo, self.subjects, self.predicate_type, envelope, self.key_id),
        )


def prepare_reference(
    signer: Signer,
    reference: Reference,
    predicate_type: str,
    predicate: dict[str, Any],
    *,
    platform: Platform | None = None,
    client: RegistryClient | None = None,
) -> Prepared:
    """Sign a statement of PREDICATE about the image REFERENCE names, attaching nothing: its
    subjects are resolved in the registry (a registry that does not answer is a Prepared
    with a problem, not an exception) and the envelope is signed here."""
    repo = Reference(reference.registry, reference.repository)
    own = client is None
    client = client or RegistryClient()
    try:
        resolved = client.resolve(reference, platform)
    except RegistryError as exc:
        return Prepared.nothing(predicate_type, signer.key_id, exc.message)
    finally:
        if own:
            client.close()
    subjects = [resolved.manifest_digest]
    if resolved.index_digest is not None:
        subjects.append(resolved.index_digest)
    return prepare_subjects(signer, repo, subjects, predicate_type, predicate)


def prepare_subjects(
    signer: Signer,
    repo: Reference,
    subjects: Sequence[Digest],
    predicate_type: str,
    predicate: dict[str, Any],
) -> Prepared:
    """Sign a statement of PREDICATE about SUBJECTS, digests already known in REPO (an index
    and its platforms' manifests), attaching nothing: what a record names before anything
    is pushed (then :meth:`Prepared.attach`)."""
    envelope = _signed(repo, subjects, predicate_type, predicate, signer)
    return Prepared(repo, tuple(subjects), predicate_type, envelope, signer.key_id)


def _outcome(
    client: RegistryClient | None, store: Callable[[RegistryClient], Attestation]
) -> AttestOutcome:
    """What storing came to: a registry that does not answer or refuses is an outcome, never
    an exception; a client opened here for it is closed here."""
    own = client is None
    client = client or RegistryClient()
    try:
        return AttestOutcome(store(client))
    except RegistryError as exc:
        return AttestOutcome(None, exc.message)
    finally:
        if own:
            client.close()
