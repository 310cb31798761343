"""`plans pin-overlay` reads the destination's hash from the real base image (a plan of
several platforms: from each platform's image in the real registry)."""

from __future__ import annotations

import json
import secrets

import pytest
from click.testing import CliRunner

from imagekit.cli.plans_cmd import command as plans_command
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.images import Writer
from tests.support.registries import RunningRegistry
from tests.support.two_platforms import (
    DESTINATION,
    ORIGINAL,
    UPSTREAM_CHANGED,
    image,
    pinned_plan,
    plans_json,
    sha256,
)

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


def _pin(ws: Workspace, name: str) -> tuple[int, dict[str, object]]:
    return plans_json(ws, "pin-overlay", name)


def test_a_plan_of_two_platforms_is_pinned_from_each_platforms_image_in_the_registry(
    registry: RunningRegistry, workspace: Workspace
) -> None:
    """No engine, nothing pulled: the file is read in each platform's image; both have the
    same bytes, so the one hash is written."""
    repo = f"pin/two-{secrets.token_hex(3)}"
    with Writer(registry.host) as writer:
        plan = pinned_plan(writer, workspace, repo, "pin-two", replaces="b" * 64)
    path, original = plan.path, plan.text
    code, pinned = _pin(workspace, "pin-two")
    assert code == 0, pinned
    assert pinned["rewritten"] is True
    assert pinned["overlays"] == [
        {
            "step": 0,
            "destination": DESTINATION,
            "expected": "sha256:" + "b" * 64,
            "found": f"sha256:{sha256(ORIGINAL)}",
            "status": "updated",
        }
    ]
    assert path.read_text() == original.replace("b" * 64, sha256(ORIGINAL))
    code, again = _pin(workspace, "pin-two")
    assert code == 0 and again["rewritten"] is False
    overlays = again["overlays"]
    assert isinstance(overlays, list) and overlays[0]["status"] == "unchanged"


def test_a_plan_of_two_platforms_whose_bases_differ_there_is_not_pinned(
    registry: RunningRegistry, workspace: Workspace
) -> None:
    """amd64 and arm64 ship other bytes at the destination: one replaces: cannot hold for
    both, so nothing is written and each platform's hash is named."""
    repo = f"pin/differ-{secrets.token_hex(3)}"
    with Writer(registry.host) as writer:
        images = {
            "amd64": image(writer, repo, "amd64", ORIGINAL),
            "arm64": image(writer, repo, "arm64", UPSTREAM_CHANGED),
        }
        plan = pinned_plan(writer, workspace, repo, "pin-differ", images, replaces="c" * 64)
    path, original = plan.path, plan.text
    code, refused = _pin(workspace, "pin-differ")
    assert code == 1, refused
    error = refused["error"]
    assert isinstance(error, dict)
    message = str(error["message"])
    assert "the platforms' bases differ there" in message
    assert f"linux/amd64 has sha256:{sha256(ORIGINAL)}" in message
    assert f"linux/arm64 has sha256:{sha256(UPSTREAM_CHANGED)}" in message
    assert path.read_text() == original
