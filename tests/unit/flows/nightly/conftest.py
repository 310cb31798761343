"""The workspace every test of a night runs in: a fresh one with a plans folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.workspace import Workspace


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "p"
    (root / "manifests").mkdir(parents=True)
    return Workspace.at(root)
