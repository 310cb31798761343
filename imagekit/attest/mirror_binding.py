"""The mirror's attestation: DST's digest bound to SRC's, signed, stored on DST.

A mirror verified ``identical`` or ``content-identical`` (the same config and diffIDs; for
content-identical, other compressed blobs and so another manifest digest) is the same
content as its source. Its attestation lets `imagekit verify MIRROR@DIGEST` accept the
mirror on the strength of the source's own attestations and that binding
(imagekit.attest.gate), and cosign verify the binding itself.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from imagekit.attest.attach import AttestOutcome, attest_reference
from imagekit.attest.predicates import MIRROR_V1, MirroredImage, MirrorPredicate
from imagekit.attest.signer import Signer
from imagekit.refs import Platform, parse_reference
from imagekit.version import __version__

BINDING_VERDICTS = ("identical", "content-identical")


def _image(resolution: dict[str, Any]) -> MirroredImage:
    return MirroredImage(
        reference=str(resolution["reference"]),
        manifest_digest=str(resolution["manifest_digest"]),
        index_digest=resolution.get("index_digest"),
        config_digest=str(resolution["config_digest"]),
        platform=resolution.get("platform"),
    )


def attest_mirror(
    signer: Signer,
    *,
    source: dict[str, Any],
    destination: dict[str, Any],
    verdict: str,
    message: str,
    diff_ids: list[str],
    scope: str,
    platform: Platform | None,
    insecure: tuple[str, ...] = (),
) -> AttestOutcome:
    """Sign and store the binding on DST (never raises for a registry fault)."""
    if verdict not in BINDING_VERDICTS:
        return AttestOutcome(None, f"the verdict {verdict} binds nothing")
    predicate = MirrorPredicate(
        source=_image(source),
        destination=_image(destination),
        verdict=verdict,
        message=message,
        diff_ids=diff_ids,
        scope=scope,
        verified_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        imagekit_version=__version__,
    ).model_dump(mode="json")
    reference = parse_reference(str(destination["reference"])).pinned_only(
        str(destination["index_digest"] or destination["manifest_digest"])
    )
    from imagekit.registry.client import RegistryClient

    with RegistryClient(insecure=insecure) as client:
        return attest_reference(
            signer, reference, MIRROR_V1, predicate, platform=platform, client=client
        )
