"""imagekit/builders/choice.py: which builder a build takes, and what it refuses before any."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from imagekit.attest.keys import generate_key_pair
from imagekit.builders.choice import build_image
from imagekit.builders.options import BuildOptions
from imagekit.errors import ImagekitError, UsageError
from imagekit.workspace import Workspace

TARGETS: list[dict[str, Any]] = [
    {"buildkit": "tcp://127.0.0.1:1"},
    {"buildx_builder": "no-such-builder"},
    {"builder": "registry"},
]


def _overlay_only(workspace: Workspace) -> str:
    """The demo plan without its pip step: a plan the registry builder takes."""
    data = yaml.safe_load((workspace.plans_dir / "demo.yaml").read_text())
    data["name"] = "demo-overlay"
    data["steps"] = [s for s in data["steps"] if s["kind"] != "pip_install"]
    (workspace.plans_dir / "demo-overlay.yaml").write_text(yaml.safe_dump(data))
    (workspace.dockerfiles_dir / "demo-overlay").symlink_to(workspace.dockerfiles_dir / "demo")
    return "demo-overlay"


@pytest.mark.parametrize("target", TARGETS, ids=["buildkit", "buildx", "registry"])
def test_every_builder_takes_sign_key_and_refuses_a_key_that_cannot_sign_before_building(
    workspace: Workspace, tmp_path: Path, target: dict[str, Any]
) -> None:
    """--sign-key reaches the remote and registry builders (they attest provenance now):
    a public key given as the signing key is exit 2 naming the file, before the daemon is
    asked, anything is staged or pushed, or evidence is written."""
    pair = generate_key_pair(tmp_path / "k")
    options = BuildOptions(push="127.0.0.1:1/r", sign_key=pair.public, **target)
    runs = list(workspace.evidence_dir.iterdir())
    with pytest.raises(UsageError, match="is a public key") as info:
        build_image(workspace, _overlay_only(workspace), options)
    assert info.value.exit_code == 2
    assert str(pair.public) in info.value.message
    assert list(workspace.evidence_dir.iterdir()) == runs


@pytest.mark.parametrize("target", TARGETS[:2], ids=["buildkit", "buildx"])
def test_a_good_key_gets_past_the_key_check_to_the_builder_itself(
    workspace: Workspace, tmp_path: Path, target: dict[str, Any]
) -> None:
    """With a private key the build goes on to the daemon, which is not there: exit 3 for
    the address no buildkitd answers, exit 2 for a builder buildx does not know; never the
    old "--sign-key is not supported" refusal."""
    pair = generate_key_pair(tmp_path / "k")
    options = BuildOptions(push="127.0.0.1:1/r", sign_key=pair.private, **target)
    with pytest.raises(ImagekitError) as info:
        build_image(workspace, "demo", options)
    assert "--sign-key" not in str(info.value)
    assert info.value.exit_code == (3 if "buildkit" in target else 2)
