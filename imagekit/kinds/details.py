"""What every kind's ``details`` is built on, and the pieces several kinds share.

A record's details are read back from a file anyone could have edited, so each model refuses
unknown keys; they are written with only the fields the writer set (``exclude_unset``), so
a field added to a model later never changes the bytes of records written before it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

#: The field every importable kind's details carry: set by ``ledger sync`` on a record it made
#: from a signed attestation (None where the stage itself wrote the record).
ImportedMark = Annotated[
    str | None,
    Field(description="`ledger sync`: imported from a signed attestation, and with which key"),
]


def attestation_field(signed: str, when: str = "with --sign-key", after: str = "") -> Any:
    """The ``attestation`` field of a kind's details: once a key signs the verdict (WHEN),
    the envelope digest of the attestation SIGNED names, or why there is none in words
    ('not attested: WHY'), so a record never leaves unsaid whether its verdict was signed.
    AFTER ends the description where a kind says more."""
    description = f"{when}: {signed}'s envelope digest, or 'not attested: WHY'"
    return Field(default=None, description=f"{description} {after}" if after else description)


class RecordDetails(BaseModel):
    """Base of every kind's details model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def to_json(self) -> dict[str, Any]:
        """The dict written into the record: the fields the writer set, nothing more."""
        return self.model_dump(mode="json", exclude_unset=True)


class BaseImageDetails(RecordDetails):
    """The upstream base as the registry describes it (what the image lock shows)."""

    platform: str | None = None
    manifest_digest: str | None = None
    source_tag: str | None = None
    index_digest: str | None = None
    config_digest: str | None = None
    compressed_layer_bytes: int | None = None
    layer_digests: list[str] | None = None
    diff_ids: list[str] | None = None
    inspect_error: str | None = Field(
        default=None, description="why the registry could not describe the base when recorded"
    )


class OverlayLayerDetails(RecordDetails):
    """The one layer the registry builder wrote (imagekit.builders.assemble.layer)."""

    digest: str
    diff_id: str
    size: int
    uncompressed_size: int
    files: int
    folders: int
    compression: str


class GuardCheckDetails(RecordDetails):
    """One overlay's guard, checked against the base's layers without a pull."""

    step: int
    destination: str
    written: str = Field(description="where the file lands once the base's links are followed")
    expected: str
    found: str
    verdict: str = Field(description="ok, drift or blocked")
    decided_by_layer: int | None = None
    links_followed: list[list[str]] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class BaseLayerUse(RecordDetails):
    """How the guard used one base layer: read now, from the index cache, or not at all."""

    layer: int
    digest: str
    how: str
    compressed_bytes: int | None = None
    uncompressed_bytes: int | None = None
    entries: int | None = None
    seconds: float | None = None


class GuardReport(RecordDetails):
    checks: list[GuardCheckDetails]
    base_layers: list[BaseLayerUse]


class AssertionRunDetails(RecordDetails):
    """The plan's assertions as the registry builder ran them in the pushed image."""

    status: str = Field(description="passed, failed, NOT RUN or none")
    scope: str
    execution: str | None = Field(default=None, description="native, emulated or impossible")
    emulator: str | None = None
    passed: list[str] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)
    log: str | None = Field(default=None, description="the run's log, relative to the project")
    engine_image: str | None = None
    checker_sha256: str | None = Field(
        default=None, description="the sha256 of imagekit's assertion checker that ran"
    )


class TagResolution(RecordDetails):
    """An audit asked for a registry tag: the digest it named then, and when (UTC)."""

    tag: str
    digest: str
    at: str
    sentence: str = Field(description="tag X resolved to DIGEST at TIME")


class AuditedImageDetails(RecordDetails):
    """What an audit record and its vulnerability-scan record both say of the image: its ID,
    the profile the probe ran with, and the tag it was resolved from (the lock reads the
    profile from either)."""

    profile: str | None = None
    image_id: str | None = None
    tag_resolution: TagResolution | None = None
