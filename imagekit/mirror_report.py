"""What a mirror verification is asked and what it says: its options, each layer's check,
and the report (imagekit.mirror runs it; docs/ARCHITECTURE.md says what each verdict proves).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagekit.kinds.mirror import MirrorVerdict as Verdict
from imagekit.layers.media import LayerLimits, MediaTypePolicy
from imagekit.refs import Platform
from imagekit.registry import ResolvedImage

#: Parallel layer downloads unless told otherwise: one per core would be 64 requests at once
#: on a large machine, which Docker Hub's and others' rate limits and connection caps
#: answer with 429 (the Docker CLI pulls 3 layers at once, containerd 3, skopeo 6).
DEFAULT_DOWNLOADS = 4


@dataclass(frozen=True)
class MirrorOptions:
    platform: Platform | None = None
    copy: bool = False
    allow_config_differences: bool = False
    limits: LayerLimits = field(default_factory=LayerLimits)
    policy: MediaTypePolicy = MediaTypePolicy.DETECT
    # Parallel layer verifications; None means one per core, at most DEFAULT_DOWNLOADS.
    workers: int | None = None
    insecure: tuple[str, ...] = ()
    docker_config: Path | None = None
    record: bool = True
    # The plan the image belongs to, for the ledger record (`imagekit pipeline` sets it).
    plan: str | None = None
    # Sign a positive verdict as an attestation on DST binding it to SRC (imagekit/attest).
    sign_key: Path | None = None


@dataclass(frozen=True)
class LayerCheck:
    index: int
    source_media_type: str | None
    destination_media_type: str
    source_digest: str | None
    destination_digest: str
    destination_size: int
    # SRC's config diff_ids[i] (what the content must be) and DST's own claim
    expected_diff_id: str | None
    destination_config_diff_id: str | None
    actual_diff_id: str | None
    match: bool
    compression: str | None = None
    uncompressed_bytes: int | None = None
    seconds: float | None = None
    notes: tuple[str, ...] = ()
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "source_media_type": self.source_media_type,
            "destination_media_type": self.destination_media_type,
            "source_digest": self.source_digest,
            "destination_digest": self.destination_digest,
            "destination_size": self.destination_size,
            "expected_diff_id": self.expected_diff_id,
            "destination_config_diff_id": self.destination_config_diff_id,
            "actual_diff_id": self.actual_diff_id,
            "match": self.match,
            "compression": self.compression,
            "uncompressed_bytes": self.uncompressed_bytes,
            "seconds": self.seconds,
            "notes": list(self.notes),
            "error": self.error,
        }


@dataclass(frozen=True)
class MirrorReport:
    source: dict[str, Any] | None
    destination: dict[str, Any] | None
    verdict: Verdict
    message: str
    config_digest_equal: bool | None
    compressed_digests_equal: bool | None
    manifest_digest_equal: bool | None
    config_differences: tuple[str, ...]
    layers: tuple[LayerCheck, ...]
    notes: tuple[str, ...]
    allow_config_differences: bool
    copy: dict[str, Any] | None = None
    seconds: float | None = None
    evidence: Path | None = None
    error: dict[str, Any] | None = None
    attestation: dict[str, Any] | None = None  # with --sign-key: stored, or why not
    ledger_seqs: tuple[int, ...] = ()  # the mirror-verify record, when one was appended
    # An index verified platform by platform: each platform's own report (the fields above
    # then say what holds for all of them: the worst verdict, every layer).
    platforms: tuple[MirrorReport, ...] = ()

    @property
    def ok(self) -> bool:
        """The verdict passes (``config-differs`` only when config differences are allowed)."""
        return self.exit_code == 0

    @property
    def exit_code(self) -> int:
        if self.verdict in (Verdict.IDENTICAL, Verdict.CONTENT_IDENTICAL):
            return 0
        if self.verdict is Verdict.CONFIG_DIFFERS and self.allow_config_differences:
            return 0
        if self.verdict is Verdict.ERROR:
            return 3
        return 1

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": str(self.verdict),
            "message": self.message,
            "exit_code": self.exit_code,
            "source": self.source,
            "destination": self.destination,
            "config_digest_equal": self.config_digest_equal,
            "compressed_digests_equal": self.compressed_digests_equal,
            "manifest_digest_equal": self.manifest_digest_equal,
            "config_differences": list(self.config_differences),
            "layers": [layer.to_json() for layer in self.layers],
            "notes": list(self.notes),
            "copy": self.copy,
            "seconds": self.seconds,
            "evidence": str(self.evidence) if self.evidence else None,
            "error": self.error,
            **({"attestation": self.attestation} if self.attestation else {}),
            **({"platforms": [p.to_json() for p in self.platforms]} if self.platforms else {}),
        }


def resolution(image: ResolvedImage) -> dict[str, Any]:
    return {
        "reference": str(image.reference),
        "index_digest": str(image.index_digest) if image.index_digest else None,
        "platform": str(image.platform) if image.platform else None,
        "manifest_digest": str(image.manifest_digest),
        "manifest_media_type": image.manifest_media_type,
        "config_digest": str(image.config_digest),
        "layer_count": len(image.layers),
        "compressed_layer_bytes": image.compressed_layer_bytes,
    }
