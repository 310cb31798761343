"""The mirror verification's kind: verdicts, record details, the signed binding, its import.

Verdicts, in the order they win: ``error`` (something could not be checked), ``mismatch``
(a layer's diffID or the count differs), ``config-differs`` (every diffID equal, the config
not), ``identical`` (the same manifest, every blob verified), ``content-identical`` (the same
config and diffIDs, the compressed blobs differ). Only the last two bind a copy to its
source (imagekit.mirror_binding), and the gate follows such a binding.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from imagekit.kinds.details import ImportedMark, RecordDetails, attestation_field
from imagekit.kinds.spec import (
    Imported,
    KindSpec,
    PolicyEntry,
    Predicate,
    PredicateModel,
    TrustedRequirement,
)

MIRROR_V1 = "https://imagekit.dev/attestation/mirror-verification/v1"


class MirrorVerdict(StrEnum):
    IDENTICAL = "identical"
    CONTENT_IDENTICAL = "content-identical"
    CONFIG_DIFFERS = "config-differs"
    MISMATCH = "mismatch"
    ERROR = "error"


#: The verdicts that bind a copy to its source: the same content, proved layer by layer.
BINDING_VERDICTS = (MirrorVerdict.IDENTICAL.value, MirrorVerdict.CONTENT_IDENTICAL.value)


class MirrorDetails(RecordDetails):
    message: str | None = Field(default=None, description="the verdict sentence")
    config_digest_equal: bool | None = None
    compressed_digests_equal: bool | None = None
    layers: int | None = None
    copied: bool | None = None
    attestation: str | None = attestation_field("the binding attestation")
    imported: ImportedMark = None


class MirroredImage(PredicateModel):
    reference: str
    manifest_digest: str
    index_digest: str | None = None
    config_digest: str
    platform: str | None = None


class MirroredPlatform(PredicateModel):
    """One platform of a mirrored index: its two images, its verdict and its diffIDs."""

    platform: str = Field(description="os/arch[/variant]")
    source: MirroredImage
    destination: MirroredImage
    verdict: str = Field(description="identical or content-identical")
    diff_ids: list[str] = Field(description="the diffIDs of DST's layers, each hashed here")


class MirrorPredicate(PredicateModel):
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


class MirrorBindingTrust(TrustedRequirement):
    """Whose signed mirror bindings the gate follows (a policy's ``mirror_binding``): a key
    that signs bindings vouches that a copy holds its source's content, so that the
    source's verdicts count for the copy; a policy may keep that to the mirror job's key."""

    keys: tuple[str, ...] = Field(
        min_length=1,
        description="public key files (PEM, relative to the policy file) trusted to sign "
        "mirror bindings",
    )


#: The policy's ``mirror_binding``: keys only, no rule; the gate reads it through
#: ``MIRROR_BINDING_POLICY.value(policy)``.
MIRROR_BINDING_POLICY = PolicyEntry[MirrorBindingTrust](
    key="mirror_binding",
    form=MirrorBindingTrust | None,
    rule=None,
    description="the keys trusted to sign the mirror bindings the gate follows; absent: "
    "every --key",
)


def _record(mirror: MirrorPredicate) -> Imported:
    details = MirrorDetails(message=mirror.message)
    return Imported(mirror.verdict, mirror.scope, details, {"source": mirror.source.reference})


MIRROR = KindSpec(
    name="mirror-verify",
    details=MirrorDetails,
    statuses=tuple(MirrorVerdict),
    failing=frozenset({MirrorVerdict.CONFIG_DIFFERS, MirrorVerdict.MISMATCH, MirrorVerdict.ERROR}),
    predicate=Predicate.own(
        MIRROR_V1, MirrorPredicate, "mirror-verification-v1.schema.json", _record
    ),
    about_images=True,
    policy=MIRROR_BINDING_POLICY,
)
