"""The final pull's comparison: which digest the engine's image ID must equal, per store.

The integration tests run the classic store (this machine's engine); the containerd image
store's rule is checked here on the comparison alone.
"""

from __future__ import annotations

import pytest

from imagekit.errors import ReferenceFormatError, UsageError
from imagekit.pull import _target, compare, pulled_platform
from imagekit.refs import Digest, parse_reference

MANIFEST = Digest("sha256:" + "a" * 64)
INDEX = Digest("sha256:" + "b" * 64)
CONFIG = Digest("sha256:" + "c" * 64)
OTHER = Digest("sha256:" + "d" * 64)
REF = parse_reference(f"127.0.0.1:5000/team/app@{MANIFEST}")


def _ok(**overrides: object) -> dict[str, bool]:
    args: dict[str, object] = {
        "image_store": "classic",
        "ref": REF,
        "expected": MANIFEST,
        "pulled_by": MANIFEST,
        "config_digest": CONFIG,
        "image_id": CONFIG,
        "repo_digests": (f"127.0.0.1:5000/team/app@{MANIFEST}",),
    }
    args.update(overrides)
    return {c.name: c.ok for c in compare(**args)}  # type: ignore[arg-type]


def test_classic_store_compares_the_config_digest() -> None:
    assert all(_ok().values())
    assert _ok(image_id=MANIFEST)["image ID (classic store)"] is False


def test_containerd_store_compares_the_digest_pulled_by() -> None:
    assert all(_ok(image_store="containerd", image_id=MANIFEST).values())
    assert _ok(image_store="containerd", image_id=CONFIG)["image ID (containerd store)"] is False
    # A multi-platform image: pulled (and named) by its index digest.
    ref = parse_reference(f"127.0.0.1:5000/team/app@{INDEX}")
    result = _ok(
        image_store="containerd",
        ref=ref,
        expected=INDEX,
        pulled_by=INDEX,
        image_id=INDEX,
        repo_digests=(f"127.0.0.1:5000/team/app@{INDEX}",),
    )
    assert all(result.values())


def test_repo_digest_of_another_repository_does_not_count() -> None:
    result = _ok(repo_digests=(f"127.0.0.1:5000/team/other@{MANIFEST}", "garbage"))
    assert result["engine RepoDigests"] is False
    assert _ok(pulled_by=OTHER)["registry digest"] is False


def test_an_unknown_store_is_never_a_pass() -> None:
    assert _ok(image_store="weird")["image ID (weird store)"] is False


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
