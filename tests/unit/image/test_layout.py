"""An image in an OCI layout, on layouts written here as skopeo reads them: the platform
chosen as the registry chooses it, every blob checked, the layers read as a registry's."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from imagekit.errors import DigestMismatch, ImageContentError, PlatformNotFound
from imagekit.image.index import IndexStore
from imagekit.image.layout import LayoutImage
from imagekit.image.view import BaseView
from imagekit.layerdiff import ComparisonVerdict, compare_images
from imagekit.refs import Digest, parse_platform
from tests.support.oci_layout import Layer, LayoutWriter, config_for, tar_of, write_layout


def test_the_platform_asked_for_is_chosen_from_the_nested_index(tmp_path: Path) -> None:
    layout = write_layout(tmp_path / "oci", salt="one")
    for platform in ("linux/amd64", "linux/arm64/v8"):
        image = LayoutImage.open(layout.path, parse_platform(platform))
        written = layout.images[platform]
        assert str(image.digest()) == written.manifest_digest
        assert [str(d) for d in image.diff_ids()] == [written.diff_id]
        assert [str(layer.digest) for layer in image.layers()] == [written.layer_digest]
        assert str(image.config().platform()) == platform
    assert (
        str(LayoutImage.open(layout.path).digest()) == layout.images["linux/amd64"].manifest_digest
    )
    with pytest.raises(PlatformNotFound, match="linux/s390x"):
        LayoutImage.open(layout.path, parse_platform("linux/s390x"))


def test_an_entry_without_a_platform_is_read_from_its_config(tmp_path: Path) -> None:
    """skopeo's ``oci:DIR`` lists one manifest with no platform in index.json itself."""
    writer = LayoutWriter(tmp_path)
    layer = Layer.gzip(tar_of({"a.txt": b"a\n"}))
    manifest = writer.image([layer], config_for([layer], arch="arm64"))
    (tmp_path / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [manifest]}))
    image = LayoutImage.open(tmp_path, parse_platform("linux/arm64"))
    assert str(image.digest()) == manifest["digest"]
    with pytest.raises(PlatformNotFound):
        LayoutImage.open(tmp_path, parse_platform("linux/amd64"))


def test_layers_stream_checked_and_the_merged_filesystem_reads_them(tmp_path: Path) -> None:
    layout = write_layout(tmp_path / "oci", salt="one")
    image = LayoutImage.open(layout.path)
    layer = image.layer(0)
    assert [m.path for m in layer.members()] == ["hello.txt"]
    assert layer.result().diff_id == Digest(layout.images["linux/amd64"].diff_id)
    assert image.scan([0])[0].entries["hello.txt"].size == len(b"amd64 one\n")
    with BaseView(image, IndexStore(tmp_path / "cache")) as view:
        found = view.literal("hello.txt")
    assert found.exists and found.layer == 0


def test_two_layouts_compare_as_two_registry_images_do(tmp_path: Path) -> None:
    one = LayoutImage.open(write_layout(tmp_path / "one", salt="one").path)
    two = LayoutImage.open(write_layout(tmp_path / "two", salt="two").path)
    same = compare_images(one, LayoutImage.open(tmp_path / "one"))
    assert same.verdict == ComparisonVerdict.REPRODUCIBLE
    changed = compare_images(one, two)
    assert changed.verdict == ComparisonVerdict.CHANGED and changed.diff is not None
    assert [c.path for c in changed.diff.files] == ["hello.txt"]


def test_a_blob_that_is_not_its_digest_is_refused(tmp_path: Path) -> None:
    """The same tar compressed otherwise: its diffID holds, the blob is not the one named."""
    layout = write_layout(tmp_path / "oci", salt="one")
    digest = Digest(layout.images["linux/amd64"].layer_digest)
    blob = layout.path / "blobs" / "sha256" / digest.hex
    other = gzip.compress(tar_of({"hello.txt": b"amd64 one\n"}), compresslevel=1, mtime=0)
    assert gzip.decompress(other) == gzip.decompress(blob.read_bytes())
    blob.write_bytes(other)
    image = LayoutImage.open(layout.path)
    with pytest.raises(DigestMismatch, match=str(digest)):
        list(image.layer(0).members())
    with pytest.raises(DigestMismatch, match=str(digest)):
        image.scan([0])


@pytest.mark.parametrize("missing", ["oci-layout", "index.json"])
def test_a_folder_that_is_not_a_layout_is_refused(tmp_path: Path, missing: str) -> None:
    layout = write_layout(tmp_path / "oci")
    (layout.path / missing).unlink()
    with pytest.raises(ImageContentError, match=f"not an OCI image layout \\(no {missing}\\)"):
        LayoutImage.open(layout.path)
