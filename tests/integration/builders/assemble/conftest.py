"""Fixtures of the registry builder's tests: plans written into the test workspace and bases
written straight into the real registry (the engine images a test pulled go into
``created_refs``, tests/integration/conftest.py, which removes them after).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagekit.workspace import Workspace
from tests.support.images import Writer
from tests.support.registries import RunningRegistry

PlanWriter = Callable[..., str]


@pytest.fixture
def writer(registry: RunningRegistry) -> Iterator[Writer]:
    made = Writer(registry.host)
    yield made
    made.close()


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    """A layer-index cache of this test's own, so "cold" means cold."""
    path = tmp_path / "cache"
    path.mkdir()
    return path


@pytest.fixture
def write_plan(workspace: Workspace) -> PlanWriter:
    """write_plan(name, base, steps, files={source: bytes | (bytes, mode)}, **plan keys)."""

    def write(
        name: str,
        base: str,
        steps: list[dict[str, Any]],
        files: dict[str, bytes | tuple[bytes, int]] | None = None,
        *,
        platform: str = "linux/amd64",
        **extra: Any,
    ) -> str:
        folder = workspace.dockerfiles_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        for source, content in (files or {}).items():
            data, mode = content if isinstance(content, tuple) else (content, 0o644)
            path = folder / source
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            path.chmod(mode)
        plan = {"name": name, "base": {"reference": base, "platform": platform}, "steps": steps}
        plan.update(extra)
        (workspace.plans_dir / f"{name}.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
        return name

    return write
