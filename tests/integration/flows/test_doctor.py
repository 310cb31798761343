"""`imagekit doctor` against the real engine, BuildKit and registries, through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration

IMAGEKIT = str(Path(sys.executable).parent / "imagekit")


def doctor(*args: str) -> tuple[int, dict[str, object]]:
    proc = subprocess.run(
        [IMAGEKIT, "doctor", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout)  # exactly one JSON document


def statuses(document: dict[str, object]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in document["checks"]}  # type: ignore[attr-defined]


def test_doctor_passes_for_the_demo_plan(
    engine: Engine,
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    docker_config: Path,
) -> None:
    code, document = doctor(
        "demo",
        "--base",
        base_image.reference,
        "--registry",
        registry.host,
        "--mirror",
        registry.host + "/mirror",
    )
    checks = statuses(document)
    assert code == 0, [c for c in document["checks"] if c["status"] != "ok"]  # type: ignore[attr-defined]
    for name in (
        "engine",
        "buildkit",
        "base",
        "disk",
        "platform",
        "ca-bundle",
        "registry push",
        "push access push",
        "push access mirror",
    ):
        assert checks[name] == "ok", document


def test_doctor_says_no_for_a_foreign_platform_and_a_dead_registry(
    engine: Engine,
    base_image: BaseImage,
    workspace: Workspace,
    docker_config: Path,
) -> None:
    from tests.support.registries import free_port

    plan = workspace.plans_dir / "demo.yaml"
    plan.write_text(plan.read_text().replace("platform: linux/amd64", "platform: linux/s390x"))
    code, document = doctor(
        "demo", "--base", base_image.reference, "--registry", f"127.0.0.1:{free_port()}"
    )
    checks = statuses(document)
    assert code == 1
    assert document["ok"] is False
    assert checks["base"] == "no"  # the base has no linux/s390x image
    assert checks["registry push"] == "no"
    assert checks["disk"] == "no"  # cannot be sized without the base: fail closed
    if not Path("/proc/sys/fs/binfmt_misc/qemu-s390x").exists():
        assert checks["platform"] == "no"
