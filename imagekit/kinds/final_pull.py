"""The final pull's kind: what the target's store holds, recorded and signed.

Statuses (imagekit.runtime.cri.FinalPullStatus): ``verified`` (the store, or the kubelet,
holds exactly the accepted image: digests and image ID checked), ``mismatch``, ``unknown``
(the form could not be compared). Records come from the engine, containerd's CRI plugin, or
a pod's status (``ledger record-pod``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from imagekit.kinds.details import ImportedMark, RecordDetails, attestation_field
from imagekit.kinds.spec import Imported, KindSpec, Predicate, PredicateModel
from imagekit.runtime.cri import FinalPullStatus

FINAL_PULL_V1 = "https://imagekit.dev/attestation/final-pull/v1"


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
    attestation: str | None = attestation_field("the final-pull attestation")
    imported: ImportedMark = None
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
    pod_uid: str | None = Field(
        default=None, description="the pod's uid: this pod, not a later one of its name"
    )
    node: str | None = Field(default=None, description="the node the pod ran on")
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


class FinalPullPredicate(PredicateModel):
    """What a final pull proved on a target: which runtime and store hold which image ID."""

    status: str = Field(description="verified (only verified pulls attest)")
    scope: str
    runtime: str = Field(description="engine or containerd")
    node: str = Field(description="the target's label (--where, default the host name)")
    image_id: str | None = None
    store: str | None = Field(
        default=None, description="the engine's image store, or the containerd snapshotter"
    )
    namespace: str | None = Field(default=None, description="containerd's namespace")
    runtime_version: str | None = None
    checks: list[dict[str, Any]]
    pulled_at: str = Field(description="RFC 3339 UTC")
    imagekit_version: str


def _record(pull: FinalPullPredicate) -> Imported:
    source: Literal["engine", "containerd"] | None = (
        pull.runtime if pull.runtime in ("engine", "containerd") else None  # type: ignore[assignment]
    )
    details = FinalPullDetails(
        source=source, image_id=pull.image_id, where=pull.node, namespace=pull.namespace
    )
    return Imported(pull.status, pull.scope, details)


FINAL_PULL = KindSpec(
    name="final-pull",
    details=FinalPullDetails,
    statuses=tuple(FinalPullStatus),
    failing=frozenset({FinalPullStatus.MISMATCH, FinalPullStatus.UNKNOWN}),
    predicate=Predicate.own(
        FINAL_PULL_V1, FinalPullPredicate, "final-pull-v1.schema.json", _record
    ),
    about_images=True,
    identifier_keys=("image_id", "config_digest", "image_id_raw", "repo_digests"),
)
