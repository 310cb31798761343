"""One ledger record: its fields, each kind's typed ``details``, and the bytes of its line.

A record is read back from a file anyone could have edited, so it is a trust boundary: every
model refuses unknown keys, and each kind's ``details`` must fit that kind's model (a
misspelt ``manifest_digst`` in a push record makes the line malformed, instead of a lock
that silently says "not recorded"). Writers build the details as these models; readers
(the lock, nightly, record-pod) read them through :attr:`LedgerRecord.info` instead of
fishing in a dict with ``.get``.

The chain hashes the exact bytes of a line, never a re-serialisation: :func:`encode_line` is
the one serialisation the ledger writes, and the bytes on disk are what count afterwards.
Details are written with only the fields the writer set (``exclude_unset``), so a field
added to a model later never changes the bytes of records written before it.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from imagekit.errors import UsageError

SCHEMA_VERSION = 1
Kind = Literal[
    "build",
    "rejected-build",
    "audit",
    "vulnerability-scan",
    "push",
    "mirror-verify",
    "final-pull",
    "note",
]
KINDS: tuple[str, ...] = get_args(Kind)


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
    """The one layer the registry builder wrote (imagekit.build.assemble.layer)."""

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


class BuildDetails(RecordDetails):
    image_id: str | None = None
    plan_sha256: str | None = None
    dockerfile_sha256: str | None = None
    rendered_sha256: dict[str, str] | None = None
    builder: str | None = None
    base: BaseImageDetails | None = None
    # builder "registry" (imagekit.build.assemble): no engine build, so the image is known by its
    # manifest, the layer written, the guard and the assertions run afterwards
    manifest_digest: str | None = None
    layer: OverlayLayerDetails | None = None
    epoch: int | None = None
    guard: GuardReport | None = None
    assertions: AssertionRunDetails | None = None
    attestation: str | None = Field(
        default=None,
        description="--buildkit/--buildx-builder with --sign-key (a build record with no push "
        "record): the SLSA v1 provenance's envelope digest, or 'not attested: WHY'",
    )
    # a plan of several platforms (imagekit.build.platforms): one build record a platform,
    # each naming the index pushed with all of them
    platform: str | None = None
    index_digest: str | None = None


class RejectedBuildDetails(RecordDetails):
    reason: str | None = None
    step: str | None = None
    message: str | None = None
    # a registry build rejected by its guard or assertions
    manifest_digest: str | None = Field(default=None, description="pushed by digest, never tagged")
    guard: GuardReport | None = None
    assertions: AssertionRunDetails | None = None
    platform: str | None = None  # a plan of several platforms: the one refused


class CopyDetails(RecordDetails):
    """What a registry-to-registry push moved (imagekit.registry.upload.CopyResult)."""

    source: str
    destination: str
    digest: str
    media_type: str
    manifests: int
    blobs_existing: int
    blobs_mounted: int
    blobs_uploaded: int
    blobs_skipped: int
    bytes_uploaded: int
    chunk_resumes: int
    upload_restarts: int


class PushDetails(RecordDetails):
    attestation: str | None = Field(
        default=None,
        description="with --sign-key: the SLSA v1 provenance's envelope digest, or "
        "'not attested: WHY'",
    )
    audit_attestation: str | None = Field(
        default=None,
        description="`imagekit pipeline --sign-key`: the audit made before the push, signed "
        "onto the pushed digest (its config the audited image's): envelope digest, or "
        "'not attested: WHY'",
    )
    vuln_attestation: str | None = Field(
        default=None,
        description="the same audit's vulnerability scan (cosign's vuln predicate)",
    )
    manifest_digest: str | None = None
    config_digest: str | None = None
    index_digest: str | None = Field(default=None, description="`build --index`: the tag's")
    transfer: CopyDetails | None = Field(
        default=None, description="the registry builder's push: blobs mounted, uploaded, kept"
    )


class AuditSummary(RecordDetails):
    """Which checks ran and how they ended; the whole report is the record's evidence."""

    checks: dict[str, str] | None = None
    failing: list[str] | None = None
    deferred: list[str] | None = None
    skipped: list[str] | None = None
    versions: dict[str, str | None] | None = Field(
        default=None,
        description="the profile's key distributions as the versions check read them, None "
        "for one that is not installed (the image lock's prepared_versions)",
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


class AuditDetails(AuditedImageDetails):
    report: AuditSummary | None = None
    attestation: str | None = Field(
        default=None,
        description="with --sign-key: the signed attestation's envelope digest, or "
        "'not attested: WHY' when the registry did not take it",
    )
    imported: str | None = Field(
        default=None,
        description="`ledger sync`: imported from a signed attestation, and with which key",
    )


class VulnerabilitySummary(RecordDetails):
    reason: str | None = None
    audited: int | None = None
    findings: int | None = None
    finding_ids: list[str] | None = None
    not_audited: int | None = None
    fail_on: str | None = Field(default=None, description="the --fail-on policy applied")


class VulnerabilityDatabase(RecordDetails):
    """The offline OSV export a scan matched against: a newer one makes a new record."""

    name: str
    kind: str
    digest: str
    records: int
    withdrawn: int
    pypi_packages: int
    newest_modified: str
    age_days: float
    age_source: str
    described: str
    ignored_files: list[str]
    validated_by_processes: int
    max_age_days: int | None = None


class VulnerabilityScanDetails(AuditedImageDetails):
    report: VulnerabilitySummary | None = None
    database: VulnerabilityDatabase | None = None
    attestation: str | None = Field(
        default=None,
        description="with --sign-key: the cosign vuln attestation's envelope digest, or "
        "'not attested: WHY'",
    )
    imported: str | None = Field(
        default=None,
        description="`ledger sync`: imported from a signed attestation, and with which key",
    )


class MirrorDetails(RecordDetails):
    message: str | None = Field(default=None, description="the verdict sentence")
    config_digest_equal: bool | None = None
    compressed_digests_equal: bool | None = None
    layers: int | None = None
    copied: bool | None = None
    attestation: str | None = Field(
        default=None,
        description="with --sign-key: the binding attestation's envelope digest, or "
        "'not attested: WHY'",
    )
    imported: str | None = Field(
        default=None,
        description="`ledger sync`: imported from a signed attestation, and with which key",
    )


class PullCheck(RecordDetails):
    name: str
    ok: bool
    expected: str | None = None
    actual: str | None = None


class ContainerdStore(RecordDetails):
    """Which containerd answered a final pull, and where it keeps the image."""

    version: str
    address: str
    namespace: str
    snapshotter: str


class FinalPullDetails(RecordDetails):
    """A final pull through an engine or containerd, or a pod's container as the kubelet
    reports it.

    ``image_id`` is what the store calls the image: the config digest in Docker's classic
    store and as the CRI image ID, the pulled digest in the engine's containerd image store,
    the digest out of a pod's imageID. ``image_id_means`` says which, in words.
    """

    source: Literal["engine", "containerd", "pod"] | None = None
    image_id: str | None = None
    image_id_means: str | None = None
    attestation: str | None = Field(
        default=None,
        description="with --sign-key: the final-pull attestation's envelope digest, or "
        "'not attested: WHY'",
    )
    imported: str | None = Field(
        default=None,
        description="`ledger sync`: imported from a signed attestation, and with which key",
    )
    expected_manifest_digest: str | None = None
    expected_config_digest: str | None = None
    where: str | None = None
    # sources "engine" and "containerd"
    repo_digests: list[str] | None = None
    engine_version: str | None = None
    image_store: str | None = None
    platform_manifest_digest: str | None = None
    checks: list[PullCheck] | None = None
    # source "containerd"
    containerd: ContainerdStore | None = None
    repository: str | None = None
    name: str | None = None
    target_digest: str | None = Field(
        default=None, description="what containerd pulled: the index or the manifest"
    )
    target_media_type: str | None = None
    platform: str | None = None
    config_digest: str | None = None
    chain_id: str | None = None
    cri_references: list[str] | None = None
    kubelet_image_ref: str | None = None
    # source "pod"
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    init: bool | None = None
    image: str | None = None
    image_id_raw: str | None = None
    image_id_form: str | None = None
    input_sha256: str | None = None
    final_pull_seq: int | None = Field(
        default=None, description="the containerd final pull the pod was matched against"
    )
    expected_platform_manifest_digest: str | None = None


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


NIGHTLY_STATUS_PREFIX = "nightly-"


DETAILS_MODELS: dict[str, type[RecordDetails]] = {
    "build": BuildDetails,
    "rejected-build": RejectedBuildDetails,
    "audit": AuditDetails,
    "vulnerability-scan": VulnerabilityScanDetails,
    "push": PushDetails,
    "mirror-verify": MirrorDetails,
    "final-pull": FinalPullDetails,
    "note": NoteDetails,
}


class EvidenceRef(BaseModel):
    """The main evidence file of a record: where it is and the sha256 of its bytes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    sha256: str


class LedgerRecord(BaseModel):
    """One line of the ledger, as read back (every field is required to be present)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: int = Field(alias="schema")
    seq: int
    time: str
    kind: Kind
    plan: str | None
    images: dict[str, str]
    status: str
    scope: str
    evidence: EvidenceRef | None
    imagekit: str
    host: str
    details: dict[str, Any]
    prev: str | None

    @model_validator(mode="after")
    def _details_fit_the_kind(self) -> LedgerRecord:
        self._details_model().model_validate(self.details)
        return self

    def _details_model(self) -> type[RecordDetails]:
        return details_model(self.kind, self.status)

    @property
    def info(self) -> Any:
        """The details as their kind's model (``BuildDetails`` for a build, and so on).

        Typed ``Any`` because the kind decides the class; callers that know the kind
        annotate the variable (``info: PushDetails = record.info``).
        """
        return self._details_model().model_validate(self.details)

    def identifiers(self) -> list[str]:
        """Every reference and digest the record names: its images, and the image IDs and
        digests its details carry (what `ledger show --image` and the lock match on)."""
        texts = list(self.images.values())
        for key in ("image_id", "manifest_digest", "config_digest", "image_id_raw"):
            value = self.details.get(key)
            if isinstance(value, str):
                texts.append(value)
        repo_digests = self.details.get("repo_digests")
        if isinstance(repo_digests, list):
            texts.extend(str(v) for v in repo_digests)
        return texts

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    @classmethod
    def from_json(cls, data: Any) -> LedgerRecord:
        return cls.model_validate(data)


def details_model(kind: str, status: str) -> type[RecordDetails]:
    """The model a record's details must fit: its kind's, and a night's note its own."""
    if kind == "note" and status.startswith(NIGHTLY_STATUS_PREFIX):
        return NightlyDetails
    return DETAILS_MODELS[kind]


def details_for(
    kind: str, details: RecordDetails | dict[str, Any] | None, status: str = ""
) -> dict[str, Any]:
    """The details dict to write for ``kind``: a model of that kind, or a dict that fits one.

    A model of another kind, or a key the kind's model does not know, is the caller's bug
    and refused before anything is written.
    """
    model = details_model(kind, status)
    if details is None:
        return {}
    if isinstance(details, RecordDetails):
        if not isinstance(details, model):
            raise UsageError(
                f"a {kind} record needs {model.__name__} details, not {type(details).__name__}"
            )
        return details.to_json()
    try:
        return model.model_validate(details).to_json()
    except ValueError as exc:
        first = str(exc).splitlines()
        raise UsageError(
            f"the details of this {kind} record do not fit {model.__name__}: "
            + (" ".join(line.strip() for line in first[1:3]) if len(first) > 1 else str(exc)),
            hint="every record kind's details are typed in imagekit.ledger.record",
        ) from exc


def line_hash(raw: bytes) -> str:
    """The chain hash of a line: sha256 of its exact bytes, newline included."""
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def encode_line(document: dict[str, Any]) -> bytes:
    """The one serialisation the ledger writes: compact, sorted keys, UTF-8, newline."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return (text + "\n").encode("utf-8")


# Keys that name a credential; a record carrying one is refused whatever its value.
_SECRET_KEYS = re.compile(
    r"^(password|passwd|secret|token|access_token|refresh_token|identitytoken|"
    r"registrytoken|authorization|private_key|x-registry-auth)$",
    re.IGNORECASE,
)
# Text that looks like a credential wherever it sits (values, scope sentences, messages).
# Case matters for the token schemes so that prose ("a basic roundtrip") is not refused.
_SECRET_TEXT = re.compile(
    r"((?i:authorization\s*:\s*(basic|bearer)\b)"
    r"|\bBearer [A-Za-z0-9._~+/-]{16,}"
    r"|\bBasic (?=[A-Za-z0-9+/]*[A-Z0-9+/])(?=[A-Za-z0-9+/]*[a-z])[A-Za-z0-9+/]{12,}"
    r"|-----BEGIN [A-Z ]*(CERTIFICATE|PRIVATE KEY)-----"
    r"|\"auths\"\s*:)",
)


def check_no_secrets(value: Any, where: str = "record") -> None:
    """Refuse (UsageError) a record with a credential-like key or text anywhere in it.

    Nothing is scrubbed silently: the caller's bug shows instead of being hidden.
    """
    if isinstance(value, dict):
        for key, inner in value.items():
            if isinstance(key, str) and _SECRET_KEYS.match(key):
                raise UsageError(
                    f"refusing to write a ledger record with a credential-like key {key!r} "
                    f"in {where}",
                    hint="records must never carry credentials; drop that key",
                )
            check_no_secrets(inner, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for index, inner in enumerate(value):
            check_no_secrets(inner, f"{where}[{index}]")
    elif isinstance(value, str) and _SECRET_TEXT.search(value):
        raise UsageError(
            f"refusing to write a ledger record: {where} looks like it carries a credential "
            "(an Authorization header, a bearer/basic token, a key or a certificate)",
            hint="records must never carry credentials; pass only references and digests",
        )
