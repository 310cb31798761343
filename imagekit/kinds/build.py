"""The build's kinds: ``build`` (an image built, by the engine, a BuildKit daemon or the
registry builder) and ``rejected-build`` (a build, guard or assertion said no; kept, never
overwritten). A build's provenance is signed as SLSA v1 when it is pushed (the push kind).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from imagekit.kinds.details import (
    AssertionRunDetails,
    BaseImageDetails,
    GuardReport,
    OverlayLayerDetails,
    RecordDetails,
    attestation_field,
)
from imagekit.kinds.spec import KindSpec


class BuildStatus(StrEnum):
    BUILT = "built"
    REJECTED = "rejected"


class BuildDetails(RecordDetails):
    image_id: str | None = None
    plan_sha256: str | None = None
    dockerfile_sha256: str | None = None
    rendered_sha256: dict[str, str] | None = None
    builder: str | None = None
    base: BaseImageDetails | None = None
    # builder "registry" (imagekit.builders.assemble): no engine build, so the image is known by its
    # manifest, the layer written, the guard and the assertions run afterwards
    manifest_digest: str | None = None
    layer: OverlayLayerDetails | None = None
    epoch: int | None = None
    guard: GuardReport | None = None
    assertions: AssertionRunDetails | None = None
    attestation: str | None = attestation_field(
        "the SLSA v1 provenance",
        when="--buildkit/--buildx-builder with --sign-key (a build record with no push record)",
    )
    # a plan of several platforms (imagekit.builders.platforms): one build record a platform,
    # each naming the index pushed with all of them
    platform: str | None = None
    index_digest: str | None = None
    candidate: str | None = Field(
        default=None,
        description="a night's candidate (imagekit nightly): the nightly-... tag it was built "
        "for; proposed, never the plan's accepted image (absent: an ordinary build)",
    )


class RejectedBuildDetails(RecordDetails):
    reason: str | None = None
    step: str | None = None
    message: str | None = None
    # a registry build rejected by its guard or assertions
    manifest_digest: str | None = Field(default=None, description="pushed by digest, never tagged")
    guard: GuardReport | None = None
    assertions: AssertionRunDetails | None = None
    platform: str | None = None  # a plan of several platforms: the one refused


BUILD = KindSpec(
    name="build",
    details=BuildDetails,
    statuses=(BuildStatus.BUILT,),
    identifier_keys=("image_id", "manifest_digest"),
)
REJECTED_BUILD = KindSpec(
    name="rejected-build",
    details=RejectedBuildDetails,
    statuses=(BuildStatus.REJECTED,),
    failing=frozenset({BuildStatus.REJECTED}),
    identifier_keys=("manifest_digest",),
)
