"""The final pull's attestation: which runtime on which node holds the image, by which ID.

Signed on the cluster side (a node, or the machine pulling as a node does) and stored
beside the image, so that the pull proved there can be read and verified anywhere (and
imported into another ledger). Only a verified pull attests: a mismatch names no image
that the target holds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from imagekit.attest.attach import Prepared, prepare_reference
from imagekit.attest.signer import Signer
from imagekit.kinds.final_pull import FINAL_PULL_V1, FinalPullPredicate
from imagekit.refs import Digest, Platform, Reference
from imagekit.version import __version__


def final_pull_predicate(document: dict[str, Any]) -> FinalPullPredicate:
    """From a final pull's JSON (engine or containerd): the facts the attestation states."""
    containerd = document.get("containerd") or {}
    runtime = str(document.get("runtime") or "engine")
    return FinalPullPredicate(
        status=str(document["status"]),
        scope=str(document["scope"]),
        runtime=runtime,
        node=str(document["where"]),
        image_id=document.get("image_id"),
        store=containerd.get("snapshotter") if containerd else document.get("image_store"),
        namespace=containerd.get("namespace") if containerd else None,
        runtime_version=containerd.get("version") if containerd else document.get("engine_version"),
        checks=list(document.get("checks") or []),
        pulled_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        imagekit_version=__version__,
    )


def prepare_final_pull(
    signer: Signer,
    reference: Reference,
    expected: Digest,
    document: dict[str, Any],
    *,
    platform: Platform | None = None,
) -> Prepared:
    """Sign the pull's attestation on the digest pulled, attaching nothing: what the record
    names (the envelope to be attached) before anything is pushed; :meth:`Prepared.attach`
    once the record is written (a registry fault is then an outcome saying "not attested",
    never an exception). For an index, its subjects are the index and the manifest of
    PLATFORM, the one the target pulled (not the registry client's default platform: on an
    arm64 node that is another image)."""
    if not document.get("ok"):
        return Prepared.nothing(
            FINAL_PULL_V1, signer.key_id, "the pull did not verify: it names no image to attest"
        )
    predicate = final_pull_predicate(document).model_dump(mode="json")
    return prepare_reference(
        signer, reference.pinned_only(expected), FINAL_PULL_V1, predicate, platform=platform
    )
