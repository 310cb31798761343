"""What a registry build is asked (AssembleOptions) and what it answers (AssembleResult).

Apart from the flow (builder.py) so that the run's state, its records and the callers that
only read a result (the builder choice, the CLI) need not import the flow itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagekit.builders.assemble.check import AssertionRun
from imagekit.builders.assemble.guard import OverlayCheck
from imagekit.builders.assemble.layer import LayerBlob
from imagekit.builders.built import ConfigNamed, InRegistry, PlanBuild
from imagekit.image.view import LayerUse
from imagekit.registry.upload import CopyResult


@dataclass(frozen=True)
class AssembleOptions:
    """What a caller may choose about one registry build; the plan decides the rest.

    ``workers`` bounds memory while blobs are streamed between registries (one piece per
    worker); ``chunk_size`` None sends each blob in one PUT of known length, which every
    registry takes (GHCR refuses PATCH chunks over 4 MiB), a number sends PATCH chunks of
    at most that size (imagekit.registry.upload); ``cache_dir`` moves the layer-index cache.
    """

    push: str | None = None
    tag: str | None = None
    base_override: str | None = None
    index: bool = False
    assertions: bool = True
    chunk_size: int | None = None
    workers: int = 2
    cache_dir: Path | None = None
    sign_key: Path | None = None  # sign SLSA v1 provenance beside the accepted image
    candidate: str | None = None  # a night's candidate: the nightly-... tag it is built for


@dataclass(frozen=True)
class AssembleResult(ConfigNamed, InRegistry, PlanBuild):
    platform: str
    pushed: str  # repo@manifest digest
    tag: str  # repo:tag, put only once the assertions passed (or were not asked for)
    manifest_digest: str
    manifest_media_type: str
    config_digest: str
    index_digest: str | None
    layer: LayerBlob | None
    guard: tuple[OverlayCheck, ...]
    layers: tuple[LayerUse, ...]
    push: CopyResult
    assertions: AssertionRun
    epoch: int
    epoch_source: str
    seconds: float
    ledger: list[int] = field(default_factory=list)
    builder: str = field(default="registry", kw_only=True)

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "plan_sha256": self.plan_sha256,
            "builder": self.builder,
            "base": self.base,
            "platform": self.platform,
            "pushed": self.pushed,
            "tag": self.tag,
            "manifest_digest": self.manifest_digest,
            "manifest_media_type": self.manifest_media_type,
            "config_digest": self.config_digest,
            "image_id": self.image_id,
            "index_digest": self.index_digest,
            "layer": self.layer.to_json() if self.layer else None,
            "guard": [check.to_json() for check in self.guard],
            "base_layers": [use.to_json() for use in self.layers],
            "push": self.push.to_json(),
            "assertions": self.assertions.to_json(),
            "epoch": self.epoch,
            "epoch_source": self.epoch_source,
            "evidence_dir": str(self.evidence_dir),
            "log": str(self.log),
            "seconds": self.seconds,
            **self.records_json(),
        }
