"""Carrying an image's attachments with it: `imagekit mirror --copy` copies, for each digest
of the image (the index and each platform's manifest), cosign's ``.att`` and ``.sig`` tags
and the OCI referrers (their fallback index and every artifact it lists) from SRC's
repository to DST's.

A copy keeps digests, so what was attached to SRC's digests is about DST's too and still
verifies there. What DST's tags already hold is kept: entries are added to them
(imagekit.registry.tagupdate), never replaced.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from imagekit.attest.cosign_tags import att_tag, layers_manifest, sig_tag
from imagekit.errors import RegistryProtocolError
from imagekit.refs import Digest, Reference
from imagekit.registry.blob_upload import BlobSource
from imagekit.registry.client import RegistryClient
from imagekit.registry.manifest import (
    OCI_CONFIG,
    OCI_INDEX,
    OCI_MANIFEST,
    Descriptor,
    DescriptorModel,
)
from imagekit.registry.referrers import fallback_tag
from imagekit.registry.tagupdate import Merged, TagDocument, read_tag, update_tag
from imagekit.registry.upload import copy_image, push_blobs


def _entries(document: TagDocument | None, key: str) -> list[dict[str, Any]]:
    if document is None:
        return []
    parsed = document.parsed()
    items = parsed.get(key) if isinstance(parsed, dict) else None
    return [item for item in items or [] if isinstance(item, dict) and "digest" in item]


def _descriptor(entry: dict[str, Any], src: Reference, tag: str) -> Descriptor:
    """An entry of SRC's tag as a descriptor; one the registry serves without a media type,
    a size or a well-formed digest is the registry's fault (exit 3), not the user's."""
    try:
        return Descriptor.from_model(DescriptorModel.model_validate(entry))
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "entry"
        raise RegistryProtocolError(
            f"{src.name}:{tag} lists an entry that cannot be copied ({where}: {first['msg']})",
            registry=src.registry,
            repository=src.repository,
            hint="the attachment is malformed where the source registry stores it; the image "
            "itself was copied, its attachments were not",
        ) from None


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.get("digest") == b.get("digest") and a.get("annotations") == b.get("annotations")


def _carry_layers(client: RegistryClient, src: Reference, dst: Reference, tag: str) -> int:
    """Add SRC's layers of a .att/.sig tag to DST's; how many were new there."""
    source = read_tag(client, src, tag)
    layers = _entries(source, "layers")
    if not layers:
        return 0
    blobs = [BlobSource(_descriptor(layer, src, tag), repository=src) for layer in layers]
    added = 0

    def holds(document: TagDocument) -> bool:
        there = _entries(document, "layers")
        return all(any(_same(layer, t) for t in there) for layer in layers)

    def merge(document: TagDocument | None) -> Merged:
        nonlocal added
        there = _entries(document, "layers")
        new = [layer for layer in layers if not any(_same(layer, t) for t in there)]
        added = len(new)
        config, body = layers_manifest([*there, *new])
        push_blobs(
            client,
            dst,
            [
                BlobSource(
                    Descriptor(OCI_CONFIG, Digest.of_bytes(config), len(config)),
                    data=lambda: [config],
                )
            ],
        )
        return Merged(body, OCI_MANIFEST)

    update_tag(client, dst, tag, blobs=blobs, merge=merge, holds=holds)
    return added


def _carry_referrers(
    client: RegistryClient, src: Reference, dst: Reference, subject: Digest
) -> int:
    tag = fallback_tag(subject)
    listed = _entries(read_tag(client, src, tag), "manifests")
    if not listed:
        return 0
    for entry in listed:
        digest = _descriptor(entry, src, tag).digest
        copy_image(client, src.pinned_only(digest), dst.pinned_only(digest))
    added = 0

    def holds(document: TagDocument) -> bool:
        there = {e["digest"] for e in _entries(document, "manifests")}
        return all(entry["digest"] in there for entry in listed)

    def merge(document: TagDocument | None) -> Merged:
        nonlocal added
        there = _entries(document, "manifests")
        known = {e["digest"] for e in there}
        new = [entry for entry in listed if entry["digest"] not in known]
        added = len(new)
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [*there, *new]}
        return Merged(json.dumps(index, separators=(",", ":")).encode(), OCI_INDEX)

    update_tag(client, dst, tag, blobs=(), merge=merge, holds=holds)
    return added


def carry_attachments(
    client: RegistryClient, src: Reference, dst: Reference, subjects: Sequence[Digest]
) -> dict[str, int]:
    """Copy what is attached to SUBJECTS in SRC's repository into DST's; the counts added."""
    src_repo = Reference(src.registry, src.repository)
    dst_repo = Reference(dst.registry, dst.repository)
    counts = {"attestations": 0, "signatures": 0, "referrers": 0}
    for subject in subjects:
        counts["attestations"] += _carry_layers(client, src_repo, dst_repo, att_tag(subject))
        counts["signatures"] += _carry_layers(client, src_repo, dst_repo, sig_tag(subject))
        counts["referrers"] += _carry_referrers(client, src_repo, dst_repo, subject)
    return counts
