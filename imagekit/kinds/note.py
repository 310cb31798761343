"""The note's kind: free text and free details, but a night's note (status
``nightly-<verdict>``, imagekit.flows.nightly), whose details are NightlyDetails."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from imagekit.kinds.details import GuardReport, RecordDetails
from imagekit.kinds.spec import KindSpec

NIGHTLY_STATUS_PREFIX = "nightly-"


class NoteDetails(RecordDetails):
    """A note's details are the writer's own: any JSON keys (still checked for secrets).

    Except a night's note (status ``nightly-<verdict>``), whose details are NightlyDetails.
    """

    model_config = ConfigDict(extra="allow", frozen=True)


class UpstreamTagDetails(RecordDetails):
    """What a plan's ``base.found_as`` served when the night asked (imagekit.plans.upstream)."""

    tag: str
    repository: str
    pinned: str
    state: str = Field(description="current, moved or gone")
    served: str | None = Field(default=None, description="the digest as the registry serves it")
    media_type: str | None = None
    platform_manifest: str | None = None
    resolved_at: str = Field(description="UTC, when the registry answered")
    detail: str


class NightlyDetails(RecordDetails):
    """A night's note for one plan (imagekit.flows.nightly): what was compared, what it said.

    A rebuild from the pinned base carries the first four fields. A plan whose base tag was
    watched carries ``upstream``; when the tag moved, the candidate built on the new digest
    (or the guard that refused it), what upstream changed between the two bases, and the
    proposed one-line plan diff.
    """

    verdict: str
    audit_status: str | None = None
    accepted_audit_status: str | None = None
    changes: list[str] = Field(default_factory=list)
    upstream: UpstreamTagDetails | None = None
    candidate: str | None = Field(default=None, description="repo@digest of the candidate")
    builder: str | None = Field(default=None, description="registry or engine")
    guard: GuardReport | None = None
    base_changes: list[str] | None = Field(
        default=None, description="the pinned base against the new one, as layerdiff names it"
    )
    plan_diff: str | None = Field(default=None, description="the proposed change of the plan")
    notes: list[str] = Field(default_factory=list)


def _by_status(status: str) -> type[RecordDetails] | None:
    return NightlyDetails if status.startswith(NIGHTLY_STATUS_PREFIX) else None


NOTE = KindSpec(
    name="note",
    details=NoteDetails,
    # A note may say anything; the keys it names an image by are the ones every stage uses.
    identifier_keys=(
        "image_id",
        "manifest_digest",
        "config_digest",
        "image_id_raw",
        "repo_digests",
    ),
    details_by_status=_by_status,
)
