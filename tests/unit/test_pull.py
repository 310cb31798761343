"""The final pull's target (a digest required) and the platform it asks the registry for;
its comparison is tests/unit/test_pull_verdict.py's."""

from __future__ import annotations

import pytest

from imagekit.errors import ReferenceFormatError, UsageError
from imagekit.pull import _target, pulled_platform
from imagekit.refs import Digest, parse_reference

MANIFEST = Digest("sha256:" + "a" * 64)
OTHER = Digest("sha256:" + "d" * 64)
REF = parse_reference(f"127.0.0.1:5000/team/app@{MANIFEST}")


def test_target_needs_a_digest() -> None:
    with pytest.raises(UsageError, match="not pinned"):
        _target("127.0.0.1:5000/team/app:v1", None)
    assert _target("127.0.0.1:5000/team/app:v1", str(MANIFEST))[1] == MANIFEST
    with pytest.raises(ReferenceFormatError, match="but --expect-digest says"):
        _target(str(REF), str(OTHER))


def test_containerd_options_need_the_containerd_runtime() -> None:
    from click.testing import CliRunner

    from imagekit.cli import main

    ref = f"127.0.0.1:1/team/app@{MANIFEST}"
    result = CliRunner().invoke(main, ["pull", ref, "--address", "/run/x.sock"])
    assert result.exit_code == 2 and "--runtime containerd" in result.output
    result = CliRunner().invoke(main, ["pull", ref, "--runtime", "cri-o"])
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("os", "architecture", "entry"),
    [("linux", "arm64", ("linux", "arm64", "v8")), ("linux", "amd64", ("linux", "amd64", None))],
)
def test_the_final_pull_asks_the_registry_for_the_platform_the_engine_pulled(
    os: str, architecture: str, entry: tuple[str, str, str | None]
) -> None:
    # On an arm64 host the engine pulls the arm64 entry of an index; the registry must be
    # asked for that entry (v8 or not), never for linux/amd64's.
    platform = pulled_platform(os, architecture)
    assert platform is not None and str(platform) == f"{os}/{architecture}"
    assert platform.matches(*entry)
    assert not platform.matches("linux", "amd64" if architecture == "arm64" else "arm64", None)


def test_an_engine_that_names_no_platform_leaves_the_registry_default() -> None:
    assert pulled_platform(None, "amd64") is None
    assert pulled_platform("linux", "") is None
