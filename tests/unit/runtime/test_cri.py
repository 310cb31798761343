"""The CRI plugin's naming rules: chain IDs, the kubelet's imageID, a pod against a pull."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from imagekit.refs import Digest
from imagekit.runtime.cri import (
    MISMATCH,
    UNKNOWN,
    VERIFIED,
    PulledImage,
    chain_id,
    judge_pod_image_id,
    kubelet_image_ref,
    sort_references,
)

INDEX = Digest("sha256:" + "f3" * 32)
MANIFEST = Digest("sha256:" + "b9" * 32)
ARM64 = Digest("sha256:" + "a6" * 32)
CONFIG = Digest("sha256:" + "47" * 32)
REPO = "127.0.0.1:5000/serving/sglang"


def test_chain_id_follows_the_image_spec() -> None:
    a, b, c = (Digest("sha256:" + x * 64) for x in "abc")
    assert chain_id([a]) == a
    ab = "sha256:" + hashlib.sha256(f"{a} {b}".encode()).hexdigest()
    assert chain_id([a, b]) == ab
    assert chain_id([a, b, c]) == "sha256:" + hashlib.sha256(f"{ab} {c}".encode()).hexdigest()
    with pytest.raises(ValueError, match="no chain ID"):
        chain_id([])


def test_references_sort_as_distribution_reference_does() -> None:
    names = [
        str(CONFIG),
        f"{REPO}@{MANIFEST}",
        f"{REPO}:v1",
        f"{REPO}@{INDEX}",
        f"{REPO}:v1@{INDEX}",
        "not a reference",
    ]
    assert sort_references(names) == (
        f"{REPO}:v1@{INDEX}",
        f"{REPO}:v1",
        f"{REPO}@{MANIFEST}",
        f"{REPO}@{INDEX}",
        str(CONFIG),
        "not a reference",
    )
    # Name and digest before a bare name; within a rank, string order ("b9.." < "f3..").
    assert kubelet_image_ref([f"{REPO}@{INDEX}", f"{REPO}@{MANIFEST}"], CONFIG) == (
        f"{REPO}@{MANIFEST}"
    )
    # A tagged name carries no digest: the kubelet then shows the bare image ID.
    assert kubelet_image_ref([f"{REPO}:v1", str(CONFIG)], CONFIG) == CONFIG


def _details(**overrides: Any) -> dict[str, Any]:
    details: dict[str, Any] = {
        "source": "containerd",
        "repository": REPO,
        "where": "gpu-node-07",
        "target_digest": str(INDEX),
        "target_media_type": "application/vnd.oci.image.index.v1+json",
        "platform": "linux/amd64",
        "platform_manifest_digest": str(MANIFEST),
        "image_id": str(CONFIG),
        "cri_references": [f"{REPO}@{INDEX}", str(CONFIG)],
    }
    details.update(overrides)
    return details


def _pulled(status: str = VERIFIED, **overrides: Any) -> PulledImage:
    pulled = PulledImage.from_details(7, status, _details(**overrides))
    assert pulled is not None
    return pulled


def test_only_containerd_records_with_digests_are_read() -> None:
    assert PulledImage.from_details(1, VERIFIED, _details(source="engine")) is None
    assert PulledImage.from_details(1, VERIFIED, _details(image_id="sha256:short")) is None
    assert _pulled().by_index and not _pulled(target_digest=str(MANIFEST)).by_index


def test_an_index_pull_is_named_by_the_index() -> None:
    verdict, reason = judge_pod_image_id("repo-digest", REPO, INDEX, "", _pulled())
    assert verdict == VERIFIED
    assert "not by its linux/amd64 manifest" in reason and "seq 7" in reason
    # The platform manifest of that index is the same CRI image under another name.
    verdict, reason = judge_pod_image_id("repo-digest", REPO, MANIFEST, "", _pulled())
    assert verdict == VERIFIED and "same CRI image" in reason
    verdict, reason = judge_pod_image_id("repo-digest", REPO, ARM64, "", _pulled())
    assert verdict == MISMATCH and str(INDEX) in reason


def test_another_name_of_the_same_digest_is_said() -> None:
    mirror = "mirror.example.com/serving/sglang"
    verdict, reason = judge_pod_image_id("repo-digest", mirror, INDEX, "", _pulled())
    assert verdict == VERIFIED and f"the name is {mirror}" in reason


def test_bare_image_id_is_the_config_digest() -> None:
    assert judge_pod_image_id("image-id", None, CONFIG, "", _pulled())[0] == VERIFIED
    assert judge_pod_image_id("image-id", None, MANIFEST, "", _pulled())[0] == MISMATCH


def test_nothing_to_compare_is_unknown() -> None:
    assert judge_pod_image_id("unparsed", None, None, "", _pulled())[0] == UNKNOWN
    assert judge_pod_image_id("unparsed", None, None, "x:y", _pulled())[0] == UNKNOWN
    verdict, reason = judge_pod_image_id("repo-digest", REPO, INDEX, "", _pulled(MISMATCH))
    assert verdict == UNKNOWN and "not verified" in reason
