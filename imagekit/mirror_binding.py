"""The mirror's attestation: DST's digest bound to SRC's, signed, stored on DST.

A mirror verified ``identical`` or ``content-identical`` (the same config and diffIDs; for
content-identical, other compressed blobs and so another manifest digest) is the same
content as its source. Its attestation lets `imagekit verify MIRROR@DIGEST` accept the
mirror on the strength of the source's own attestations and that binding
(imagekit.gate.verify), and cosign verify the binding itself.

An index verified platform by platform is bound whole or not at all: one attestation whose
subjects are DST's index and each platform's manifest, listing every platform's images,
verdict and diffIDs, signed only when every platform's verdict binds. One platform of an
index (``--platform``) is bound as that image alone: its manifest is the only subject. The
gate follows a platform's manifest to that platform's source image, never to the source
index (whose attestations may be another platform's), and an index only through a binding
of the whole index.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from imagekit.attest.attach import AttestOutcome, attest, attest_reference
from imagekit.attest.signer import Signer
from imagekit.errors import RegistryError
from imagekit.kinds.mirror import (
    BINDING_VERDICTS,
    MIRROR_V1,
    MirroredImage,
    MirroredPlatform,
    MirrorPredicate,
)
from imagekit.refs import Digest, Platform, Reference, parse_reference
from imagekit.version import __version__

__all__ = ["BINDING_VERDICTS", "attest_mirror"]


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
    platforms: Sequence[dict[str, Any]] = (),
) -> AttestOutcome:
    """Sign and store the binding on DST (never raises for a registry fault).

    PLATFORMS (an index verified platform by platform): each platform's ``source``,
    ``destination``, ``verdict`` and ``diff_ids``; the first is the one named above and
    VERDICT is the index's. Every platform must bind, or nothing is signed."""
    if verdict not in BINDING_VERDICTS:
        return AttestOutcome(None, f"the verdict {verdict} binds nothing")
    if platforms and not destination.get("index_digest"):
        return AttestOutcome(None, "DST holds no index to bind its platforms to")
    unbound = [p for p in platforms if str(p["verdict"]) not in BINDING_VERDICTS]
    if unbound:  # the index's verdict is the worst of its platforms': this cannot happen
        named = ", ".join(f"{p['destination'].get('platform')} {p['verdict']}" for p in unbound)
        return AttestOutcome(None, f"not every platform binds ({named})")
    entries = [
        MirroredPlatform(
            platform=str(p["destination"].get("platform")),
            source=_image(p["source"]),
            destination=_image(p["destination"]),
            verdict=str(p["verdict"]),
            diff_ids=list(p["diff_ids"]),
        )
        for p in platforms
    ]
    predicate = MirrorPredicate(
        source=_image(source),
        destination=_image(destination),
        verdict=verdict,
        message=message,
        diff_ids=diff_ids,
        scope=scope,
        verified_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        imagekit_version=__version__,
        platforms=entries or None,
    ).model_dump(mode="json")
    if not entries:
        del predicate["platforms"]  # one image's binding reads as it always has
    reference = parse_reference(str(destination["reference"]))
    from imagekit.registry.client import RegistryClient

    with RegistryClient(insecure=insecure) as client:
        if not entries:  # one image (or one platform of an index): its manifest alone
            return attest_reference(
                signer,
                reference.pinned_only(str(destination["manifest_digest"])),
                MIRROR_V1,
                predicate,
                platform=platform,
                client=client,
            )
        subjects = [Digest(str(destination["index_digest"]))] + [
            Digest(entry.destination.manifest_digest) for entry in entries
        ]
        repo = Reference(reference.registry, reference.repository)
        try:
            return AttestOutcome(attest(client, repo, subjects, MIRROR_V1, predicate, signer))
        except RegistryError as exc:
            return AttestOutcome(None, exc.message)
