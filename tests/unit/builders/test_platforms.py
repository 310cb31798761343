"""What a build of several platforms reads from a daemon before it stages anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.builders.assemble.check import AssertionRun
from imagekit.builders.built import BuiltImage
from imagekit.builders.platforms import PlatformImage, PlatformsResult, daemon_platforms
from imagekit.cli.build_cmd import _human
from imagekit.plans.model import same_platform_key
from imagekit.refs import parse_platform

# `buildctl debug workers` of buildkitd v0.34 on this amd64 host, qemu-aarch64 registered.
WORKERS = (
    "ID\t\t\t\tPLATFORMS\n"
    "wrzojs3ri423h0f01wg8jxlt4\tlinux/amd64,linux/amd64/v2,linux/amd64/v3,linux/amd64/v4,"
    "linux/arm64,linux/386\n"
)


def test_the_platforms_a_daemon_lists_are_read_from_its_workers() -> None:
    listed = [str(p) for p in daemon_platforms(WORKERS)]
    assert listed == [
        "linux/amd64", "linux/amd64/v2", "linux/amd64/v3", "linux/amd64/v4", "linux/arm64",
        "linux/386",
    ]  # fmt: skip
    keys = {same_platform_key(p) for p in daemon_platforms(WORKERS)}
    # arm64 written with its only variant is the same platform; s390x is not offered.
    assert same_platform_key(parse_platform("linux/arm64/v8")) in keys
    assert same_platform_key(parse_platform("linux/s390x")) not in keys


def test_a_daemon_without_workers_offers_nothing() -> None:
    assert daemon_platforms("ID\tPLATFORMS\n") == []
    assert daemon_platforms("") == []


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
