"""`plans pin-overlay` reads the destination's hash from the real base image."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from imagekit.cli.plans_cmd import command as plans_command
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage

pytestmark = pytest.mark.integration

AV_ABOUT_SHA256 = "75e5d191c344a5bdf61c1ee3e720661cb2d0c38e8d3bfb90b587b8107303c92e"


def test_pin_overlay_fills_the_hash_and_keeps_the_rest(
    engine: Engine, base_image: BaseImage, workspace: Workspace
) -> None:
    path = workspace.plans_dir / "demo.yaml"
    original = path.read_text()
    path.write_text(original.replace(AV_ABOUT_SHA256, "a" * 64))

    dry = CliRunner().invoke(
        plans_command, ["pin-overlay", "demo", "--base", base_image.reference, "--dry-run"]
    )
    assert dry.exit_code == 0, dry.stderr
    assert "not written (--dry-run)" in dry.stdout
    assert "a" * 64 in path.read_text()

    result = CliRunner().invoke(
        plans_command, ["pin-overlay", "demo", "--base", base_image.reference, "--json"]
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["rewritten"] is True
    assert [(o["status"], o["found"]) for o in doc["overlays"]] == [
        ("updated", f"sha256:{AV_ABOUT_SHA256}"),
        ("ok", "absent"),
    ]
    assert path.read_text() == original  # only the hash changed back; comments kept
    # The stopped container it copied from is gone.
    left = engine.client.container.list(
        all=True, filters=[("label", "io.imagekit.purpose=pin-overlay")]
    )
    assert left == []


def test_pin_overlay_refuses_when_the_absent_file_exists(
    engine: Engine, base_image: BaseImage, workspace: Workspace
) -> None:
    path = workspace.plans_dir / "demo.yaml"
    text = path.read_text().replace(
        "destination: /usr/local/bin/imagekit-demo-hello", "destination: /usr/bin/python3"
    )
    path.write_text(text)
    result = CliRunner().invoke(
        plans_command, ["pin-overlay", "demo", "--base", base_image.reference]
    )
    assert result.exit_code == 1
    assert "/usr/bin/python3: expected absent, base has present" in result.stderr
    assert path.read_text() == text
