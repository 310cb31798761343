"""layerdiff on layer tars built here: whiteouts, hard links, set-apart paths, packages."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from imagekit.errors import CheckFailed, DigestMismatch, LayerFormatError
from imagekit.layerdiff import (
    LayerScan,
    Tree,
    apply_layers,
    compare_images,
    diff_trees,
    is_bytecode,
    scan_layer,
)
from imagekit.layers.media import LayerLimits
from imagekit.refs import Digest
from tests.support.media_types import OCI_TAR

# (path, content or None for a directory, options)
Member = tuple[str, bytes | None, dict[str, object]]


def make_tar(members: Sequence[Member]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, opts in members:
            info = tarfile.TarInfo(name)
            info.mtime = int(opts.get("mtime", 1_700_000_000))  # type: ignore[call-overload]
            info.mode = int(opts.get("mode", 0o644 if data is not None else 0o755))  # type: ignore[call-overload]
            if "symlink" in opts:
                info.type = tarfile.SYMTYPE
                info.linkname = str(opts["symlink"])
                tar.addfile(info)
            elif "hardlink" in opts:
                info.type = tarfile.LNKTYPE
                info.linkname = str(opts["hardlink"])
                tar.addfile(info)
            elif data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def f(name: str, data: bytes, **opts: object) -> Member:
    return (name, data, opts)


def d(name: str, **opts: object) -> Member:
    return (name, None, opts)


def scan(members: Sequence[Member]) -> LayerScan:
    return scan_layer(io.BytesIO(make_tar(members)))


def metadata(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nlong text\n".encode()


SITE = "usr/local/lib/python3.11/dist-packages"


def test_scan_hashes_content_and_diff_id() -> None:
    data = make_tar([d("usr/"), f("usr/a.txt", b"hello"), f("./usr/b", b"x", mode=0o755)])
    layer = scan_layer(io.BytesIO(data))
    assert layer.diff_id == Digest("sha256:" + hashlib.sha256(data).hexdigest())
    a = layer.entries["usr/a.txt"]
    assert a.sha256 == "sha256:" + hashlib.sha256(b"hello").hexdigest()
    assert (a.kind, a.size, a.mode) == ("file", 5, 0o644)
    assert layer.entries["usr/b"].mode == 0o755
    assert layer.entries["usr"].kind == "dir"


def test_scan_checks_the_expected_diff_id() -> None:
    data = make_tar([f("a", b"1")])
    wrong = Digest("sha256:" + "0" * 64)
    with pytest.raises(DigestMismatch) as info:
        scan_layer(io.BytesIO(data), expected=wrong)
    assert info.value.expected == wrong
    assert info.value.actual == "sha256:" + hashlib.sha256(data).hexdigest()


def test_scan_refuses_what_is_not_a_tar() -> None:
    with pytest.raises(CheckFailed):
        scan_layer(io.BytesIO(b'{"config": "not a layer", "padding": "' + b"x" * 600 + b'"}'))


def test_hardlink_takes_its_targets_content_and_symlink_its_target() -> None:
    layer = scan(
        [f("bin/python3.11", b"ELF..."), f("bin/python3", b"", hardlink="bin/python3.11")]
        + [("bin/py", b"", {"symlink": "python3"})]
    )
    assert layer.entries["bin/python3"].sha256 == layer.entries["bin/python3.11"].sha256
    assert layer.entries["bin/python3"].size == 6
    assert layer.entries["bin/py"].kind == "symlink"
    assert layer.entries["bin/py"].link == "python3"


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


def _registry_image(
    blobs: list[bytes], diff_ids: list[Digest], limits: LayerLimits | None = None
) -> Any:
    from types import SimpleNamespace

    from imagekit.layerdiff import RegistryImage

    gzip_type = "application/vnd.oci.image.layer.v1.tar+gzip"  # the bytes decide (detect)
    layers = [
        SimpleNamespace(digest=f"sha256:{i:064d}", media_type=gzip_type) for i in range(len(blobs))
    ]

    class Client:
        def stream_blob(self, ref: object, desc: Any) -> Any:
            data = blobs[int(desc.digest.split(":")[1])]
            return iter([data[i : i + 7000] for i in range(0, len(data), 7000)])

    resolved = SimpleNamespace(reference="r", layers=layers, diff_ids=diff_ids)
    return RegistryImage(Client(), resolved, "reg", limits=limits or LayerLimits())  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", ["gzip", "gzip-multimember", "zstd", "none"])
def test_registry_image_decompresses_and_checks_diff_ids(codec: str) -> None:
    import gzip

    import zstandard

    layer = make_tar([f("big", bytes(range(256)) * 4000), f("small", b"s")])
    if codec == "gzip":
        blob = gzip.compress(layer)
    elif codec == "gzip-multimember":
        blob = gzip.compress(layer[:5000]) + gzip.compress(layer[5000:])
    elif codec == "zstd":
        blob = zstandard.ZstdCompressor().compress(layer)
    else:
        blob = layer
    diff_id = Digest("sha256:" + hashlib.sha256(layer).hexdigest())
    image = _registry_image([blob], [diff_id])
    scans = image.scan([0])
    assert scans[0].diff_id == diff_id
    assert scans[0].entries["big"].size == 256 * 4000


def test_registry_image_refuses_a_layer_that_is_not_its_diff_id() -> None:
    import gzip

    layer = make_tar([f("a", b"1")])
    image = _registry_image([gzip.compress(layer)], [Digest("sha256:" + "1" * 64)])
    with pytest.raises(DigestMismatch):
        image.scan([0])


def test_registry_image_cuts_off_a_decompression_bomb_like_mirror_does() -> None:
    """Nightly compares layers through RegistryImage: a hostile layer must be cut off at the
    same limits `imagekit mirror` applies (imagekit.layers), not inflated without bound."""
    import gzip

    bomb = gzip.compress(b"\0" * (8 << 20))  # 8 MiB of zeros in a few KiB
    image = _registry_image(
        [bomb], [Digest("sha256:" + "1" * 64)], LayerLimits(max_uncompressed_bytes=1 << 20)
    )
    with pytest.raises(LayerFormatError, match="exceeds the limit"):
        image.scan([0])


def test_registry_image_refuses_a_zstd_window_over_the_limit() -> None:
    import zstandard

    # A 2 MiB frame declares a window of its content size, twice the limit set here.
    layer = make_tar([f("a", hashlib.sha256(b"seed").digest() * (1 << 16))])
    blob = zstandard.ZstdCompressor().compress(layer)
    image = _registry_image(
        [blob],
        [Digest("sha256:" + hashlib.sha256(layer).hexdigest())],
        LayerLimits(max_zstd_window=1 << 20),
    )
    with pytest.raises(LayerFormatError, match="zstd"):
        image.scan([0])


def test_content_not_asked_for_is_passed_over_and_the_stream_read_to_its_end() -> None:
    from imagekit.layerdiff import iter_members
    from imagekit.layers.reader import UncompressedReader

    big, small = bytes(range(256)) * 4096, b"small\n"
    # A long PAX name too: its extended header is read as tarfile's seeking mode reads it.
    long_name = "opt/" + "n" * 150 + "/big.bin"
    tar = make_tar([d("opt"), f(long_name, big), f("opt/small.txt", small),
                    f("opt/asked.bin", big[::-1])])  # fmt: skip
    tar += b"\0" * 4096  # padding past the end-of-archive blocks, which the diffID covers
    asked = {"opt/asked.bin"}
    for stream in (io.BytesIO(tar), UncompressedReader(iter([tar]), media_type=OCI_TAR)):
        members = {
            m.path: m
            for m in iter_members(stream, hash_content=lambda p, n: n < 1000 or p in asked)
        }
        assert members[long_name].sha256 is None and members[long_name].size == len(big)
        assert members["opt/small.txt"].sha256 == "sha256:" + hashlib.sha256(small).hexdigest()
        assert members["opt/asked.bin"].sha256 == "sha256:" + hashlib.sha256(big[::-1]).hexdigest()
        assert stream.read(1) == b""  # read to the very end, padding included
    reader = UncompressedReader(iter([tar]), media_type=OCI_TAR)
    list(iter_members(reader, hash_content=lambda p, n: False))
    assert reader.result().diff_id == Digest("sha256:" + hashlib.sha256(tar).hexdigest())


def test_a_member_cut_short_is_refused_when_it_is_passed_over() -> None:
    from imagekit.layerdiff import iter_members

    tar = make_tar([f("big.bin", b"x" * 100_000), f("after.txt", b"after\n")])
    with pytest.raises(CheckFailed, match="not a readable tar"):
        list(iter_members(io.BytesIO(tar[:50_000]), hash_content=lambda p, n: False))


def test_a_tap_reads_what_it_asks_for_as_it_streams_past() -> None:
    """The SBOM's way in: a sink gets a file's chunks and then b""; one that wants no more
    stops getting them, and the members after it, their hashes and the diffID are unchanged."""
    from imagekit.layerdiff import iter_members
    from imagekit.layers.reader import UncompressedReader

    big, head = b"x" * (3 << 20), b"Name: a\n\n"
    tar = make_tar([d("opt"), f("opt/whole.txt", big), f("opt/head.txt", head + big),
                    f("opt/after.txt", b"after\n")])  # fmt: skip
    seen: dict[str, list[bytes]] = {}
    asked: list[tuple[str, str, int]] = []

    def tap(path: str, kind: str, size: int) -> Callable[[bytes], bool] | None:
        asked.append((path, kind, size))
        if kind != "file" or path == "opt/after.txt":
            return None
        chunks = seen.setdefault(path, [])

        def sink(chunk: bytes) -> bool:
            chunks.append(chunk)
            return path == "opt/whole.txt"  # head.txt: the first chunk is enough

        return sink

    reader = UncompressedReader(iter([tar]), media_type=OCI_TAR)
    read = iter_members(reader, hash_content=lambda p, n: n < 1000, tap=tap)
    members = {m.path: m for m in read}
    assert [a[:2] for a in asked] == [
        ("opt", "dir"), ("opt/whole.txt", "file"), ("opt/head.txt", "file"),
        ("opt/after.txt", "file"),
    ]  # fmt: skip
    assert b"".join(seen["opt/whole.txt"]) == big and seen["opt/whole.txt"][-1] == b""
    assert len(seen["opt/head.txt"]) == 1 and seen["opt/head.txt"][0].startswith(head)
    assert members["opt/whole.txt"].sha256 is None  # read for the tap, not hashed
    assert members["opt/after.txt"].sha256 == "sha256:" + hashlib.sha256(b"after\n").hexdigest()
    assert reader.result().diff_id == Digest("sha256:" + hashlib.sha256(tar).hexdigest())
