"""The overlay layer writer: the same bytes from the same inputs, digests from the one pass."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from imagekit.builders.assemble.layer import TarEntry, check_tree, write_layer


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "module.py"
    path.write_bytes(b"PATCHED = True\n")
    return path


def _entries(source: Path) -> list[TarEntry]:
    return [
        TarEntry("usr/lib/python3/dist-packages/pkg/module.py", "file", 0o644, 0, 0, 7, source),
        TarEntry("usr", "dir", 0o755, 0, 0, 1),
        TarEntry("usr/lib", "dir", 0o755, 0, 0, 1),
        TarEntry("usr/lib/python3", "dir", 0o755, 0, 0, 1),
        TarEntry("usr/lib/python3/dist-packages", "dir", 0o755, 0, 0, 1),
        TarEntry("usr/lib/python3/dist-packages/pkg", "dir", 0o755, 0, 0, 1),
        TarEntry("opt/" + "n" * 90 + "/" + "m" * 60, "file", 0o750, 12, 34, 7, source),
        TarEntry("opt", "dir", 0o755, 0, 0, 7),
        TarEntry("opt/" + "n" * 90, "dir", 0o755, 12, 34, 7),
        TarEntry("srv/" + "x" * 120, "file", 0o644, 0, 0, 7, source),
        TarEntry("srv", "dir", 0o755, 0, 0, 7),
    ]


def test_the_same_entries_in_any_order_give_the_same_bytes(source: Path) -> None:
    entries = _entries(source)
    one, two = io.BytesIO(), io.BytesIO()
    first = write_layer(entries, one)
    second = write_layer(list(reversed(entries)), two)
    assert one.getvalue() == two.getvalue() and first == second
    # Both digests come from the one pass, and match the bytes written.
    assert first.digest == "sha256:" + hashlib.sha256(one.getvalue()).hexdigest()
    tar = gzip.decompress(one.getvalue())
    assert first.diff_id == "sha256:" + hashlib.sha256(tar).hexdigest()
    assert (first.size, first.uncompressed_size) == (len(one.getvalue()), len(tar))
    assert (first.files, first.folders) == (3, 8)
    # The gzip header carries no time and no name.
    assert one.getvalue()[4:8] == b"\0\0\0\0" and not one.getvalue()[3] & 0x08


def test_members_sorted_with_their_folders_and_pax_only_where_needed(source: Path) -> None:
    blob = io.BytesIO()
    write_layer(_entries(source), blob)
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob.getvalue()))) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert names[0] == "opt" and names[-1] == "usr/lib/python3/dist-packages/pkg/module.py"
    long_ok = next(m for m in members if m.name.endswith("m" * 60))
    assert long_ok.pax_headers == {}  # 155 characters split into ustar's prefix and name
    too_long = next(m for m in members if m.name.startswith("srv/x"))
    assert "path" in too_long.pax_headers  # a last part over 100 characters needs PAX
    assert all(m.uname == "" and m.gname == "" for m in members)
    owned = next(m for m in members if m.name == long_ok.name)
    assert (owned.mode, owned.uid, owned.gid, owned.mtime) == (0o750, 12, 34, 7)


def test_a_path_twice_or_a_file_above_a_file_is_not_a_tree(source: Path) -> None:
    with pytest.raises(ValueError, match="written twice"):
        check_tree([TarEntry("a", "file", 0o644, 0, 0, 0, source)] * 2)
    with pytest.raises(ValueError, match="below the file /a"):
        check_tree(
            [TarEntry("a", "file", 0o644, 0, 0, 0, source),
             TarEntry("a/b", "file", 0o644, 0, 0, 0, source)]
        )  # fmt: skip
    check_tree([TarEntry("a", "dir", 0o755, 0, 0, 0)] * 2)  # a folder twice is one folder


def test_a_source_that_shrinks_while_written_fails(tmp_path: Path) -> None:
    path = tmp_path / "grows"
    path.write_bytes(b"x" * 10)
    entry = TarEntry("f", "file", 0o644, 0, 0, 0, path)
    info = entry.header()
    path.write_bytes(b"x")  # after the header's size was taken

    class Late(TarEntry):
        def header(self) -> tarfile.TarInfo:
            return info

    with pytest.raises(OSError, match="unexpected end of data"):
        write_layer([Late("f", "file", 0o644, 0, 0, 0, path)], io.BytesIO())
