"""What a base tag serves against the pin, on answers the real registry does not give.

The real registry (tests/integration/flows/test_nightly_watch.py) always names the digest
on HEAD and serves what it was given; here, through MockTransport: a HEAD without the
digest header, a malformed one, and multi-platform indexes with the plan pinning one
platform's manifest, which that registry has no reason to refuse but the tests need
byte-exact control over.
"""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import pytest

from imagekit.builders.bump import bump_plan
from imagekit.errors import CheckFailed, DigestMismatch, RegistryProtocolError, UsageError
from imagekit.plans.load import parse_plan
from imagekit.plans.model import LoadedPlan
from imagekit.plans.upstream import TagState, watch_tag
from imagekit.refs import parse_reference
from imagekit.workspace import Workspace
from tests.unit.registry.fakes import (
    HOST,
    OCI_INDEX,
    OCI_MANIFEST,
    FakeRegistry,
    entry,
    index_of,
    make_image,
    sha,
)

REPO = "upstream/serving"


def _plan(
    tmp_path: Path, pinned: str, found_as: str | None = "v1", platform: str = "linux/amd64"
) -> LoadedPlan:
    tag = f"  found_as: {found_as}\n" if found_as else ""
    raw = (
        f"name: watched\nbase:\n  reference: {HOST}/{REPO}@{pinned}\n{tag}  platform: {platform}\n"
    ).encode()
    return parse_plan(raw, tmp_path / "watched.yaml", dockerfiles_dir=tmp_path)


def _methods(fake: FakeRegistry) -> list[str]:
    return [f"{r.method} {r.url.path}" for r in fake.requests]


def test_a_tag_that_did_not_move_is_confirmed_by_the_manifests_own_bytes(tmp_path: Path) -> None:
    fake = FakeRegistry()
    image = make_image()
    fake.add_image(REPO, image, tag="v1")
    with fake.client() as client:
        up = watch_tag(client, _plan(tmp_path, image.manifest_digest))
    assert up.state is TagState.CURRENT and up.served == image.manifest_digest
    # HEAD says nothing moved; the GET's bytes, hashed, say the same.
    assert _methods(fake) == [f"HEAD /v2/{REPO}/manifests/v1", f"GET /v2/{REPO}/manifests/v1"]
    assert "confirmed by the bytes" in up.detail
    assert up.resolved_at.endswith("Z") and up.tag_reference == f"{HOST}/{REPO}:v1"


@pytest.mark.parametrize("head_says", ["the pin", "another digest"])
def test_a_head_that_the_get_contradicts_is_a_no_never_current(
    tmp_path: Path, head_says: str
) -> None:
    """A converting proxy, a registry bug or a lie: HEAD names one digest, a GET of the same
    tag serves bytes of another. Whether the tag moved is then not known: a no (exit 1)
    naming both, never "current"."""
    fake = FakeRegistry()
    pinned, other = make_image(b"pinned"), make_image(b"other")
    fake.add_image(REPO, pinned)
    fake.add_image(REPO, other)
    announced = pinned if head_says == "the pin" else make_image(b"third")
    index = index_of(entry(other))  # GET serves an index, so even a moved HEAD reads it
    served = other.manifest if head_says == "the pin" else index
    media_type = OCI_MANIFEST if head_says == "the pin" else OCI_INDEX

    def lying(request: httpx.Request) -> httpx.Response:
        headers = {"Content-Type": media_type, "Docker-Content-Digest": sha(served)}
        if request.method == "HEAD":
            headers["Docker-Content-Digest"] = announced.manifest_digest
            if head_says != "the pin":
                headers["Content-Type"] = OCI_INDEX
            return httpx.Response(200, headers=headers)
        return httpx.Response(200, content=served, headers=headers)

    fake.overrides[f"/v2/{REPO}/manifests/v1"] = lying
    with fake.client() as client, pytest.raises(DigestMismatch) as info:
        watch_tag(client, _plan(tmp_path, pinned.manifest_digest))
    assert info.value.exit_code == 1
    assert info.value.expected == announced.manifest_digest and info.value.actual == sha(served)
    assert "HEAD" in info.value.message and "GET" in info.value.message


def test_a_moved_manifest_tag_is_named_from_the_head_alone(tmp_path: Path) -> None:
    fake = FakeRegistry()
    old, new = make_image(b"old\n"), make_image(b"new\n")
    fake.add_image(REPO, old)
    fake.add_image(REPO, new, tag="v1")
    with fake.client() as client:
        up = watch_tag(client, _plan(tmp_path, old.manifest_digest))
    assert up.state is TagState.MOVED and up.moved
    assert up.served == new.manifest_digest and up.pinned == old.manifest_digest
    assert str(up.new_base()) == f"{HOST}/{REPO}@{new.manifest_digest}"
    assert _methods(fake) == [f"HEAD /v2/{REPO}/manifests/v1"]


def test_a_vanished_tag_is_gone(tmp_path: Path) -> None:
    fake = FakeRegistry()
    with fake.client() as client:
        up = watch_tag(client, _plan(tmp_path, sha(b"x")))
    assert up.state is TagState.GONE and up.served is None and "404" in up.detail
    with pytest.raises(UsageError):
        up.new_base()


def test_a_plan_without_found_as_has_nothing_to_watch(tmp_path: Path) -> None:
    with FakeRegistry().client() as client, pytest.raises(UsageError, match="found_as"):
        watch_tag(client, _plan(tmp_path, sha(b"x"), found_as=None))


def test_a_head_without_a_digest_falls_back_to_hashing_the_manifest(tmp_path: Path) -> None:
    fake = FakeRegistry()
    image = make_image()
    fake.add_image(REPO, image, tag="v1")
    path = f"/v2/{REPO}/manifests/v1"

    def no_digest_on_head(request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":
            return httpx.Response(200, headers={"Content-Type": "application/json"})
        return httpx.Response(200, content=image.manifest, headers={"Content-Type": OCI_MANIFEST})

    fake.overrides[path] = no_digest_on_head
    with fake.client() as client:
        head = client.head_manifest(parse_reference(f"{HOST}/{REPO}:v1"), "v1")
        up = watch_tag(client, _plan(tmp_path, image.manifest_digest))
    assert head.from_get and head.digest == image.manifest_digest
    assert up.state is TagState.CURRENT
    assert _methods(fake)[:2] == [f"HEAD {path}", f"GET {path}"]


def test_a_malformed_digest_header_is_refused(tmp_path: Path) -> None:
    fake = FakeRegistry()
    fake.overrides[f"/v2/{REPO}/manifests/v1"] = lambda request: httpx.Response(
        200, headers={"Docker-Content-Digest": "sha256:../../etc"}
    )
    with fake.client() as client, pytest.raises(RegistryProtocolError, match="malformed"):
        watch_tag(client, _plan(tmp_path, sha(b"x")))


def test_an_index_that_moved_for_other_platforms_only_keeps_a_platform_pin(
    tmp_path: Path,
) -> None:
    fake = FakeRegistry()
    amd64, arm64, arm64_new = make_image(b"a"), make_image(b"b", "arm64"), make_image(b"c", "arm64")
    for image in (amd64, arm64, arm64_new):
        fake.add_image(REPO, image)
    index = index_of(entry(amd64), entry(arm64_new, arch="arm64"))
    fake.add_manifest(REPO, "v1", index, OCI_INDEX)
    fake.add_manifest(REPO, sha(index), index, OCI_INDEX)
    with fake.client() as client:
        # The plan pinned the amd64 manifest itself: the index moved, its amd64 entry did not.
        kept = watch_tag(client, _plan(tmp_path, amd64.manifest_digest))
        # The plan pinned the arm64 manifest: that entry is new.
        moved = watch_tag(client, _plan(tmp_path, arm64.manifest_digest, platform="linux/arm64"))
    assert kept.state is TagState.CURRENT and kept.platform_manifest == amd64.manifest_digest
    assert "other platforms only" in kept.detail
    assert moved.state is TagState.MOVED
    # What to pin now is the index, as the registry serves it, not the platform's manifest.
    assert moved.served == sha(index) and moved.platform_manifest == arm64_new.manifest_digest


def test_an_index_without_the_plans_platform_is_a_no_naming_what_it_has(tmp_path: Path) -> None:
    """The registry answered with an index that lacks the platform: a check said no (1),
    never "cannot be reached" (3)."""
    fake = FakeRegistry()
    amd64, arm64 = make_image(b"a"), make_image(b"b", "arm64")
    fake.add_image(REPO, arm64)
    index = index_of(entry(arm64, arch="arm64"))
    fake.add_manifest(REPO, "v1", index, OCI_INDEX)
    fake.add_manifest(REPO, sha(index), index, OCI_INDEX)
    with fake.client() as client, pytest.raises(CheckFailed) as info:
        watch_tag(client, _plan(tmp_path, amd64.manifest_digest))
    assert info.value.exit_code == 1
    assert "no matching manifest for linux/amd64" in info.value.message
    assert "(available: linux/arm64)" in info.value.message


def test_an_index_whose_entries_list_no_platform_is_read_as_inspect_reads_it(
    tmp_path: Path,
) -> None:
    """`plans bump` refused an index whose entries carry no platform ("available: none")
    that `inspect` resolves from the configs; both now read it through the one index
    reader (each entry's config names its platform)."""
    fake = FakeRegistry()
    pinned, amd64, arm64 = make_image(b"p"), make_image(b"a"), make_image(b"b", "arm64")
    for image in (pinned, amd64, arm64):
        fake.add_image(REPO, image)
    bare = [{k: v for k, v in entry(i).items() if k != "platform"} for i in (arm64, amd64)]
    index = index_of(*bare)
    fake.add_manifest(REPO, "v1", index, OCI_INDEX)
    fake.add_manifest(REPO, sha(index), index, OCI_INDEX)
    with fake.client() as client:
        up = watch_tag(client, _plan(tmp_path, pinned.manifest_digest))
        inspected = client.resolve(parse_reference(f"{HOST}/{REPO}:v1"))
    assert up.state is TagState.MOVED
    assert up.platform_manifest == amd64.manifest_digest == inspected.manifest_digest


def test_a_nested_index_entry_is_named_as_not_selectable_never_as_available(
    tmp_path: Path,
) -> None:
    """For an index whose only entry is itself an index, `plans bump` said "available:
    linux/amd64" while refusing it; it now says none is available and why that entry is
    not, as `inspect` does."""
    fake = FakeRegistry()
    pinned, inner_image = make_image(b"p"), make_image(b"i")
    fake.add_image(REPO, pinned)
    fake.add_image(REPO, inner_image)
    inner = index_of(entry(inner_image))
    fake.add_manifest(REPO, sha(inner), inner, OCI_INDEX)
    nested = {
        **entry(inner_image),
        "mediaType": OCI_INDEX,
        "digest": sha(inner),
        "size": len(inner),
    }
    index = index_of(nested)
    fake.add_manifest(REPO, "v1", index, OCI_INDEX)
    fake.add_manifest(REPO, sha(index), index, OCI_INDEX)
    said = []
    with fake.client() as client:
        for check in (
            lambda: watch_tag(client, _plan(tmp_path, pinned.manifest_digest)),
            lambda: client.resolve(parse_reference(f"{HOST}/{REPO}:v1")),
        ):
            with pytest.raises(CheckFailed) as info:
                check()
            said.append(info.value.message.partition(" (available: ")[2])
    assert (
        said[0]
        == said[1]
        == (f"none; not selectable: linux/amd64 {sha(inner)}: an index nested in the index)")
    )


def test_a_manifest_nested_2000_deep_is_the_registrys_fault_not_a_crash(tmp_path: Path) -> None:
    """The tag serves a manifest carrying an extra field nested 2,000 deep (distribution
    stores one): `plans bump` crashed (RecursionError, exit 70) reading it; now the
    registry's answer is refused, exit 3, naming it."""
    fake = FakeRegistry()
    pinned = make_image(b"p")
    fake.add_image(REPO, pinned)
    deep = pinned.manifest[:-1] + b',"x":' + b"[" * 2000 + b"]" * 2000 + b"}"
    fake.add_manifest(REPO, "v1", deep, OCI_MANIFEST)
    fake.add_manifest(REPO, sha(deep), deep, OCI_MANIFEST)
    ws = Workspace.at(tmp_path)
    ws.plans_dir.mkdir(parents=True)
    (ws.plans_dir / "watched.yaml").write_text(
        f"name: watched\nbase:\n  reference: {HOST}/{REPO}@{pinned.manifest_digest}\n"
        "  found_as: v1\n  platform: linux/amd64\n"
    )
    with fake.client() as client, pytest.raises(RegistryProtocolError) as info:
        bump_plan(ws, "watched", client=client, write=False, echo=io.StringIO())
    assert info.value.exit_code == 3
    assert "nested deeper than 100 levels" in info.value.message
