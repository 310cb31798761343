"""Reading back the attestations attached to an image, each verified or named as skipped.

The source is cosign's ``sha256-<hex>.att`` tag of the digest asked about, as cosign reads
it, so that imagekit's gate and cosign decide from the same documents (an attestation only
in the referrers list, with the .att tag gone, is not trusted by either). Every layer is
untrusted until: it is a DSSE envelope (else skipped and named), one of the given keys
signed its PAE, its payload is an in-toto statement, and a subject of that statement is the
digest asked about (an attestation moved onto another image names the other digest).

Anyone who may push to the repository may add layers to the tag, so no layer can stop the
reading: a layer whose blob cannot be read (over the envelope limit, a negative,
huge or wrong size, bytes that do not hash to its digest, a blob the registry does not
have) is skipped with its reason like an envelope that does not parse, and the decision is
made on the rest. A blob is fetched once however many layers name it, and the repeats are
said once. Only a registry that cannot be asked at all (unreachable, retries exhausted,
refused credentials) stops it: then nothing was read, and the gate says so (exit 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from imagekit.attest.cosign_tags import TagLayer, att_tag, tag_layers
from imagekit.attest.dsse import DSSE_MEDIA_TYPE, INTOTO_PAYLOAD_TYPE, EnvelopeError, parse_envelope
from imagekit.attest.keys import PublicKey
from imagekit.attest.statement import Statement, StatementError, parse_statement
from imagekit.errors import CheckFailed, RegistryNotFound, RegistryProtocolError
from imagekit.refs import Digest, Reference
from imagekit.registry.client import RegistryClient
from imagekit.registry.manifest import Descriptor

#: The largest envelope read: imagekit's own are a few KiB, an SBOM's a few MiB.
MAX_ENVELOPE = 4 << 20


@dataclass(frozen=True)
class VerifiedAttestation:
    envelope_digest: Digest
    statement: Statement
    key: PublicKey
    #: every key given that signed it (``key`` is the first); a policy trusts keys per
    #: requirement, so an envelope signed by two keys counts for what either may sign
    signers: tuple[PublicKey, ...] = ()

    @property
    def predicate_type(self) -> str:
        return self.statement.predicate_type

    def signed_by_any(self, key_ids: frozenset[str]) -> bool:
        """Whether one of the keys of KEY_IDS signed it."""
        return any(k.key_id in key_ids for k in self.signers or (self.key,))

    def to_json(self) -> dict[str, Any]:
        return {
            "envelope_digest": str(self.envelope_digest),
            "predicate_type": self.predicate_type,
            "key": self.key.source,
            "key_id": self.key.key_id,
        }


@dataclass(frozen=True)
class Skipped:
    layer: str  # the layer's digest, as its entry writes it
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"layer": self.layer, "reason": self.reason}


@dataclass(frozen=True)
class Collected:
    source: str
    verified: tuple[VerifiedAttestation, ...]
    skipped: tuple[Skipped, ...]

    def trusting(self, key_ids: frozenset[str] | None) -> Collected:
        """The attestations one of KEY_IDS signed (all of them for None): what a
        requirement whose policy names its keys may read."""
        if key_ids is None:
            return self
        kept = tuple(a for a in self.verified if a.signed_by_any(key_ids))
        return Collected(self.source, kept, self.skipped)


def collect(
    client: RegistryClient, repo: Reference, digest: Digest, keys: Sequence[PublicKey]
) -> Collected:
    """The attestations about DIGEST in REPO that one of KEYS signed, and what was skipped."""
    tag = att_tag(digest)
    verified: list[VerifiedAttestation] = []
    skipped: list[Skipped] = []
    for layer, repeats in _unique(tag_layers(client, repo, tag), skipped):
        if repeats:
            skipped.append(
                Skipped(
                    str(layer.digest),
                    f"named by {repeats} more layer(s) of the tag: the blob was read once",
                )
            )
        found = _read(client, repo, layer, digest, tuple(keys))
        if isinstance(found, VerifiedAttestation):
            verified.append(found)
        else:
            skipped.append(Skipped(str(layer.digest), found))
    return Collected(f"{repo.name}:{tag}", tuple(verified), tuple(skipped))


def _unique(layers: Sequence[TagLayer], skipped: list[Skipped]) -> list[tuple[Descriptor, int]]:
    """Each blob the tag's layers name, once (its first DSSE entry, else its first), with
    how many more layers name it; a malformed entry goes to SKIPPED with its reason."""
    by_digest: dict[Digest, list[Descriptor]] = {}
    for layer in layers:
        if layer.descriptor is None:
            skipped.append(Skipped(layer.named, f"layer {layer.position}: {layer.problem}"))
            continue
        by_digest.setdefault(layer.descriptor.digest, []).append(layer.descriptor)
    chosen = []
    for same in by_digest.values():
        dsse = [d for d in same if d.media_type == DSSE_MEDIA_TYPE]
        chosen.append(((dsse or same)[0], len(same) - 1))
    return chosen


def _read(
    client: RegistryClient,
    repo: Reference,
    layer: Descriptor,
    digest: Digest,
    keys: tuple[PublicKey, ...],
) -> VerifiedAttestation | str:
    """LAYER verified as an attestation about DIGEST, or why it is skipped."""
    if layer.media_type != DSSE_MEDIA_TYPE:
        return f"media type {layer.media_type}, not DSSE"
    if layer.size > MAX_ENVELOPE:
        return f"{layer.size} bytes, over the {MAX_ENVELOPE}-byte limit for an envelope: not read"
    try:
        data = client.fetch_blob(repo, layer, limit=MAX_ENVELOPE)
    except (CheckFailed, RegistryNotFound, RegistryProtocolError) as exc:
        # The blob itself is wrong or missing: this layer says nothing; the rest still count.
        return f"its blob cannot be read: {exc.message}"
    try:
        envelope = parse_envelope(data)
    except EnvelopeError as exc:
        return str(exc)
    if envelope.payload_type != INTOTO_PAYLOAD_TYPE:
        return f"payload type {envelope.payload_type}"
    signers = envelope.signers(keys)
    if not signers:
        return "not signed by any of the keys given"
    try:
        statement = parse_statement(envelope.payload)
    except StatementError as exc:
        return str(exc)
    if not statement.names(digest):
        named = ", ".join(str(s.digest) for s in statement.subjects) or "nothing"
        return f"its subject is {named}, not {digest}: not about this image"
    return VerifiedAttestation(layer.digest, statement, signers[0], signers)
