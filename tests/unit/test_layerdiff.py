"""layerdiff on layer tars built here: whiteouts, set-apart paths, packages, comparisons."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass

from imagekit.image.members import LayerScan, scan_layer
from imagekit.layerdiff import (
    Tree,
    apply_layers,
    compare_images,
    diff_trees,
    is_bytecode,
)
from imagekit.refs import Digest
from tests.support.layer_tars import Member, d, f, make_tar, scan


def metadata(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nlong text\n".encode()


SITE = "usr/local/lib/python3.11/dist-packages"


def test_whiteout_removes_a_path_and_its_children() -> None:
    lower = scan([d("etc"), f("etc/keep", b"k"), d("opt/app"), f("opt/app/x", b"x")])
    upper = scan([f("opt/.wh.app", b""), f("etc/.wh.gone", b"")])
    tree = apply_layers([lower, upper])
    assert "opt/app" not in tree.entries and "opt/app/x" not in tree.entries
    assert "etc/keep" in tree.entries
    assert "opt/.wh.app" not in tree.entries


def test_opaque_dir_hides_lower_children_but_keeps_its_own() -> None:
    lower = scan([d("srv"), f("srv/old", b"o"), f("srv/older", b"o")])
    upper = scan([d("srv"), f("srv/.wh..wh..opq", b""), f("srv/new", b"n")])
    tree = apply_layers([lower, upper])
    assert sorted(p for p in tree.entries if p.startswith("srv/")) == ["srv/new"]
    assert "srv" in tree.entries


def test_a_file_replacing_a_directory_hides_its_children() -> None:
    lower = scan([d("data"), f("data/a", b"a")])
    upper = scan([f("data", b"now a file")])
    tree = apply_layers([lower, upper])
    assert tree.entries["data"].kind == "file"
    assert "data/a" not in tree.entries


def tree_of(*layers: Sequence[Member]) -> Tree:
    return apply_layers(scan(m) for m in layers)


def test_timestamps_only_is_equivalent() -> None:
    a = tree_of([f("x", b"same", mtime=1), d("dir", mtime=1)])
    b = tree_of([f("x", b"same", mtime=2), d("dir", mtime=5)])
    diff = diff_trees(a, b)
    assert diff.equivalent
    assert diff.timestamp_only == 2
    assert not diff.files


def test_bytecode_is_set_apart() -> None:
    a = tree_of([f("m/__pycache__/x.cpython-311.pyc", b"\x00stamp1"), f("m/x.py", b"src")])
    b = tree_of([f("m/__pycache__/x.cpython-311.pyc", b"\x00stamp2"), f("m/x.py", b"src")])
    diff = diff_trees(a, b)
    assert diff.equivalent
    assert diff.bytecode_changed == 1
    assert diff.bytecode_paths == ("m/__pycache__/x.cpython-311.pyc",)
    assert is_bytecode("a/b.pyc") and is_bytecode("__pycache__/z") and not is_bytecode("a.py")


def test_content_mode_added_and_removed_are_changes() -> None:
    a = tree_of([f("cfg", b"v1"), f("run.sh", b"#!", mode=0o755), f("gone", b"g")])
    b = tree_of([f("cfg", b"v2"), f("run.sh", b"#!", mode=0o644), f("new", b"n")])
    diff = diff_trees(a, b)
    assert not diff.equivalent
    by_path = {c.path: c for c in diff.files}
    assert by_path["cfg"].change == "changed" and by_path["cfg"].fields == ("sha256",)
    assert by_path["run.sh"].fields == ("mode",)
    assert by_path["gone"].change == "removed"
    assert by_path["new"].change == "added"
    assert diff.to_json()["files"][0]["path"] == "cfg"


def dist_layer(name: str, version: str, module: bytes) -> list[Member]:
    info = f"{SITE}/{name}-{version}.dist-info"
    record = f"{name}/__init__.py,sha256=x,1\n{info}/METADATA,,\n{info}/RECORD,,\n"
    return [
        f(f"{info}/METADATA", metadata(name, version)),
        f(f"{info}/RECORD", record.replace(f"{info}/", f"{name}-{version}.dist-info/").encode()),
        f(f"{SITE}/{name}/__init__.py", module),
    ]


def test_distribution_version_change_is_named() -> None:
    a = tree_of(dist_layer("tqdm", "4.66.1", b"v1"))
    b = tree_of(dist_layer("tqdm", "4.66.2", b"v2") + dist_layer("Six_Thing", "1.0", b"s"))
    diff = diff_trees(a, b)
    described = [p.describe() for p in diff.packages]
    assert f"python tqdm 4.66.1 -> 4.66.2 ({SITE})" in described
    assert f"python six-thing 1.0 added ({SITE})" in described
    changed_module = next(c for c in diff.files if c.path == f"{SITE}/tqdm/__init__.py")
    assert changed_module.distribution == "tqdm"
    assert any("4.66.1 -> 4.66.2" in line for line in diff.summary())


def test_distribution_removed_by_whiteout() -> None:
    base = scan(dist_layer("numpy", "1.24.2", b"np"))
    removal = scan([f(f"{SITE}/.wh.numpy-1.24.2.dist-info", b""), f(f"{SITE}/.wh.numpy", b"")])
    diff = diff_trees(apply_layers([base]), apply_layers([base, removal]))
    assert [p.to_json()["change"] for p in diff.packages] == ["removed"]


def test_debian_package_versions_are_compared() -> None:
    def status(version: str) -> bytes:
        return (
            "Package: libc6\nStatus: install ok installed\nArchitecture: amd64\n"
            f"Version: {version}\n\nPackage: old\nStatus: deinstall ok config-files\n"
            "Version: 1\n"
        ).encode()

    a = tree_of([f("var/lib/dpkg/status", status("2.36-9+deb12u7"))])
    b = tree_of([f("var/lib/dpkg/status", status("2.36-9+deb12u8"))])
    diff = diff_trees(a, b)
    assert [p.describe() for p in diff.packages] == [
        "debian libc6:amd64 2.36-9+deb12u7 -> 2.36-9+deb12u8"
    ]


@dataclass
class TarSource:
    """A LayerSource over tars held in memory; counts which layers were read."""

    label: str
    layers: list[bytes]
    random_access: bool = True

    def __post_init__(self) -> None:
        self.read: list[int] = []

    def diff_ids(self) -> Sequence[Digest]:
        return [Digest("sha256:" + hashlib.sha256(t).hexdigest()) for t in self.layers]

    def scan(self, indices: Sequence[int]) -> dict[int, LayerScan]:
        ids = self.diff_ids()
        self.read.extend(indices)
        return {i: scan_layer(io.BytesIO(self.layers[i]), expected=ids[i]) for i in indices}


BASE = make_tar([d("usr"), f("usr/python3", b"py"), *dist_layer("numpy", "1.24.2", b"np")])


def test_compare_same_diff_ids_is_reproducible_without_reading() -> None:
    top = make_tar([f("app", b"a")])
    a, b = TarSource("a", [BASE, top]), TarSource("b", [BASE, top])
    result = compare_images(a, b)
    assert result.verdict == "reproducible"
    assert a.read == [] and b.read == []


def test_compare_timestamp_rebuild_is_equivalent_and_reads_the_base_once() -> None:
    a = TarSource("a", [BASE, make_tar([f("app", b"a", mtime=1)])])
    b = TarSource("b", [BASE, make_tar([f("app", b"a", mtime=2)])])
    result = compare_images(a, b)
    assert result.verdict == "equivalent"
    assert result.shared_layers == 1
    assert a.read == [0, 1] and b.read == [1]
    assert result.to_json()["verdict"] == "equivalent"


def test_compare_names_a_version_change_over_a_shared_base() -> None:
    a = TarSource("a", [BASE, make_tar(dist_layer("tqdm", "4.66.1", b"v1"))])
    b = TarSource("b", [BASE, make_tar(dist_layer("tqdm", "4.66.2", b"v2"))])
    result = compare_images(a, b)
    assert result.verdict == "changed"
    assert result.diff is not None
    assert [p.describe() for p in result.diff.packages] == [
        f"python tqdm 4.66.1 -> 4.66.2 ({SITE})"
    ]
