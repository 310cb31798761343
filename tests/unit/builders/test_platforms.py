"""The result of a build of several platforms: a built image that renders each platform."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.builders.assemble.check import AssertionRun
from imagekit.builders.built import BuiltImage
from imagekit.builders.platforms import PlatformsResult
from imagekit.builders.platforms_index import PlatformImage
from imagekit.cli.build_cmd import _human


def _result(tmp_path: Path) -> PlatformsResult:
    def image(platform: str, how: str, hexdigit: str) -> PlatformImage:
        run = AssertionRun("passed", f"the plan's 7 assertions passed, {how}", None)
        digest = "sha256:" + hexdigit * 64
        return PlatformImage(platform, digest, "m", 1, "sha256:" + "c" * 64, f"r/x@{digest}", run)

    return PlatformsResult(
        plan="demo-two",
        plan_sha256="0" * 64,
        base="r/base@sha256:" + "1" * 64,
        builder="buildkit",
        address="unix:///b.sock",
        pushed="r/x@sha256:" + "f" * 64,
        index_digest="sha256:" + "f" * 64,
        index_media_type="application/vnd.oci.image.index.v1+json",
        images=(
            image("linux/amd64", "native (linux/amd64)", "a"),
            image("linux/arm64", "emulated (qemu-aarch64)", "b"),
        ),
        evidence_dir=tmp_path,
        log=tmp_path / "build.log",
        dockerfile_sha256="2" * 64,
        ledger=(1, 2, 3),
    )


def test_the_result_is_a_built_image_and_renders_each_platform(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _result(tmp_path)
    assert isinstance(result, BuiltImage)
    assert result.manifest_digest == result.index_digest and result.runnable == result.pushed
    assert result.ledger_seqs == (1, 2, 3)
    document = result.to_json()
    assert [p["platform"] for p in document["platforms"]] == ["linux/amd64", "linux/arm64"]
    _human(result)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"built demo-two on unix:///b.sock: one index {result.pushed}"
    assert out[3] == "linux/arm64: sha256:" + "b" * 64
    assert "emulated (qemu-aarch64)" in out[4]
