"""Resolving a reference against protocol faults a real registry will not produce
(MockTransport): an index narrowed to one platform, never an attestation; what was served
held to what the index and the manifest say."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable

import pytest

from imagekit.errors import (
    DigestMismatch,
    ImageContentError,
    ImagekitError,
    PlatformNotFound,
    RegistryProtocolError,
)
from imagekit.refs import Digest, parse_platform
from imagekit.registry.transport import MAX_MANIFEST_BYTES
from tests.unit.registry.fakes import (
    HOST,
    OCI_MANIFEST,
    REF,
    REPO,
    FakeRegistry,
    Image,
    dumps,
    entry,
    index_of,
    make_image,
    sha,
)


def test_index_child_not_matching_its_entry() -> None:
    amd64, impostor = make_image(b"amd64"), make_image(b"impostor")
    index = index_of(entry(amd64))
    fake = FakeRegistry()
    fake.add_manifest(REPO, "v1", index, "application/vnd.oci.image.index.v1+json")
    # The registry serves other bytes under the child's digest.
    fake.add_manifest(REPO, amd64.manifest_digest, impostor.manifest, OCI_MANIFEST)
    with fake.client() as client, pytest.raises(DigestMismatch):
        client.resolve(REF)


@pytest.mark.parametrize(
    ("change", "match", "error"),
    [
        pytest.param(
            lambda image: {"size": len(image.manifest) - 5},
            "limit",
            RegistryProtocolError,
            id="longer-than-its-size",
        ),
        pytest.param(
            lambda image: {"mediaType": "application/vnd.docker.distribution.manifest.v2+json"},
            "says",
            ImageContentError,  # the bytes are the digest's: the image itself disagrees
            id="media-type-differs",
        ),
    ],
)
def test_index_child_must_agree_with_its_entry(
    change: Callable[[Image], dict[str, object]], match: str, error: type[ImagekitError]
) -> None:
    amd64 = make_image(b"amd64")
    child = {**entry(amd64), **change(amd64)}
    fake = FakeRegistry()
    fake.add_manifest(REPO, "v1", index_of(child), "application/vnd.oci.image.index.v1+json")
    fake.add_image(REPO, amd64)
    with fake.client() as client, pytest.raises(error, match=match):
        client.resolve(REF)


def test_attestation_entries_never_chosen_and_missing_platform_is_clear() -> None:
    arm = make_image(b"arm", arch="arm64", variant="v8")
    attestation = make_image(b"att", arch="unknown")
    index = index_of(
        # First in the index and claiming nothing but an attestation: must not be taken.
        entry(
            attestation,
            os="unknown",
            arch="unknown",
            annotations={"vnd.docker.reference.type": "attestation-manifest"},
        ),
        entry(arm, arch="arm64", variant="v8"),
    )
    fake = FakeRegistry()
    fake.add_manifest(REPO, "v1", index, "application/vnd.oci.image.index.v1+json")
    fake.add_image(REPO, arm)
    fake.add_image(REPO, attestation)
    with fake.client() as client:
        with pytest.raises(PlatformNotFound) as info:
            client.resolve(REF)  # default linux/amd64
        assert info.value.exit_code == 1  # the index answered, without that platform
        assert str(info.value.message).startswith("no matching manifest for linux/amd64 in ")
        assert "(available: linux/arm64/v8)" in info.value.message
        with pytest.raises(PlatformNotFound):
            client.resolve(REF, parse_platform("unknown/unknown"))
        resolved = client.resolve(REF, parse_platform("linux/arm64"))
    assert resolved.manifest_digest == arm.manifest_digest
    assert str(resolved.platform) == "linux/arm64/v8"


def test_single_manifest_checked_against_requested_platform() -> None:
    image = make_image()
    fake = FakeRegistry()
    fake.add_image(REPO, image, tag="v1")
    with fake.client() as client:
        assert str(client.resolve(REF).platform) == "linux/amd64"
        with pytest.raises(PlatformNotFound, match="no matching manifest for linux/arm64"):
            client.resolve(REF, parse_platform("linux/arm64"))


def test_schema1_refused_clearly() -> None:
    fake = FakeRegistry()
    body = dumps({"schemaVersion": 1, "name": REPO, "tag": "v1", "fsLayers": []})
    fake.add_manifest(REPO, "v1", body, "application/vnd.docker.distribution.manifest.v1+prettyjws")
    with fake.client() as client, pytest.raises(RegistryProtocolError, match="schema 1"):
        client.resolve(REF)


def test_oversize_config_refused_before_download() -> None:
    image = make_image()
    manifest = json.loads(image.manifest)
    manifest["config"]["size"] = MAX_MANIFEST_BYTES + 1
    body = dumps(manifest)
    fake = FakeRegistry()
    fake.add_image(REPO, image)
    fake.add_manifest(REPO, "v1", body, OCI_MANIFEST)
    with fake.client() as client, pytest.raises(RegistryProtocolError, match="over the"):
        client.resolve(REF)
    assert not any("/blobs/" in r.url.path for r in fake.requests)


def _served(
    config: bytes, config_type: str = "application/vnd.oci.image.config.v1+json"
) -> FakeRegistry:
    layer = gzip.compress(b"x" * 512, mtime=0)
    manifest = dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": config_type, "digest": sha(config), "size": len(config)},
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": sha(layer),
                    "size": len(layer),
                }
            ],
        }
    )
    fake = FakeRegistry()
    fake.add_manifest(REPO, "v1", manifest, OCI_MANIFEST)
    fake.blobs[f"/v2/{REPO}/blobs/{sha(config)}"] = config
    fake.blobs[f"/v2/{REPO}/blobs/{sha(layer)}"] = layer
    return fake


@pytest.mark.parametrize(
    ("fake", "said"),
    [
        pytest.param(
            _served(b"{}", "application/vnd.oci.empty.v1+json"),
            "not a container image (config media type application/vnd.oci.empty.v1+json)",
            id="an OCI artifact",
        ),
        pytest.param(_served(b"not json at all"), "malformed image config", id="config not JSON"),
        pytest.param(
            _served(
                dumps(
                    {
                        "architecture": "amd64",
                        "os": "linux",
                        "rootfs": {"type": "layers", "diff_ids": []},
                    }
                )
            ),
            "the manifest has 1 layers but the config lists 0 diff_ids",
            id="manifest and config disagree on the layer count",
        ),
    ],
)
def test_content_the_registry_served_wrong_is_a_check_that_said_no(
    fake: FakeRegistry, said: str
) -> None:
    """The registry answered; what it served is not a usable image: exit 1, named, never 3
    (which says something could not be reached or finished)."""
    with fake.client() as client, pytest.raises(ImageContentError) as info:
        client.resolve(REF)
    assert said in info.value.message and info.value.exit_code == 1
    assert info.value.registry == HOST and info.value.repository == REPO


def test_index_images_keeps_every_entry_a_runtime_could_select() -> None:
    """Only exactly unknown/unknown is an attestation; an annotation hides nothing; an entry
    without a platform is read by the reader given, or kept as unreadable without one; an
    index nested in the index is kept as unreadable."""
    from imagekit.refs import Platform
    from imagekit.registry.manifest import Descriptor
    from imagekit.registry.resolve import index_images

    def desc(n: int, platform: Platform | None, media_type: str = OCI_MANIFEST,
             annotations: dict[str, str] | None = None) -> Descriptor:  # fmt: skip
        return Descriptor(media_type, Digest("sha256:" + f"{n:02x}" * 32), 100,
                          annotations=annotations, platform=platform)  # fmt: skip

    annotated = {"vnd.docker.reference.type": "attestation-manifest"}
    listed = [
        desc(1, Platform("linux", "amd64")),
        desc(2, Platform("linux", "arm64"), annotations=annotated),
        desc(3, Platform("unknown", "unknown"), annotations=annotated),
        desc(4, Platform("unknown", "unknown", "v8")),
        desc(5, None),
        desc(6, Platform("linux", "s390x"), "application/vnd.oci.image.index.v1+json"),
        desc(7, None),
    ]
    read: dict[Digest, Platform | str] = {
        listed[4].digest: Platform("linux", "riscv64"),
        listed[6].digest: "no config",
    }
    found = index_images(listed, lambda d: read[d.digest])
    assert [(str(e.platform), e.from_config, e.unreadable) for e in found] == [
        ("linux/amd64", False, None),
        ("linux/arm64", False, None),
        ("unknown/unknown/v8", False, None),
        ("linux/riscv64", True, None),
        ("linux/s390x", False, "an index nested in the index"),
        ("None", False, "no config"),
    ]
    unread = index_images(listed)
    assert [e.unreadable for e in unread if e.platform is None] == [
        "lists no platform (not read)",
        "lists no platform (not read)",
    ]


def test_an_entry_is_chosen_by_its_normalised_platform_or_by_its_config() -> None:
    """linux/amd64 takes an entry listed as x86_64; an entry listing no platform is chosen
    by its config when no listed entry matches (containerd's order), never before one."""
    listed, unlisted = make_image(b"listed"), make_image(b"unlisted", arch="arm64")
    no_platform = entry(unlisted)
    del no_platform["platform"]
    index = index_of(entry(listed, arch="x86_64"), no_platform)
    fake = FakeRegistry()
    fake.add_manifest(REPO, "v1", index, "application/vnd.oci.image.index.v1+json")
    fake.add_image(REPO, listed)
    fake.add_image(REPO, unlisted)
    with fake.client() as client:
        amd64 = client.resolve(REF, parse_platform("linux/amd64"))
        arm64 = client.resolve(REF, parse_platform("linux/arm64/v8"))
        chosen = client.resolve(REF, entry=Digest(unlisted.manifest_digest))
    assert amd64.manifest_digest == listed.manifest_digest
    assert str(amd64.platform) == "linux/x86_64"
    assert arm64.manifest_digest == unlisted.manifest_digest
    assert str(arm64.platform) == "linux/arm64"
    assert chosen.manifest_digest == unlisted.manifest_digest
