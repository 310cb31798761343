"""The gate: does the registry hold signed proof that this image meets the policy?

`imagekit verify REF --key PUB` decides from the registry alone (no ledger, no engine): it
resolves REF to the digest it names, reads that digest's attestations (cosign's ``.att``
tag, as cosign reads it), keeps those signed by one of the keys and naming this digest as
their subject (imagekit.attest.collect), and holds each requirement of the policy against
them. Every requirement that does not hold is named with why; an attestation that was not
trusted is named with why it was skipped. The claims are trusted as far as the keys are:
the gate proves who signed what about which digest, not that the signer was right.

An index is held to the policy image by image: each platform's manifest on the attestations
naming that manifest (through its own mirror binding where it has one), and the index holds
only when every image does (the images of the policy's audit platform, where it names one).
An attestation naming the index is about one of its images at most (an audit is of one
platform), so it never stands in for another platform's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from imagekit.attest.collect import Collected, Skipped, VerifiedAttestation, collect
from imagekit.attest.keys import PublicKey, load_public_key
from imagekit.attest.policy import DEFAULT_POLICY, load_policy, rules
from imagekit.attest.rules import Requirement
from imagekit.errors import UsageError
from imagekit.kinds.mirror import BINDING_VERDICTS, MIRROR_V1, MirrorPredicate
from imagekit.refs import Digest, Platform, Reference, parse_platform, parse_reference
from imagekit.registry.client import RegistryClient
from imagekit.registry.manifest import INDEX_TYPES, Descriptor, ImageIndex, parse_manifest
from imagekit.registry.resolve import index_images


@dataclass(frozen=True)
class GateResult:
    reference: str
    digest: Digest
    policy: str
    requirements: tuple[Requirement, ...]
    verified: tuple[VerifiedAttestation, ...]
    skipped: tuple[Skipped, ...]
    source: str
    keys: tuple[str, ...]
    binding: str | None = None  # "content-identical to SRC@DIGEST (attestation ...)"
    #: an index: the platforms whose images were held to the policy, each on its own
    platforms: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return bool(self.requirements) and all(r.held for r in self.requirements)

    @property
    def exit_code(self) -> int:
        """0 when the policy holds, 1 when a requirement does not (each is named)."""
        return 0 if self.ok else 1

    @property
    def scope(self) -> str:
        through = (
            f"; through a signed mirror binding: {self.binding}, the source's attestations "
            "count for this digest"
            if self.binding
            else ""
        )
        each = (
            f"an index, each of its images held to the policy on its own attestations "
            f"({', '.join(self.platforms)}): "
            if self.platforms
            else ""
        )
        return (
            f"{each}decided from the registry alone: {len(self.verified)} attestation(s) in "
            f"{self.source} signed by {len(self.keys)} key(s) given{through}; "
            "no ledger, no engine; a signed claim is trusted as far as its key"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "digest": str(self.digest),
            "ok": self.ok,
            "policy": self.policy,
            "scope": self.scope,
            "requirements": [r.to_json() for r in self.requirements],
            "attestations": [a.to_json() for a in self.verified],
            "skipped": [s.to_json() for s in self.skipped],
            "keys": list(self.keys),
            "binding": self.binding,
            **({"platforms": list(self.platforms)} if self.platforms else {}),
        }


def verify_image(
    reference: str,
    key_paths: Sequence[Path],
    policy_path: Path | None = None,
    *,
    insecure: Sequence[str] = (),
    now: datetime | None = None,
) -> GateResult:
    """Hold the image REFERENCE names to the policy, from the attestations in its registry."""
    if not key_paths:
        raise UsageError("give at least one --key PUB", hint="imagekit verify REF --key cosign.pub")
    keys: tuple[PublicKey, ...] = tuple(load_public_key(path) for path in key_paths)
    policy = load_policy(policy_path) if policy_path is not None else DEFAULT_POLICY
    ref = parse_reference(reference)
    now = now or datetime.now(UTC)
    with RegistryClient(insecure=insecure) as client:
        if ref.digest is not None:
            digest = ref.digest
            head = client.head_manifest(ref, str(digest))  # or RegistryNotFound (exit 3)
        else:
            head = client.head_manifest(ref, ref.identifier)
            digest = head.digest
        repo = Reference(ref.registry, ref.repository)
        is_index = head.media_type in INDEX_TYPES
        images = _index_images(client, ref, digest, policy) if is_index else None
        if images is None:
            collected = collect(client, repo, digest, keys)
            binding, collected = _through_binding(client, collected, digest, keys)
            requirements = _requirements(policy, collected, now)
        else:
            requirements, collected, binding = _each_image(client, repo, images, keys, policy, now)
    return GateResult(
        reference=str(ref),
        digest=digest,
        policy=str(policy_path) if policy_path else "default (an audit that passed)",
        requirements=tuple(requirements),
        verified=collected.verified,
        skipped=collected.skipped,
        source=collected.source,
        keys=tuple(key.source for key in keys),
        binding=binding,
        platforms=tuple(str(platform) for platform, _ in images or ()),
    )


def _requirements(policy: BaseModel, collected: Collected, now: datetime) -> list[Requirement]:
    """Every rule of the policy held against one image's attestations, in order."""
    return [found for rule in rules(policy) for found in rule.evaluate(collected, now)]


def _wanted_platform(policy: BaseModel) -> str | None:
    """The platform a rule of the policy requires (an index is then held on that image)."""
    return next((rule.platform for rule in rules(policy) if rule.platform), None)


def _index_images(
    client: RegistryClient, ref: Reference, digest: Digest, policy: BaseModel
) -> list[tuple[Platform, Digest]]:
    """The index's images (attestation manifests are none), by platform; only the audit
    platform's where the policy names one (an index without one: the caller says so)."""
    body, media_type, _ = client.get_manifest(ref, digest)
    index = parse_manifest(
        body, media_type, registry=ref.registry, repository=ref.repository, digest=str(digest)
    )
    assert isinstance(index, ImageIndex)  # noqa: S101 - parse_manifest's contract
    images = [
        (entry.platform, entry.digest)
        for entry in index_images(Descriptor.from_model(m) for m in index.manifests)
        if entry.platform is not None
    ]
    wanted = _wanted_platform(policy)
    if wanted:
        want = parse_platform(wanted)
        images = [
            (platform, d)
            for platform, d in images
            if want.matches(platform.os, platform.architecture, platform.variant)
        ]
    return images


def _each_image(
    client: RegistryClient,
    repo: Reference,
    images: list[tuple[Platform, Digest]],
    keys: tuple[PublicKey, ...],
    policy: BaseModel,
    now: datetime,
) -> tuple[list[Requirement], Collected, str | None]:
    """Every image of an index held to the policy on its own attestations; each requirement
    named with its platform. An index with no image to hold is a requirement not held."""
    if not images:
        wanted = _wanted_platform(policy)
        why = f"the index has no {wanted} image" if wanted else "the index lists no image"
        return (
            [Requirement("an image to hold to the policy", False, why)],
            Collected("the index", (), ()),
            None,
        )
    requirements: list[Requirement] = []
    verified: dict[Digest, VerifiedAttestation] = {}
    skipped: list[Skipped] = []
    sources: list[str] = []
    bindings: list[str] = []
    for platform, manifest in images:
        collected = collect(client, repo, manifest, keys)
        binding, collected = _through_binding(client, collected, manifest, keys)
        requirements += [
            replace(r, name=f"{platform}: {r.name}") for r in _requirements(policy, collected, now)
        ]
        for attestation in collected.verified:
            verified.setdefault(attestation.envelope_digest, attestation)
        skipped += collected.skipped
        sources.append(collected.source)
        if binding:
            bindings.append(f"{platform}: {binding}")
    merged = Collected("; ".join(dict.fromkeys(sources)), tuple(verified.values()), tuple(skipped))
    return requirements, merged, "; ".join(bindings) or None


def _through_binding(
    client: RegistryClient, collected: Collected, digest: Digest, keys: tuple[PublicKey, ...]
) -> tuple[str | None, Collected]:
    """Where a signed mirror attestation binds DIGEST to a source (identical or
    content-identical), the source's attestations join this digest's: the mirror holds the
    same content. Only the first binding found is followed, one level deep."""
    for attestation in collected.verified:
        if attestation.predicate_type != MIRROR_V1:
            continue
        try:
            binding = MirrorPredicate.model_validate(attestation.statement.predicate)
        except ValidationError:
            continue
        if binding.verdict not in BINDING_VERDICTS:
            continue
        followed = _followed(binding, digest)
        if followed is None:
            continue
        verdict, source, source_digest = followed
        theirs = collect(client, Reference(source.registry, source.repository), source_digest, keys)
        said = (
            f"{verdict} to {source.name}@{source_digest} "
            f"(attestation {attestation.envelope_digest.short})"
        )
        merged = Collected(
            f"{collected.source} and {theirs.source}",
            collected.verified + theirs.verified,
            collected.skipped + theirs.skipped,
        )
        return said, merged
    return None, collected


def _followed(binding: MirrorPredicate, digest: Digest) -> tuple[str, Reference, Digest] | None:
    """What BINDING vouches DIGEST is the same content as: (verdict, source repository,
    source digest), or None where it does not name DIGEST.

    An image's manifest is followed to its own source image, never to the source's index:
    the index's attestations may be about another platform. An index is followed to the
    source index only by a binding of the whole index (one that lists its platforms): a
    binding of one image, or one written before imagekit bound indexes whole (its first
    platform's), says nothing of the index's other platforms."""
    wanted = str(digest)
    pairs = [(p.verdict, p.source, p.destination) for p in binding.platforms or ()]
    if binding.platforms is None:
        pairs.append((binding.verdict, binding.source, binding.destination))
    for verdict, source, destination in pairs:
        if destination.manifest_digest == wanted and verdict in BINDING_VERDICTS:
            return verdict, parse_reference(source.reference), Digest(source.manifest_digest)
    whole = binding.platforms is not None
    if whole and wanted == binding.destination.index_digest:
        source_digest = binding.source.index_digest or binding.source.manifest_digest
        return binding.verdict, parse_reference(binding.source.reference), Digest(source_digest)
    return None
