"""imagekit/build/choice.py: which builder a build takes, and what it refuses before any."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.build.choice import build_image
from imagekit.build.options import BuildOptions
from imagekit.errors import UsageError
from imagekit.workspace import Workspace


@pytest.mark.parametrize("target", [{"buildkit": "tcp://127.0.0.1:1"}, {"buildx_builder": "b"}])
def test_sign_key_on_a_buildkit_of_its_own_is_refused_not_built_unattested(
    tmp_path: Path, target: dict[str, str]
) -> None:
    """The remote path signs no provenance yet: --sign-key there is exit 2 before anything is
    built or pushed, never an image pushed without the attestation asked for."""
    options = BuildOptions(push="127.0.0.1:1/r", sign_key=tmp_path / "k.key", **target)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="--sign-key is not supported with --buildkit") as info:
        build_image(Workspace.at(tmp_path), "demo", options)
    assert info.value.exit_code == 2
    assert not (tmp_path / "evidence").exists()
