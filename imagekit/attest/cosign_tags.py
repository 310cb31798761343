"""cosign's tag scheme: ``sha256-<hex>.att`` and ``sha256-<hex>.sig`` beside the image.

What `cosign attest`/`cosign sign` write without the new bundle format, and what `cosign
verify-attestation --key`/`cosign verify --key` read (checked against cosign 3.1.3 in the
tests): an OCI image manifest in the image's repository, tagged after the subject's
digest, with

- ``.att``: one layer per attestation, media type ``application/vnd.dsse.envelope.v1+json``,
  the DSSE envelope as its blob, annotated ``dev.cosignproject.cosign/signature: ""`` and
  ``predicateType: <uri>``;
- ``.sig``: one layer per signature, media type
  ``application/vnd.dev.cosign.simplesigning.v1+json``, the "simple signing" payload as its
  blob (the image's digest and repository), the base64 signature in the
  ``dev.cosignproject.cosign/signature`` annotation;

and a config whose ``rootfs.diff_ids`` are the layers' digests (the layers are not
compressed). A new layer is added to what the tag holds, never replacing it
(:func:`imagekit.registry.tagupdate.update_tag`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from imagekit.attest.dsse import DSSE_MEDIA_TYPE
from imagekit.attest.signer import Signer
from imagekit.errors import ReferenceFormatError
from imagekit.refs import Digest, Reference
from imagekit.registry.blob_upload import BlobSource
from imagekit.registry.client import RegistryClient
from imagekit.registry.manifest import OCI_CONFIG, OCI_MANIFEST, Descriptor
from imagekit.registry.tagupdate import Merged, TagDocument, TagUpdate, read_tag, update_tag
from imagekit.registry.upload import push_blobs

SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
PREDICATE_TYPE_ANNOTATION = "predicateType"
SIMPLE_SIGNING_MEDIA_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
_ZERO_TIME = "0001-01-01T00:00:00Z"


def att_tag(digest: Digest) -> str:
    return f"{digest.algorithm}-{digest.hex}.att"


def sig_tag(digest: Digest) -> str:
    return f"{digest.algorithm}-{digest.hex}.sig"


@dataclass(frozen=True)
class AttachedLayer:
    """One layer of a .att or .sig manifest: its descriptor (annotations included)."""

    descriptor: Descriptor


def _layers(document: TagDocument | None) -> list[dict[str, Any]]:
    if document is None:
        return []
    parsed = document.parsed()
    layers = parsed.get("layers") if isinstance(parsed, dict) else None
    return [layer for layer in layers or [] if isinstance(layer, dict) and "digest" in layer]


def layers_manifest(layers: list[dict[str, Any]]) -> tuple[bytes, bytes]:
    """The config's and the manifest's bytes for these layers, as cosign shapes them."""
    config = {
        "architecture": "",
        "config": {},
        "created": _ZERO_TIME,
        "history": [{"created": _ZERO_TIME} for _ in layers],
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]},
    }
    config_bytes = json.dumps(config, separators=(",", ":"), sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {
            "mediaType": OCI_CONFIG,
            "digest": str(Digest.of_bytes(config_bytes)),
            "size": len(config_bytes),
        },
        "layers": layers,
    }
    return config_bytes, json.dumps(manifest, separators=(",", ":")).encode()


def _append(
    client: RegistryClient,
    repo: Reference,
    tag: str,
    media_type: str,
    data: bytes,
    annotations: Mapping[str, str],
) -> TagUpdate:
    digest = Digest.of_bytes(data)
    entry = {
        "mediaType": media_type,
        "size": len(data),
        "digest": str(digest),
        "annotations": dict(annotations),
    }
    pushed_configs: set[Digest] = set()

    def holds(document: TagDocument) -> bool:
        return any(
            layer.get("digest") == str(digest)
            and layer.get("annotations", {}).get(SIGNATURE_ANNOTATION)
            == annotations[SIGNATURE_ANNOTATION]
            for layer in _layers(document)
        )

    def merge(document: TagDocument | None) -> Merged:
        layers = [*_layers(document), entry]
        config_bytes, body = layers_manifest(layers)
        config_digest = Digest.of_bytes(config_bytes)
        if config_digest not in pushed_configs:
            push_blobs(
                client,
                repo,
                [
                    BlobSource(
                        Descriptor(OCI_CONFIG, config_digest, len(config_bytes)),
                        data=lambda: [config_bytes],
                    )
                ],
            )
            pushed_configs.add(config_digest)
        return Merged(body, OCI_MANIFEST)

    layer_blob = BlobSource(Descriptor(media_type, digest, len(data)), data=lambda: [data])
    return update_tag(client, repo, tag, blobs=[layer_blob], merge=merge, holds=holds)


def attach_attestation(
    client: RegistryClient,
    repo: Reference,
    subject: Digest,
    envelope: bytes,
    predicate_type: str,
) -> TagUpdate:
    """Add ENVELOPE (a signed DSSE envelope) to SUBJECT's ``.att`` tag in REPO."""
    annotations = {SIGNATURE_ANNOTATION: "", PREDICATE_TYPE_ANNOTATION: predicate_type}
    return _append(client, repo, att_tag(subject), DSSE_MEDIA_TYPE, envelope, annotations)


def simple_signing_payload(repo: Reference, subject: Digest) -> bytes:
    """cosign's "simple signing" payload for SUBJECT in REPO (what `cosign verify` checks)."""
    document = {
        "critical": {
            "identity": {"docker-reference": repo.name},
            "image": {"docker-manifest-digest": str(subject)},
            "type": "cosign container image signature",
        },
        "optional": None,
    }
    return json.dumps(document, separators=(",", ":")).encode()


def attach_signature(
    client: RegistryClient, repo: Reference, subject: Digest, signer: Signer
) -> TagUpdate:
    """Sign SUBJECT (cosign's simple signing form) and add it to its ``.sig`` tag in REPO."""
    payload = simple_signing_payload(repo, subject)
    signature = base64.b64encode(signer.sign(payload)).decode()
    return _append(
        client,
        repo,
        sig_tag(subject),
        SIMPLE_SIGNING_MEDIA_TYPE,
        payload,
        {SIGNATURE_ANNOTATION: signature},
    )


@dataclass(frozen=True)
class TagLayer:
    """One layer entry of a .att or .sig manifest as listed: its descriptor, or why it is
    none (a digest that is not one, a size that is negative or not a number)."""

    position: int
    named: str  # the digest as the entry writes it, to name the entry by
    descriptor: Descriptor | None
    problem: str | None = None


def tag_layers(client: RegistryClient, repo: Reference, tag: str) -> tuple[TagLayer, ...]:
    """Every layer entry TAG's manifest lists now (empty when there is no such tag), each
    with its descriptor or the reason it has none."""
    found = []
    for position, layer in enumerate(_layers(read_tag(client, repo, tag))):
        named = str(layer.get("digest"))[:100]
        size = layer.get("size")
        media_type = layer.get("mediaType")
        annotations = layer.get("annotations") or {}
        if type(size) is not int or size < 0:
            found.append(TagLayer(position, named, None, f"size {str(size)[:40]}: not a size"))
            continue
        if not isinstance(media_type, str) or not isinstance(annotations, dict):
            found.append(TagLayer(position, named, None, "a malformed layer entry"))
            continue
        try:
            digest = Digest(str(layer["digest"]))
        except ReferenceFormatError:
            found.append(TagLayer(position, named, None, "its digest is not a digest"))
            continue
        labels = {str(k): str(v) for k, v in annotations.items()}
        found.append(
            TagLayer(position, named, Descriptor(media_type, digest, size, annotations=labels))
        )
    return tuple(found)


def attached_layers(client: RegistryClient, repo: Reference, tag: str) -> tuple[Descriptor, ...]:
    """The layers a .att or .sig tag holds now (empty when there is no such tag); a
    malformed entry names nothing to trust and is left out."""
    return tuple(layer.descriptor for layer in tag_layers(client, repo, tag) if layer.descriptor)
