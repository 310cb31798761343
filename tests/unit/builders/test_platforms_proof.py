"""What a build of several platforms reads from a daemon before it stages anything."""

from __future__ import annotations

from imagekit.builders.platforms_proof import daemon_platforms
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
