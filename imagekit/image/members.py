"""What one layer holds: its tar members streamed, hashed as they pass, and scanned.

A layer is a tar (compressed or not, imagekit.layers inflates it) applied over the layers
below it as the OCI image spec says (whiteouts and opaque directories:
https://github.com/opencontainers/image-spec/blob/main/layer.md#whiteouts). ``iter_members``
reads each member once, hashing the content it is asked to and handing what a ``Tap`` asks
for to its sink; ``scan_layer`` keeps one :class:`FileEntry` a path (kind, mode, owner,
size, sha256, link target) with the layer's whiteouts, opaque folders and small package
metadata, and checks the layer's diffID. The layer index (imagekit.image.index), the
comparison of two images (imagekit.layerdiff) and the SBOM read layers through here.

Layers are never held in memory or written to disk: each member's content is hashed as it
streams past; only small package metadata (``*.dist-info/METADATA`` and ``RECORD``, dpkg's
status file) is kept, to name distributions.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import re
import tarfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

from imagekit.errors import CheckFailed, DigestMismatch
from imagekit.refs import Digest

_CHUNK = 1 << 20
_CAPTURE_LIMIT = 16 << 20
_CAPTURE = re.compile(
    r"(?:^|/)[^/]+\.dist-info/(?:METADATA|RECORD)$|(?:^|/)[^/]+\.egg-info/PKG-INFO$"
    r"|^var/lib/dpkg/status$"
)
_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"


def member_path(name: str) -> str:
    """A tar member's name as a path relative to the root ("" for the root itself)."""
    path = posixpath.normpath("/" + name).lstrip("/")
    return "" if path == "." else path


@dataclass(frozen=True)
class FileEntry:
    """One path of a filesystem; ``mtime`` is kept but never compared.

    In one layer's index (imagekit.image.index) ``kind`` may also be ``hardlink``, with
    the link's target in ``link``; a merged tree resolves hard links to files.
    """

    path: str
    kind: str  # file, dir, symlink, char, block, fifo (hardlink in a layer index)
    mode: int
    uid: int
    gid: int
    size: int
    sha256: str | None
    link: str | None
    mtime: int

    def compared(self) -> tuple[Any, ...]:
        return (self.kind, self.mode, self.uid, self.gid, self.size, self.sha256, self.link)

    def differing_fields(self, other: FileEntry) -> tuple[str, ...]:
        names = ("kind", "mode", "uid", "gid", "size", "sha256", "link")
        return tuple(
            n for n, a, b in zip(names, self.compared(), other.compared(), strict=True) if a != b
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "mode": f"{self.mode:04o}",
            "uid": self.uid,
            "gid": self.gid,
            "size": self.size,
            "sha256": self.sha256,
            "link": self.link,
        }


@dataclass(frozen=True)
class LayerScan:
    """What one layer tar does to the filesystem below it."""

    diff_id: Digest
    entries: Mapping[str, FileEntry]
    whiteouts: frozenset[str]
    opaque_dirs: frozenset[str]
    captured: Mapping[str, bytes]


class _HashingReader(io.RawIOBase):
    """Passes a stream through, hashing every byte read (the layer's diffID)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self.hasher = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._raw.read(len(buffer))
        if not data:
            return 0
        n = len(data)
        buffer[:n] = data
        self.hasher.update(data)
        return n


# A member's kind: the name of the first of tarfile's type tests that holds for it.
_KINDS = (
    ("file", tarfile.TarInfo.isreg),
    ("dir", tarfile.TarInfo.isdir),
    ("symlink", tarfile.TarInfo.issym),
    ("hardlink", tarfile.TarInfo.islnk),
    ("char", tarfile.TarInfo.ischr),
    ("block", tarfile.TarInfo.isblk),
    ("fifo", tarfile.TarInfo.isfifo),
)


def _kind(member: tarfile.TarInfo) -> str | None:
    return next((kind for kind, test in _KINDS if test(member)), None)


@dataclass(frozen=True)
class Member:
    """One member of a layer tar, as the archive says it (nothing of other members applied).

    ``kind`` is file, dir, symlink, hardlink, char, block or fifo; or ``whiteout`` (``path``
    is what the layer deletes below it) or ``opaque`` (``path`` is the folder whose lower
    content the layer hides). A hard link's ``link`` is its normalised target, and its size
    and sha256 are those of no content (the target's are found where the target is).
    """

    path: str
    kind: str
    mode: int = 0
    uid: int = 0
    gid: int = 0
    size: int = 0
    sha256: str | None = None
    link: str | None = None
    mtime: int = 0
    content: bytes | None = None  # kept only for the paths ``capture`` asked for

    def fields(self) -> tuple[str, str, int, int, int, int, str | None, str | None, int]:
        """Everything but the content, in FileEntry's order."""
        return (self.path, self.kind, self.mode, self.uid, self.gid, self.size, self.sha256,
                self.link, self.mtime)  # fmt: skip


#: Handed a file's content as it streams past, a chunk at a time, then ``b""`` at its end;
#: returns False once it wants no more of this file.
Sink = Callable[[bytes], bool]
#: Asked of every member (its normalised path, its kind and size) before its content streams
#: past: a Sink for a file whose content it wants, or None.
Tap = Callable[[str, str, int], Sink | None]


def iter_members(
    stream: IO[bytes] | io.RawIOBase,
    *,
    capture: Callable[[str, int], bool] | None = None,
    hash_content: Callable[[str, int], bool] | None = None,
    tap: Tap | None = None,
) -> Iterator[Member]:
    """The members of one uncompressed layer tar, in archive order, content hashed as it
    streams past; once exhausted, the stream has been read to its very end (the padding
    after the end-of-archive blocks included, which a diffID covers).

    ``capture(path, size)`` says which files' bytes to keep in ``Member.content``;
    ``hash_content(path, size)``, when given, which files' content to hash (a file it
    declines has ``sha256`` None, and its bytes stream past unhashed; captured files are
    hashed always). ``tap``, when given, is asked of each member and may read a file's
    content as it streams past (the SBOM parses package metadata so, in the pass that
    indexes the layer, never holding a file whole). Member types that are no file system
    object (GNU volume headers and the like) are skipped. Raises CheckFailed when the stream
    is not a tar archive.
    """
    try:
        # tarfile's seeking mode on a forward-only stream: a member's content it is not
        # asked for is passed over with seek() (see _Forward), where stream mode ("r|")
        # copies every byte through its buffer in 10 KiB records.
        with tarfile.open(fileobj=_Forward(stream), mode="r:") as archive:
            for member in archive:
                # tarfile keeps every member it has read; a layer of 100 000 files would
                # hold them all. In stream mode nothing needs them again.
                archive.members.clear()  # type: ignore[attr-defined]
                path = member_path(member.name)
                if not path:
                    continue
                parent, base = posixpath.split(path)
                if base == _OPAQUE:
                    yield Member(parent, "opaque", mtime=int(member.mtime))
                    continue
                if base.startswith(_WHITEOUT):
                    whited = posixpath.join(parent, base[len(_WHITEOUT) :])
                    yield Member(whited, "whiteout", mtime=int(member.mtime))
                    continue
                kind = _kind(member)
                if kind is None:
                    continue
                digest: str | None = None
                content: bytes | None = None
                sink = tap(path, kind, member.size) if tap is not None else None
                keep = kind == "file" and capture is not None and capture(path, member.size)
                hashing = kind == "file" and (
                    keep or hash_content is None or hash_content(path, member.size)
                )
                if hashing or (kind == "file" and sink is not None):
                    hasher = hashlib.sha256()
                    kept: list[bytes] = []
                    data = archive.extractfile(member)
                    while data is not None and (chunk := data.read(_CHUNK)):
                        if sink is not None and not sink(chunk):
                            sink = None
                            if not hashing:
                                break  # tarfile passes over the rest of it
                        if hashing:
                            hasher.update(chunk)
                        if keep:
                            kept.append(chunk)
                    if sink is not None:
                        sink(b"")
                    digest = "sha256:" + hasher.hexdigest() if hashing else None
                    content = b"".join(kept) if keep else None
                link = None
                if kind == "symlink":
                    link = member.linkname
                elif kind == "hardlink":
                    link = member_path(member.linkname)
                yield Member(
                    path,
                    kind,
                    member.mode & 0o7777,
                    member.uid,
                    member.gid,
                    member.size if kind == "file" else 0,
                    digest,
                    link,
                    int(member.mtime),
                    content,
                )
    except tarfile.TarError as exc:
        raise CheckFailed(
            f"a layer is not a readable tar archive: {exc}",
            hint="the blob may be truncated or not a layer; inspect it with `imagekit inspect`",
        ) from exc
    # Tar writers pad the archive past its end-of-archive blocks; the diffID covers all of it.
    while stream.read(_CHUNK):
        pass


class _Forward(io.RawIOBase):
    """A stream that seeks forward only, for tarfile's seeking mode over a layer that streams.

    tarfile moves forward from member to member with ``seek``; here that passes over the
    bytes, through the stream's ``skip(n)`` where it has one (imagekit.layers'
    UncompressedReader, which drops them uncopied) and by reading them otherwise. A seek
    backwards, which reading the members in order never makes, is refused. ``read(n)``
    returns ``n`` bytes unless the stream ends, as tarfile expects of a file.
    """

    def __init__(self, raw: IO[bytes] | io.RawIOBase) -> None:
        super().__init__()
        self._raw = raw
        self._skip: Callable[[int], int] | None = getattr(raw, "skip", None)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            data = self._raw.read() or b""
        else:
            data = self._raw.read(size) or b""
            while 0 < len(data) < size:  # a raw stream may return less than asked
                more = self._raw.read(size - len(data))
                if not more:
                    break
                data += more
        self._pos += len(data)
        return bytes(data)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset + (self._pos if whence == io.SEEK_CUR else 0)
        if whence not in (io.SEEK_SET, io.SEEK_CUR) or target < self._pos:
            raise io.UnsupportedOperation("a layer stream only moves forward")
        left = target - self._pos
        while left:
            if self._skip is not None:
                moved = self._skip(left)
            else:
                moved = len(self._raw.read(min(left, _CHUNK)) or b"")
            if not moved:
                break  # the stream ended: tarfile's next read finds nothing and says so
            self._pos += moved
            left -= moved
        return self._pos


def _capture(path: str, size: int) -> bool:
    return bool(_CAPTURE.search(path)) and size <= _CAPTURE_LIMIT


def scan_layer(stream: IO[bytes], *, expected: Digest | None = None) -> LayerScan:
    """Read one uncompressed layer tar from ``stream`` (to its end) and describe it.

    The stream's sha256 is the layer's diffID; when ``expected`` is given a different one is a
    DigestMismatch, since the layer is then not the one the image's config names.
    """
    reader = _HashingReader(stream)
    buffered = io.BufferedReader(reader, buffer_size=_CHUNK)
    entries: dict[str, FileEntry] = {}
    whiteouts: set[str] = set()
    opaque: set[str] = set()
    captured: dict[str, bytes] = {}
    for member in iter_members(buffered, capture=_capture):
        path = member.path
        if member.kind == "opaque":
            opaque.add(path)
        elif member.kind == "whiteout":
            whiteouts.add(path)
        elif member.kind == "hardlink":
            target_path = member.link or ""
            target = entries.get(target_path)
            entries[path] = FileEntry(
                path,
                "file",
                member.mode,
                member.uid,
                member.gid,
                target.size if target else 0,
                target.sha256 if target else None,
                None if target else f"hardlink:{target_path}",
                member.mtime,
            )
            if target and target_path in captured:
                captured[path] = captured[target_path]
        else:
            entries[path] = FileEntry(*member.fields())
            if member.content is not None:
                captured[path] = member.content
    diff_id = Digest("sha256:" + reader.hasher.hexdigest())
    if expected is not None and diff_id != expected:
        raise DigestMismatch(
            "a layer's uncompressed content does not match the diffID its image config names",
            expected=str(expected),
            actual=str(diff_id),
        )
    return LayerScan(diff_id, entries, frozenset(whiteouts), frozenset(opaque), captured)
