"""An image in the real engine, read through `docker save`: its layers checked against the
diffIDs the engine names, and compared with the same content kept in an OCI layout."""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path

from imagekit.image.engine import SavedImage
from imagekit.image.layout import LayoutImage
from imagekit.layerdiff import ComparisonVerdict, compare_images
from imagekit.refs import Digest
from imagekit.runtime.engine import Engine
from tests.support.oci_layout import Layer, LayoutWriter, config_for, tar_of
from tests.support.tiny_image import docker


def _layout(root: Path, tar: bytes) -> LayoutImage:
    writer = LayoutWriter(root)
    layer = Layer.gzip(tar)
    manifest = writer.image([layer], config_for([layer]))
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [manifest]}))
    return LayoutImage.open(root)


def test_an_engine_image_is_read_whole_and_compares_with_a_layout(
    engine: Engine, created_refs: list[str], tmp_path: Path
) -> None:
    salt = secrets.token_hex(8)
    tar = tar_of({"hello.txt": f"engine {salt}\n".encode(), "etc/conf": b"a = 1\n"})
    archive = tmp_path / "rootfs.tar"
    archive.write_bytes(tar)
    ref = f"imagekit-test/saved-{salt}:v1"
    created_refs.append(ref)
    docker(engine, "import", str(archive), ref)

    saved = SavedImage(engine, ref, ref)
    diff_id = Digest("sha256:" + hashlib.sha256(tar).hexdigest())
    assert list(saved.diff_ids()) == [diff_id]
    scans = saved.scan([0])
    assert scans[0].diff_id == diff_id
    assert scans[0].entries["hello.txt"].size == len(f"engine {salt}\n")

    same = compare_images(saved, _layout(tmp_path / "same", tar))
    assert same.verdict == ComparisonVerdict.REPRODUCIBLE
    other = tar_of({"hello.txt": f"engine {salt}\n".encode(), "etc/conf": b"a = 2\n"})
    changed = compare_images(saved, _layout(tmp_path / "other", other))
    assert changed.verdict == ComparisonVerdict.CHANGED and changed.diff is not None
    assert [c.path for c in changed.diff.files] == ["etc/conf"]
