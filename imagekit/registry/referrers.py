"""OCI 1.1 referrers: artifacts that name an image as their ``subject``.

(https://github.com/opencontainers/distribution-spec/blob/main/spec.md#listing-referrers)
An artifact is an image manifest with ``artifactType`` and ``subject``; a registry with the
referrers API indexes it itself (and answers the PUT with an ``OCI-Subject`` header).
Where the registry has no such API (Debian's registry 2.8.2 answers 404), the client keeps
the list itself, the "referrers tag schema": an OCI index under the tag ``sha256-<hex>`` of
the subject, one descriptor per artifact (with its artifactType and annotations), updated by
adding, never replacing (:mod:`imagekit.registry.tagupdate`). `oras discover` reads
either.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imagekit.errors import RegistryNotFound
from imagekit.refs import Digest, Reference
from imagekit.registry.blob_upload import PUSH, BlobSource
from imagekit.registry.client import RegistryClient
from imagekit.registry.manifest import (
    OCI_INDEX,
    OCI_MANIFEST,
    Descriptor,
    parse_index,
)
from imagekit.registry.tagupdate import Merged, TagDocument, read_tag, update_tag
from imagekit.registry.upload import push_blobs

EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_BLOB = b"{}"


def fallback_tag(subject: Digest) -> str:
    return f"{subject.algorithm}-{subject.hex}"


@dataclass(frozen=True)
class Referrer:
    digest: Digest
    size: int
    artifact_type: str | None
    annotations: Mapping[str, str]

    def descriptor(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "mediaType": OCI_MANIFEST,
            "digest": str(self.digest),
            "size": self.size,
        }
        if self.artifact_type:
            entry["artifactType"] = self.artifact_type
        if self.annotations:
            entry["annotations"] = dict(self.annotations)
        return entry


@dataclass(frozen=True)
class PushedReferrer:
    reference: Reference  # repo@digest of the artifact manifest
    referrer: Referrer
    indexed_by: str  # "registry" (referrers API) or "fallback tag sha256-<hex>"


def _descriptor(media_type: str, data: bytes) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": str(Digest.of_bytes(data)), "size": len(data)}


def push_referrer(
    client: RegistryClient,
    repo: Reference,
    subject: Descriptor,
    artifact_type: str,
    layers: Sequence[tuple[str, bytes, Mapping[str, str]]],
    annotations: Mapping[str, str] | None = None,
) -> PushedReferrer:
    """Push an artifact (LAYERS: media type, bytes, annotations) whose subject is SUBJECT,
    and make it listed: by the registry where it says it indexed it, else in the fallback
    index this client maintains."""
    blobs = [BlobSource(_bare(EMPTY_MEDIA_TYPE, EMPTY_BLOB), data=lambda: [EMPTY_BLOB])]
    layer_entries = []
    for media_type, data, layer_annotations in layers:
        blobs.append(BlobSource(_bare(media_type, data), data=_constant(data)))
        entry = _descriptor(media_type, data)
        if layer_annotations:
            entry["annotations"] = dict(layer_annotations)
        layer_entries.append(entry)
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": _descriptor(EMPTY_MEDIA_TYPE, EMPTY_BLOB),
        "layers": layer_entries,
        "subject": {
            "mediaType": subject.media_type,
            "digest": str(subject.digest),
            "size": subject.size,
        },
    }
    if annotations:
        manifest["annotations"] = dict(annotations)
    body = json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode()
    digest = Digest.of_bytes(body)
    push_blobs(client, repo, blobs)
    response = client.request(
        "PUT",
        repo,
        f"manifests/{digest}",
        scope_actions=PUSH,
        headers={"Content-Type": OCI_MANIFEST},
        content=body,
    )
    referrer = Referrer(digest, len(body), artifact_type, dict(annotations or {}))
    pinned = repo.pinned_only(digest)
    if response.headers.get("OCI-Subject"):
        return PushedReferrer(pinned, referrer, "registry")
    tag = fallback_tag(subject.digest)
    wanted = referrer.descriptor()

    def holds(document: TagDocument) -> bool:
        return any(entry.get("digest") == str(digest) for entry in _entries(document))

    def merge(document: TagDocument | None) -> Merged:
        entries = [e for e in _entries(document) if e.get("digest") != str(digest)] + [wanted]
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
        return Merged(json.dumps(index, separators=(",", ":")).encode(), OCI_INDEX)

    update_tag(client, repo, tag, blobs=(), merge=merge, holds=holds)
    return PushedReferrer(pinned, referrer, f"fallback tag {tag}")


def list_referrers(
    client: RegistryClient, repo: Reference, subject: Digest, artifact_type: str | None = None
) -> tuple[tuple[Referrer, ...], str]:
    """The artifacts naming SUBJECT (through the API, else the fallback tag), and which."""
    try:
        response = client.request(
            "GET", repo, f"referrers/{subject}", headers={"Accept": OCI_INDEX}
        )
    except RegistryNotFound:
        response = None
    if response is not None and response.headers.get("Content-Type", "").startswith(OCI_INDEX):
        index = parse_index(response.content, OCI_INDEX, repo)
        source = "registry"
        entries = [m.model_dump(exclude_none=True, mode="json") for m in index.manifests]
    else:
        source = f"fallback tag {fallback_tag(subject)}"
        entries = _entries(read_tag(client, repo, fallback_tag(subject)))
    found = []
    for entry in entries:
        kind = entry.get("artifactType")
        if artifact_type is not None and kind != artifact_type:
            continue
        found.append(
            Referrer(
                Digest(str(entry["digest"])),
                int(entry["size"]),
                kind,
                dict(entry.get("annotations") or {}),
            )
        )
    return tuple(found), source


def _entries(document: TagDocument | None) -> list[dict[str, Any]]:
    if document is None or document.media_type != OCI_INDEX:
        return []
    parsed = document.parsed()
    manifests = parsed.get("manifests") if isinstance(parsed, dict) else None
    return [m for m in manifests or [] if isinstance(m, dict) and "digest" in m]


def _bare(media_type: str, data: bytes) -> Descriptor:
    return Descriptor(media_type, Digest.of_bytes(data), len(data))


def _constant(data: bytes) -> Any:
    return lambda: [data]
