"""The gate: does the registry hold signed proof that this image meets the policy?

`imagekit verify REF --key PUB` decides from the registry alone (no ledger, no engine): it
reads the manifest REF names (fetched by digest and hash-checked: whether it is an index is
read from its bytes, never from a Content-Type a proxy may rewrite), reads that digest's
attestations (cosign's ``.att`` tag, as cosign reads it), keeps those signed by a trusted
key and naming this digest as their subject (imagekit.attest.collect), and holds each
requirement of the policy against them. Every requirement that does not hold is named with
why; an attestation that was not trusted is named with why it was skipped. The claims are
trusted as far as the keys are: the gate proves who signed what about which digest, not
that the signer was right.

Keys are trusted per requirement, as Kyverno's attestors and the policy-controller's
authorities are: a requirement of the policy that names its ``keys`` reads only what those
keys signed, ``mirror_binding.keys`` names who may sign the mirror bindings followed, and
whatever names no keys trusts every ``--key`` given (which alone keeps its old meaning: any
key given, any requirement).

An index is held to the policy image by image, on every entry a runtime could select
(imagekit.registry.resolve.index_images: an entry without a platform is read from its
config, an annotation hides nothing, only unknown/unknown is an attestation manifest): each
image on the attestations naming its manifest (through its own mirror bindings where it has
them), and the index holds only when every image does. A rule naming a platform holds the
images of that platform (compared normalised: linux/arm64 is linux/arm64/v8), and the index
is then held on those. An entry whose image cannot be told is a requirement not held. An
attestation naming the index is about one of its images at most (an audit is of one
platform), so it never stands in for another platform's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from imagekit.attest.collect import Collected, Skipped, VerifiedAttestation, collect
from imagekit.attest.keys import PublicKey, load_public_key
from imagekit.attest.rules import Requirement, Rule
from imagekit.errors import UsageError
from imagekit.gate.policy import DEFAULT_POLICY, PolicyModel, keyed_rules, load_policy
from imagekit.kinds.mirror import (
    BINDING_VERDICTS,
    MIRROR_BINDING_POLICY,
    MIRROR_V1,
    MirrorPredicate,
)
from imagekit.refs import Digest, Platform, Reference, parse_platform, parse_reference
from imagekit.registry.client import RegistryClient
from imagekit.registry.manifest import INDEX_TYPES, Descriptor, ImageIndex, parse_manifest
from imagekit.registry.resolve import index_images, platforms_read

#: The most images of one index the gate judges: a real index lists a few platforms; one of
#: thousands is refused in one line instead of being read for minutes.
MAX_INDEX_IMAGES = 256


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
    #: how many of ``keys`` were given with --key (the rest the policy names)
    given: int | None = None

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
            f"{self.source} signed by {self._trusted()}{through}; "
            "no ledger, no engine; a signed claim is trusted as far as its key"
        )

    def _trusted(self) -> str:
        """The keys checked, as many as there are: those given and those the policy names."""
        given = len(self.keys) if self.given is None else self.given
        named = len(self.keys) - given
        said = f"{given} key{'s' * (given != 1)} given"
        return said + (f" and {named} the policy names" if named else "")

    def to_json(self) -> dict[str, object]:
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


@dataclass(frozen=True)
class _Judged:
    """A rule of the policy, the policy key it came from, and the keys (by id) it trusts."""

    key: str
    rule: Rule
    trusted: frozenset[str]


@dataclass(frozen=True)
class _Trust:
    """The keys of a verification: every key to check signatures with, each rule with the
    keys it trusts, and the keys trusted to sign the mirror bindings followed."""

    keys: tuple[PublicKey, ...]
    judged: tuple[_Judged, ...]
    bindings: frozenset[str]
    given: int = 0  # how many of ``keys`` came from --key (the rest from the policy)


def verify_image(
    reference: str,
    key_paths: Sequence[Path],
    policy_path: Path | None = None,
    *,
    insecure: Sequence[str] = (),
    now: datetime | None = None,
) -> GateResult:
    """Hold the image REFERENCE names to the policy, from the attestations in its registry."""
    policy = load_policy(policy_path) if policy_path is not None else DEFAULT_POLICY
    trust = _trust(key_paths, policy, policy_path)
    ref = parse_reference(reference)
    now = now or datetime.now(UTC)
    platforms: list[str] = []
    with RegistryClient(insecure=insecure) as client:
        # By its bytes, hash-checked against the digest asked for (or the one announced):
        # whether it is an index is the document's own say, never a HEAD's Content-Type.
        body, media_type, digest = client.get_manifest(ref, ref.digest or ref.identifier)
        repo = Reference(ref.registry, ref.repository)
        if media_type in INDEX_TYPES:
            index = parse_manifest(
                body, media_type, registry=ref.registry, repository=ref.repository,
                digest=str(digest),
            )  # fmt: skip
            assert isinstance(index, ImageIndex)  # noqa: S101 - parse_manifest's contract
            requirements, collected, binding, platforms = _each_image(
                client, ref, index, trust, now
            )
        else:
            collected = collect(client, repo, digest, trust.keys)
            binding, collected = _through_bindings(client, collected, digest, trust)
            requirements = _requirements(trust.judged, collected, now)
    return GateResult(
        reference=str(ref),
        digest=digest,
        policy=str(policy_path) if policy_path else "default (an audit that passed)",
        requirements=tuple(requirements),
        verified=collected.verified,
        skipped=collected.skipped,
        source=collected.source,
        keys=tuple(key.source for key in trust.keys),
        given=trust.given,
        binding=binding,
        platforms=tuple(platforms),
    )


def _trust(key_paths: Sequence[Path], policy: PolicyModel, policy_path: Path | None) -> _Trust:
    """The keys given and those the policy names (paths relative to the policy file), each
    read once; exit 2 naming a key file that cannot be used, or when a requirement has no
    key that may sign it."""
    given = tuple(load_public_key(path) for path in key_paths)
    keys: dict[str, PublicKey] = {key.key_id: key for key in given}
    given_ids = frozenset(keys)
    base = policy_path.parent if policy_path is not None else Path()

    def named(paths: tuple[str, ...], where: str) -> frozenset[str]:
        ids = []
        for i, text in enumerate(paths):
            key = load_public_key(base / text, named=f"{policy_path}: {where}.keys[{i}]")
            keys.setdefault(key.key_id, key)
            ids.append(key.key_id)
        return frozenset(ids)

    judged = tuple(
        _Judged(key, rule, named(rule.keys, key) if rule.keys is not None else given_ids)
        for key, rule in keyed_rules(policy)
    )
    binding = MIRROR_BINDING_POLICY.value(policy)
    where = MIRROR_BINDING_POLICY.key
    bindings = named(binding.keys, where) if binding is not None else given_ids
    # A policy that requires nothing was refused where it was read (load_policy).
    unkeyed = [j.key for j in judged if not j.trusted]
    if unkeyed:
        raise UsageError(
            f"give at least one --key PUB (the policy names no keys for {', '.join(unkeyed)})",
            hint="imagekit verify REF --key cosign.pub, or name keys: in the policy",
        )
    return _Trust(tuple(keys.values()), judged, bindings, len(given_ids))


def _requirements(
    judged: Sequence[_Judged], collected: Collected, now: datetime
) -> list[Requirement]:
    """Every rule held against one image's attestations, each reading only what the keys it
    trusts signed; a rule that fails says which attestations of its type keys it does not
    trust signed."""
    found: list[Requirement] = []
    for each in judged:
        for held in each.rule.evaluate(collected.trusting(each.trusted), now):
            others = [
                a
                for a in collected.verified
                if a.predicate_type == each.rule.predicate_type
                and not a.signed_by_any(each.trusted)
            ]
            if others and not held.held:
                signers = sorted({k.source for a in others for k in a.signers or (a.key,)})
                held = replace(
                    held,
                    why=f"{held.why}; {len(others)} more signed by key(s) the policy does not "
                    f"trust for {each.key} ({', '.join(signers)})",
                )
            found.append(held)
    return found


def _each_image(
    client: RegistryClient,
    ref: Reference,
    index: ImageIndex,
    trust: _Trust,
    now: datetime,
) -> tuple[list[Requirement], Collected, str | None, list[str]]:
    """Every image of an index a runtime could select, held to the rules of its platform on
    its own attestations; each requirement named with its platform. An index with no image
    to hold, an entry whose image cannot be told and a platform a rule names that the index
    lacks are each a requirement not held."""
    listed = [Descriptor.from_model(m) for m in index.manifests]
    nothing = Collected("the index", (), ())
    count = len(index_images(listed))  # before any entry is read
    if count > MAX_INDEX_IMAGES:
        why = (
            f"the index lists {count} entries a runtime could select, more than the "
            f"{MAX_INDEX_IMAGES} the gate judges"
        )
        return [Requirement("an index the gate can judge", False, why)], nothing, None, []
    entries = index_images(listed, platforms_read(client, ref))
    wanted = list(dict.fromkeys(j.rule.platform for j in trust.judged if j.rule.platform))

    def selected(platform: Platform | None) -> bool:
        """Whether a node of a platform the policy holds could select it (any, when the
        policy names none, or when its platform is unknown)."""
        return not wanted or platform is None or any(_is(want, platform) for want in wanted)

    requirements = [
        Requirement(f"{entry.digest}: an image to hold", False, f"{entry.unreadable}: not judged")
        for entry in entries
        if entry.unreadable is not None and selected(entry.platform)
    ]
    images = [(e.platform, e.digest) for e in entries if e.platform and e.unreadable is None]
    if wanted:
        images = [(p, d) for p, d in images if selected(p)]
        requirements += [
            Requirement(f"{want}: an image to hold", False, f"the index has no {want} image")
            for want in wanted
            if not any(_is(want, platform) for platform, _ in images)
        ]
    if not images and not requirements:
        requirements.append(
            Requirement("an image to hold to the policy", False, "the index lists no image")
        )
    spelled = [str(platform) for platform, _ in images]
    labels = [
        text if spelled.count(text) == 1 else f"{text} {digest.short}"
        for text, (_, digest) in zip(spelled, images, strict=True)
    ]  # two entries of one platform: each named by its digest too
    repo = Reference(ref.registry, ref.repository)
    verified: dict[Digest, VerifiedAttestation] = {}
    skipped: list[Skipped] = []
    sources: list[str] = []
    bindings: list[str] = []
    for label, (platform, manifest) in zip(labels, images, strict=True):
        collected = collect(client, repo, manifest, trust.keys)
        binding, collected = _through_bindings(client, collected, manifest, trust)
        applying = [
            j for j in trust.judged if j.rule.platform is None or _is(j.rule.platform, platform)
        ]
        requirements += [
            replace(r, name=f"{label}: {r.name}") for r in _requirements(applying, collected, now)
        ]
        for attestation in collected.verified:
            verified.setdefault(attestation.envelope_digest, attestation)
        skipped += collected.skipped
        sources.append(collected.source)
        if binding:
            bindings.append(f"{label}: {binding}")
    merged = Collected(
        "; ".join(dict.fromkeys(sources)) or "the index", tuple(verified.values()), tuple(skipped)
    )
    return requirements, merged, "; ".join(bindings) or None, labels


def _is(wanted: str, platform: Platform) -> bool:
    """Whether PLATFORM is the platform a rule names (normalised, as containerd compares)."""
    return parse_platform(wanted).matches(platform.os, platform.architecture, platform.variant)


def _through_bindings(
    client: RegistryClient, collected: Collected, digest: Digest, trust: _Trust
) -> tuple[str | None, Collected]:
    """Where signed mirror attestations bind DIGEST to sources (identical or
    content-identical), each source's attestations join this digest's: the mirror holds the
    same content. Every binding a key trusted for bindings signed is followed, each one
    level deep (a source's own bindings are not followed)."""
    said: list[str] = []
    verified, skipped, sources = list(collected.verified), list(collected.skipped), []
    followed: set[tuple[str, Digest]] = set()
    for attestation in collected.verified:
        if attestation.predicate_type != MIRROR_V1 or not attestation.signed_by_any(trust.bindings):
            continue
        try:
            binding = MirrorPredicate.model_validate(attestation.statement.predicate)
        except ValidationError:
            continue
        if binding.verdict not in BINDING_VERDICTS:
            continue
        found = _followed(binding, digest)
        if found is None:
            continue
        verdict, source, source_digest = found
        if (source.name, source_digest) not in followed:
            followed.add((source.name, source_digest))
            theirs = collect(
                client, Reference(source.registry, source.repository), source_digest, trust.keys
            )
            verified += theirs.verified
            skipped += theirs.skipped
            sources.append(theirs.source)
        said.append(
            f"{verdict} to {source.name}@{source_digest} "
            f"(attestation {attestation.envelope_digest.short})"
        )
    if not said:
        return None, collected
    merged = Collected(" and ".join([collected.source, *sources]), tuple(verified), tuple(skipped))
    return "; ".join(said), merged


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
