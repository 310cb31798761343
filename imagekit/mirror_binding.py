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

from imagekit.attest.attach import AttestOutcome, Prepared, prepare_reference, prepare_subjects
from imagekit.attest.signer import Signer
from imagekit.kinds.mirror import (
    BINDING_VERDICTS,
    MIRROR_V1,
    MirroredImage,
    MirroredPlatform,
    MirrorPredicate,
)
from imagekit.refs import Digest, Platform, Reference, parse_reference
from imagekit.version import __version__

__all__ = ["BINDING_VERDICTS", "attach_mirror", "prepare_mirror"]


def _image(resolution: dict[str, Any]) -> MirroredImage:
    return MirroredImage(
        reference=str(resolution["reference"]),
        manifest_digest=str(resolution["manifest_digest"]),
        index_digest=resolution.get("index_digest"),
        config_digest=str(resolution["config_digest"]),
        platform=resolution.get("platform"),
    )


def prepare_mirror(
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
) -> Prepared:
    """Sign the binding for DST, attaching nothing: what the mirror's record names (the
    envelope to be attached) before anything is pushed; :func:`attach_mirror` once the
    record is written. Never raises for a registry fault: the result says "not attested".

    PLATFORMS (an index verified platform by platform): each platform's ``source``,
    ``destination``, ``verdict`` and ``diff_ids``; the first is the one named above and
    VERDICT is the index's. Every platform must bind, or nothing is signed."""
    if verdict not in BINDING_VERDICTS:
        return Prepared.nothing(MIRROR_V1, signer.key_id, f"the verdict {verdict} binds nothing")
    if platforms and not destination.get("index_digest"):
        why = "DST holds no index to bind its platforms to"
        return Prepared.nothing(MIRROR_V1, signer.key_id, why)
    unbound = [p for p in platforms if str(p["verdict"]) not in BINDING_VERDICTS]
    if unbound:  # the index's verdict is the worst of its platforms': this cannot happen
        named = ", ".join(f"{p['destination'].get('platform')} {p['verdict']}" for p in unbound)
        return Prepared.nothing(MIRROR_V1, signer.key_id, f"not every platform binds ({named})")
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
    if entries:  # the index and each platform's manifest, digests already known
        subjects = [Digest(str(destination["index_digest"]))] + [
            Digest(entry.destination.manifest_digest) for entry in entries
        ]
        repo = Reference(reference.registry, reference.repository)
        return prepare_subjects(signer, repo, subjects, MIRROR_V1, predicate)
    from imagekit.registry.client import RegistryClient

    with RegistryClient(insecure=insecure) as client:  # one image: its manifest alone
        return prepare_reference(
            signer,
            reference.pinned_only(str(destination["manifest_digest"])),
            MIRROR_V1,
            predicate,
            platform=platform,
            client=client,
        )


def attach_mirror(prepared: Prepared, insecure: tuple[str, ...] = ()) -> AttestOutcome:
    """Attach the signed binding to DST once its record is written, through a client that
    reaches DST as the mirror did (never raises for a registry fault)."""
    from imagekit.registry.client import RegistryClient

    with RegistryClient(insecure=insecure) as client:
        return prepared.attach(client)
