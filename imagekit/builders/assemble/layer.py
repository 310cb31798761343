"""The overlay layer: a tar written byte for byte the same from the same inputs, and its digests.

What makes it reproducible (the same plan on the same base gives the same blob, on any
machine with the same imagekit):

- entries sorted by path, every folder above a file present before it;
- owner and group numeric (uname/gname empty), modes from the plan or 0644/0755, mtimes from
  the build's epoch (folders that already exist in the base keep the base's own mode, owner
  and mtime, so laying a file into ``/tmp`` does not change ``/tmp``);
- ustar headers, and a PAX header only where a field does not fit (a long or non-ASCII name,
  an id or size too large), as Python's PAX writer does when every field is an integer;
- gzip through ISA-L at a fixed level (the ``isal`` package bundles its own library, so the
  bytes do not depend on the system's zlib), with mtime 0 and no file name in its header.

The tar's sha256 (the diffID) and the gzip's sha256 (the blob digest) are computed in the
same pass that writes the blob; nothing is read twice.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from isal import isal_zlib

from imagekit.refs import Digest

GZIP_LEVEL = 2  # ISA-L's levels are 0..3; 2 is its default


@dataclass(frozen=True)
class TarEntry:
    """One member of the layer: a folder, or a file whose bytes come from ``source``."""

    path: str  # relative to the image root, normalised, no trailing slash
    kind: str  # "file" or "dir"
    mode: int
    uid: int
    gid: int
    mtime: int
    source: Path | None = None

    def header(self) -> tarfile.TarInfo:
        info = tarfile.TarInfo(self.path)
        info.type = tarfile.DIRTYPE if self.kind == "dir" else tarfile.REGTYPE
        info.mode, info.uid, info.gid, info.mtime = self.mode, self.uid, self.gid, self.mtime
        info.uname = info.gname = ""
        if self.source is not None:
            info.size = self.source.stat().st_size
        return info


@dataclass(frozen=True)
class LayerBlob:
    """The written blob's digests and sizes."""

    digest: Digest
    diff_id: Digest
    size: int
    uncompressed_size: int
    files: int
    folders: int

    def to_json(self) -> dict[str, Any]:
        return {
            "digest": str(self.digest),
            "diff_id": str(self.diff_id),
            "size": self.size,
            "uncompressed_size": self.uncompressed_size,
            "files": self.files,
            "folders": self.folders,
            "compression": f"gzip (ISA-L level {GZIP_LEVEL})",
        }


class _Sink(io.RawIOBase):
    """tarfile writes here: hash the tar, compress it, hash and keep the gzip."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._tar = hashlib.sha256()
        self._gz = hashlib.sha256()
        self._deflate = isal_zlib.compressobj(GZIP_LEVEL, isal_zlib.DEFLATED, 31)
        self.tar_size = 0
        self.gz_size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self._tar.update(chunk)
        self.tar_size += len(chunk)
        self._emit(self._deflate.compress(chunk))
        return len(chunk)

    def _emit(self, packed: bytes) -> None:
        if packed:
            self._gz.update(packed)
            self.gz_size += len(packed)
            self._out.write(packed)

    def finish(self) -> tuple[Digest, Digest]:
        self._emit(self._deflate.flush())
        return Digest.from_hasher(self._tar), Digest.from_hasher(self._gz)


def check_tree(entries: Sequence[TarEntry]) -> None:
    """Refuse a set of entries that is not a tree: a path twice, or a file above another."""
    kinds: dict[str, str] = {}
    for entry in entries:
        if entry.path in kinds and (kinds[entry.path], entry.kind) != ("dir", "dir"):
            raise ValueError(f"/{entry.path} is written twice")
        kinds[entry.path] = entry.kind
    for path in kinds:
        parent = path.rpartition("/")[0]
        while parent:
            if kinds.get(parent, "dir") != "dir":
                raise ValueError(f"/{path} lies below the file /{parent}")
            parent = parent.rpartition("/")[0]


def write_layer(entries: Sequence[TarEntry], out: IO[bytes]) -> LayerBlob:
    """Write the entries (sorted, folders deduplicated) as a gzip tar into ``out``."""
    check_tree(entries)
    unique: dict[str, TarEntry] = {}
    for entry in entries:
        unique.setdefault(entry.path, entry)
    ordered = [unique[path] for path in sorted(unique)]
    sink = _Sink(out)
    # mode "w|": a stream; nothing seeks, and tarfile pads it to whole 10 KiB records the same
    # way every time. A source that shrinks while it is copied fails the write (tarfile
    # raises "unexpected end of data"); one that grows is cut at the size in its header.
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.USTAR_FORMAT) as archive:
        for entry in ordered:
            info = entry.header()
            archive.format = _format_for(info)
            if entry.source is None:
                archive.addfile(info)
                continue
            with entry.source.open("rb") as handle:
                archive.addfile(info, handle)
    diff_id, digest = sink.finish()
    return LayerBlob(
        digest=digest,
        diff_id=diff_id,
        size=sink.gz_size,
        uncompressed_size=sink.tar_size,
        files=sum(1 for e in ordered if e.kind == "file"),
        folders=sum(1 for e in ordered if e.kind == "dir"),
    )


def _format_for(info: tarfile.TarInfo) -> Literal[0, 1, 2]:
    """ustar where the member fits it (long names split into prefix/name), else PAX."""
    try:
        info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict")
    except ValueError:
        return tarfile.PAX_FORMAT
    return tarfile.USTAR_FORMAT
