"""One registry build under way: the state every step of the flow reads, its log, and the
image's documents as written.

The value the flow's steps (builder.py) and its records (records.py) pass between them,
kept apart from both so that neither imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from imagekit.attest.signer import Signer
from imagekit.builders.assemble.guard import OverlayCheck
from imagekit.builders.assemble.layer import LayerBlob
from imagekit.builders.assemble.result import AssembleOptions
from imagekit.builders.record import record_rejected
from imagekit.image.view import LayerUse
from imagekit.ledger import RejectedBuildDetails
from imagekit.ledger.record import GuardReport
from imagekit.plans.model import LoadedPlan
from imagekit.refs import Digest, Reference
from imagekit.registry import Descriptor, RegistryClient
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace


class Log:
    """Our own lines, to stderr and into the evidence log as they come."""

    def __init__(self, path: Path, echo: TextIO) -> None:
        self._file = path.open("x", encoding="utf-8")
        self._echo = echo
        self.lines: list[str] = []

    def __call__(self, text: str) -> None:
        line = f"imagekit: {text}\n"
        self.lines.append(text)
        self._file.write(line)
        self._file.flush()
        self._echo.write(line)
        self._echo.flush()

    def close(self) -> None:
        self._file.close()


@dataclass(frozen=True)
class Run:
    """One registry build under way: what every step reads, passed as one value."""

    workspace: Workspace
    loaded: LoadedPlan
    options: AssembleOptions
    target: Reference
    tag: str
    epoch: int
    epoch_source: str
    run_dir: Path
    log: Log
    client: RegistryClient
    engine: Engine | None
    started: float
    signer: Signer | None = None

    @property
    def log_path(self) -> Path:
        return self.run_dir / "build.log"

    @property
    def tagged(self) -> str:
        """repo:tag, the name the tag step puts."""
        return f"{self.target.name}:{self.tag}"

    def reject(self, details: RejectedBuildDetails, *, image: str) -> int:
        """Keep a failed attempt on record, as the engine path does (and no tag was put)."""
        self.log(f"build rejected ({details.reason}): {details.message}")
        return record_rejected(
            self.workspace, self.loaded, details, log_path=self.log_path, image=image,
            what="registry build (no tag was put)",
        )  # fmt: skip


@dataclass(frozen=True)
class Made:
    """The new image's documents, as written to the evidence folder and pushed."""

    layer: LayerBlob | None
    config: bytes
    config_desc: Descriptor
    manifest: bytes
    manifest_digest: Digest
    media_type: str


def make_guard_report(checks: Sequence[OverlayCheck], uses: Sequence[LayerUse]) -> GuardReport:
    return GuardReport.model_validate(
        {"checks": [c.to_json() for c in checks], "base_layers": [u.to_json() for u in uses]}
    )
