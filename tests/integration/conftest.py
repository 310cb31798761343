"""Fixtures the final-pull tests share (engine and containerd)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from imagekit.engine import Engine
from tests.support import tiny_image as tiny
from tests.support.registries import RunningRegistry


@pytest.fixture
def tiny_image(
    engine: Engine, registry: RunningRegistry, tmp_path: Path
) -> Iterator[tiny.TinyImage]:
    """A one-file image in the loopback registry and not in the engine."""
    with tiny.tiny_image(engine, registry, tmp_path) as image:
        yield image
