"""The workspace the pod-record tests write their ledger into: a fresh one under tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.workspace import Workspace


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace.at(tmp_path)
