"""The final pull's comparison: which digest the engine's image ID must equal, per store.

The integration tests run the classic store (this machine's engine); the containerd image
store's rule is checked here on the comparison alone.
"""

from __future__ import annotations

from imagekit.pull_verdict import compare
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
