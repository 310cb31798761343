"""What one layer holds, on layer tars built here: content hashed, diffIDs checked, links,
content passed over unread, a tap reading what it asks for as it streams past."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable

import pytest

from imagekit.errors import CheckFailed, DigestMismatch
from imagekit.image.members import scan_layer
from imagekit.refs import Digest
from tests.support.layer_tars import d, f, make_tar, scan
from tests.support.media_types import OCI_TAR


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


def test_content_not_asked_for_is_passed_over_and_the_stream_read_to_its_end() -> None:
    from imagekit.image.members import iter_members
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
    from imagekit.image.members import iter_members

    tar = make_tar([f("big.bin", b"x" * 100_000), f("after.txt", b"after\n")])
    with pytest.raises(CheckFailed, match="not a readable tar"):
        list(iter_members(io.BytesIO(tar[:50_000]), hash_content=lambda p, n: False))


def test_a_tap_reads_what_it_asks_for_as_it_streams_past() -> None:
    """The SBOM's way in: a sink gets a file's chunks and then b""; one that wants no more
    stops getting them, and the members after it, their hashes and the diffID are unchanged."""
    from imagekit.image.members import iter_members
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
