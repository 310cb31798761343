"""Reading back the attestations attached to an image, each verified or named as skipped.

The source is cosign's ``sha256-<hex>.att`` tag of the digest asked about, as cosign reads
it, so that imagekit's gate and cosign decide from the same documents (an attestation only
in the referrers list, with the .att tag gone, is not trusted by either). Every layer is
untrusted until: it is a DSSE envelope (else skipped and named), one of the given keys
signed its PAE, its payload is an in-toto statement, and a subject of that statement is the
digest asked about (an attestation moved onto another image names the other digest).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from imagekit.attest.cosign_tags import att_tag, attached_layers
from imagekit.attest.dsse import DSSE_MEDIA_TYPE, INTOTO_PAYLOAD_TYPE, EnvelopeError, parse_envelope
from imagekit.attest.keys import PublicKey
from imagekit.attest.statement import Statement, StatementError, parse_statement
from imagekit.refs import Digest, Reference
from imagekit.registry.client import RegistryClient

_MAX_ENVELOPE = 4 << 20


@dataclass(frozen=True)
class VerifiedAttestation:
    envelope_digest: Digest
    statement: Statement
    key: PublicKey

    @property
    def predicate_type(self) -> str:
        return self.statement.predicate_type

    def to_json(self) -> dict[str, Any]:
        return {
            "envelope_digest": str(self.envelope_digest),
            "predicate_type": self.predicate_type,
            "key": self.key.source,
            "key_id": self.key.key_id,
        }


@dataclass(frozen=True)
class Skipped:
    layer: Digest
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"layer": str(self.layer), "reason": self.reason}


@dataclass(frozen=True)
class Collected:
    source: str
    verified: tuple[VerifiedAttestation, ...]
    skipped: tuple[Skipped, ...]


def collect(
    client: RegistryClient, repo: Reference, digest: Digest, keys: Sequence[PublicKey]
) -> Collected:
    """The attestations about DIGEST in REPO that one of KEYS signed, and what was skipped."""
    tag = att_tag(digest)
    verified: list[VerifiedAttestation] = []
    skipped: list[Skipped] = []
    for layer in attached_layers(client, repo, tag):
        if layer.media_type != DSSE_MEDIA_TYPE:
            skipped.append(Skipped(layer.digest, f"media type {layer.media_type}, not DSSE"))
            continue
        data = client.fetch_blob(repo, layer, limit=_MAX_ENVELOPE)
        try:
            envelope = parse_envelope(data)
        except EnvelopeError as exc:
            skipped.append(Skipped(layer.digest, str(exc)))
            continue
        if envelope.payload_type != INTOTO_PAYLOAD_TYPE:
            skipped.append(Skipped(layer.digest, f"payload type {envelope.payload_type}"))
            continue
        key = envelope.signed_by(tuple(keys))
        if key is None:
            skipped.append(Skipped(layer.digest, "not signed by any of the keys given"))
            continue
        try:
            statement = parse_statement(envelope.payload)
        except StatementError as exc:
            skipped.append(Skipped(layer.digest, str(exc)))
            continue
        if not statement.names(digest):
            named = ", ".join(str(s.digest) for s in statement.subjects) or "nothing"
            skipped.append(
                Skipped(layer.digest, f"its subject is {named}, not {digest}: not about this image")
            )
            continue
        verified.append(VerifiedAttestation(layer.digest, statement, key))
    return Collected(f"{repo.name}:{tag}", tuple(verified), tuple(skipped))
