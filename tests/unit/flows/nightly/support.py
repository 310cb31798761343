"""What the night's unit tests share: the repository's root, a digest, and a record appended."""

from __future__ import annotations

from pathlib import Path

from imagekit.ledger import append_record
from imagekit.workspace import Workspace

DIGEST = "sha256:" + "b" * 64
REPO_ROOT = Path(__file__).resolve().parents[4]


def record(ws: Workspace, kind: str, status: str, plan: str = "demo", **images: str) -> None:
    append_record(ws, kind, plan=plan, images=images, status=status, scope="test")
