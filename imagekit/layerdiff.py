"""What changed between two images' filesystems, when their layers' diffIDs differ.

Two rebuilds of one plan rarely give the same layer bytes (BuildKit stamps files with the
build's time, pip writes bytecode with source mtimes), so "different diffIDs" says little. This
module streams each layer tar once, applies the layers in order the way the OCI image spec
says (whiteouts and opaque directories:
https://github.com/opencontainers/image-spec/blob/main/layer.md#whiteouts), and keeps one entry
a path: kind, mode, owner, size, the sha256 of its content and its link target. Two such trees
are then compared with timestamps left out and bytecode caches (``__pycache__``, ``*.pyc``)
set apart, so what remains is a real change: a distribution at another version, a file added,
removed or changed.

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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from email.parser import HeaderParser
from enum import StrEnum
from typing import IO, TYPE_CHECKING, Any, Protocol

from packaging.utils import canonicalize_name

from imagekit.errors import CheckFailed, DigestMismatch
from imagekit.layers.media import LayerLimits
from imagekit.layers.reader import open_uncompressed
from imagekit.refs import Digest, Platform, parse_reference

if TYPE_CHECKING:
    from imagekit.registry import RegistryClient, ResolvedImage

_CHUNK = 1 << 20
_CAPTURE_LIMIT = 16 << 20
_CAPTURE = re.compile(
    r"(?:^|/)[^/]+\.dist-info/(?:METADATA|RECORD)$|(?:^|/)[^/]+\.egg-info/PKG-INFO$"
    r"|^var/lib/dpkg/status$"
)
_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"
# How many set-apart paths a report lists by name (the count is always exact).
_LIST_LIMIT = 200


def _norm(name: str) -> str:
    path = posixpath.normpath("/" + name).lstrip("/")
    return "" if path == "." else path


def is_bytecode(path: str) -> bool:
    """Bytecode caches embed source mtimes, so they differ between equal rebuilds."""
    return path.endswith((".pyc", ".pyo")) or "/__pycache__/" in f"/{path}/"


@dataclass(frozen=True)
class FileEntry:
    """One path of a filesystem; ``mtime`` is kept but never compared.

    In one layer's index (imagekit.builders.assemble.index) ``kind`` may also be ``hardlink``, with
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
                path = _norm(member.name)
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
                    link = _norm(member.linkname)
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


@dataclass(frozen=True)
class Distribution:
    """A Python distribution found by its ``.dist-info`` (or ``.egg-info``) folder."""

    name: str
    version: str
    location: str
    files: frozenset[str]

    @property
    def key(self) -> tuple[str, str]:
        return (self.location, self.name)


@dataclass(frozen=True)
class Tree:
    """A whole filesystem after all layers, with the distributions and Debian packages in it."""

    entries: Mapping[str, FileEntry]
    captured: Mapping[str, bytes]
    diff_ids: tuple[Digest, ...] = ()

    def distributions(self) -> dict[tuple[str, str], Distribution]:
        found: dict[tuple[str, str], Distribution] = {}
        for path, data in self.captured.items():
            folder, base = posixpath.split(path)
            if base not in ("METADATA", "PKG-INFO"):
                continue
            headers = HeaderParser().parsestr(data.decode("utf-8", "replace"))
            name, version = headers.get("Name"), headers.get("Version")
            if not name or not version:
                continue
            location = posixpath.dirname(folder)
            files: set[str] = set()
            record = self.captured.get(posixpath.join(folder, "RECORD"))
            if record is not None:
                for line in record.decode("utf-8", "replace").splitlines():
                    rel = line.rsplit(",", 2)[0] if line.count(",") >= 2 else line
                    if rel:
                        files.add(_norm(posixpath.join(location, rel)))
            dist = Distribution(
                str(canonicalize_name(name)), version.strip(), location, frozenset(files)
            )
            found[dist.key] = dist
        return found

    def debian_packages(self) -> dict[str, str]:
        data = self.captured.get("var/lib/dpkg/status")
        if data is None:
            return {}
        packages: dict[str, str] = {}
        for stanza in data.decode("utf-8", "replace").split("\n\n"):
            headers = HeaderParser().parsestr(stanza)
            name, version, status = (
                headers.get("Package"),
                headers.get("Version"),
                headers.get("Status", ""),
            )
            if name and version and status.endswith(" installed"):
                arch = headers.get("Architecture")
                packages[f"{name}:{arch}" if arch else name] = version
        return packages


def apply_layers(layers: Iterable[LayerScan], lower: Tree | None = None) -> Tree:
    """Stack layers over ``lower`` (or an empty filesystem), following the spec's whiteouts."""
    entries: dict[str, FileEntry] = dict(lower.entries) if lower else {}
    captured: dict[str, bytes] = dict(lower.captured) if lower else {}
    diff_ids = list(lower.diff_ids) if lower else []
    for layer in layers:
        # A non-directory replacing a lower directory hides everything beneath it too.
        hidden = set(layer.whiteouts) | {
            p for p, e in layer.entries.items() if e.kind != "dir" and p in entries
        }
        cleared = set(layer.opaque_dirs) | hidden
        if hidden or cleared:
            for path in list(entries):
                if path in layer.whiteouts or _under_any(path, cleared):
                    del entries[path]
                    captured.pop(path, None)
        entries.update(layer.entries)
        for path in layer.entries:
            captured.pop(path, None)
        captured.update(layer.captured)
        diff_ids.append(layer.diff_id)
    return Tree(entries, captured, tuple(diff_ids))


def _under_any(path: str, folders: set[str]) -> bool:
    parent = posixpath.dirname(path)
    while parent:
        if parent in folders:
            return True
        parent = posixpath.dirname(parent)
    return "" in folders


@dataclass(frozen=True)
class FileChange:
    path: str
    change: str  # added, removed, changed
    fields: tuple[str, ...]
    before: FileEntry | None
    after: FileEntry | None
    distribution: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "change": self.change,
            "fields": list(self.fields),
            "before": self.before.to_json() if self.before else None,
            "after": self.after.to_json() if self.after else None,
            "distribution": self.distribution,
        }


@dataclass(frozen=True)
class PackageChange:
    """A Python distribution or Debian package added, removed or at another version."""

    ecosystem: str  # python, debian
    name: str
    location: str | None
    before: str | None
    after: str | None

    @property
    def change(self) -> str:
        if self.before is None:
            return "added"
        if self.after is None:
            return "removed"
        return "version"

    def describe(self) -> str:
        where = f" ({self.location})" if self.location else ""
        if self.change == "added":
            return f"{self.ecosystem} {self.name} {self.after} added{where}"
        if self.change == "removed":
            return f"{self.ecosystem} {self.name} {self.before} removed{where}"
        return f"{self.ecosystem} {self.name} {self.before} -> {self.after}{where}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "change": self.change}


@dataclass(frozen=True)
class TreeDiff:
    """The difference of two trees; ``equivalent`` when nothing outside the set-apart remains."""

    files: tuple[FileChange, ...]
    packages: tuple[PackageChange, ...]
    bytecode_changed: int
    bytecode_paths: tuple[str, ...]
    timestamp_only: int
    paths_before: int
    paths_after: int
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def equivalent(self) -> bool:
        return not self.files and not self.packages

    def summary(self) -> list[str]:
        """Human lines: package changes first (what a reviewer looks for), then files."""
        lines = [p.describe() for p in self.packages]
        counts = {
            k: sum(1 for f in self.files if f.change == k) for k in ("added", "removed", "changed")
        }
        if self.files:
            lines.append(
                f"files: {counts['added']} added, {counts['removed']} removed, "
                f"{counts['changed']} changed"
            )
            lines.extend(f"  {f.change} {f.path}" for f in self.files[:20])
            if len(self.files) > 20:
                lines.append(f"  ... and {len(self.files) - 20} more")
        lines.append(
            f"set apart: {self.bytecode_changed} bytecode cache paths differ, "
            f"{self.timestamp_only} files differ only in their timestamps"
        )
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "equivalent": self.equivalent,
            "packages": [p.to_json() for p in self.packages],
            "files": [f.to_json() for f in self.files],
            "set_apart": {
                "bytecode_changed": self.bytecode_changed,
                "bytecode_paths": list(self.bytecode_paths),
                "timestamp_only": self.timestamp_only,
            },
            "paths_before": self.paths_before,
            "paths_after": self.paths_after,
        }


def diff_trees(before: Tree, after: Tree) -> TreeDiff:
    """Compare two trees path by path; timestamps ignored, bytecode caches counted apart."""
    dists_before, dists_after = before.distributions(), after.distributions()
    owner: dict[str, str] = {}
    for dist in (*dists_before.values(), *dists_after.values()):
        for path in dist.files:
            owner.setdefault(path, dist.name)
    files: list[FileChange] = []
    bytecode: list[str] = []
    timestamp_only = 0
    for path in sorted(before.entries.keys() | after.entries.keys()):
        a, b = before.entries.get(path), after.entries.get(path)
        if a is not None and b is not None:
            differing = a.differing_fields(b)
            if not differing:
                if a.mtime != b.mtime:
                    timestamp_only += 1
                continue
            change, fields = "changed", differing
        else:
            change, fields = ("added", ()) if a is None else ("removed", ())
        if is_bytecode(path):
            bytecode.append(path)
            continue
        files.append(FileChange(path, change, fields, a, b, owner.get(path)))
    packages: list[PackageChange] = []
    for key in sorted(dists_before.keys() | dists_after.keys()):
        da, db = dists_before.get(key), dists_after.get(key)
        va, vb = (da.version if da else None), (db.version if db else None)
        if va != vb:
            packages.append(PackageChange("python", key[1], key[0], va, vb))
    debs_before, debs_after = before.debian_packages(), after.debian_packages()
    for name in sorted(debs_before.keys() | debs_after.keys()):
        va, vb = debs_before.get(name), debs_after.get(name)
        if va != vb:
            packages.append(PackageChange("debian", name, None, va, vb))
    return TreeDiff(
        files=tuple(files),
        packages=tuple(packages),
        bytecode_changed=len(bytecode),
        bytecode_paths=tuple(bytecode[:_LIST_LIMIT]),
        timestamp_only=timestamp_only,
        paths_before=len(before.entries),
        paths_after=len(after.entries),
    )


class LayerSource(Protocol):
    """An image whose layers can be streamed as uncompressed tars, in order."""

    @property
    def label(self) -> str: ...

    @property
    def random_access(self) -> bool:
        """True when one layer can be read without streaming the ones before it."""
        ...

    def diff_ids(self) -> Sequence[Digest]:
        """The diffIDs the image's config names, bottom layer first."""
        ...

    def scan(self, indices: Sequence[int]) -> dict[int, LayerScan]:
        """Scan the layers at these positions (each verified against its diffID)."""
        ...


class ComparisonVerdict(StrEnum):
    """How two images compare: bit for bit, equal but for timestamps and bytecode, or not."""

    REPRODUCIBLE = "reproducible"
    EQUIVALENT = "equivalent"
    CHANGED = "changed"


@dataclass(frozen=True)
class ImageComparison:
    """Two images compared: bit-for-bit when all diffIDs agree, else by layer content."""

    before: str
    after: str
    diff_ids_before: tuple[Digest, ...]
    diff_ids_after: tuple[Digest, ...]
    shared_layers: int
    diff: TreeDiff | None

    @property
    def verdict(self) -> ComparisonVerdict:
        if self.diff_ids_before == self.diff_ids_after:
            return ComparisonVerdict.REPRODUCIBLE
        assert self.diff is not None  # noqa: S101 - set whenever diffIDs differ
        return ComparisonVerdict.EQUIVALENT if self.diff.equivalent else ComparisonVerdict.CHANGED

    def to_json(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "after": self.after,
            "verdict": self.verdict,
            "diff_ids_before": [str(d) for d in self.diff_ids_before],
            "diff_ids_after": [str(d) for d in self.diff_ids_after],
            "shared_layers": self.shared_layers,
            "diff": self.diff.to_json() if self.diff else None,
        }


def compare_images(before: LayerSource, after: LayerSource) -> ImageComparison:
    """Compare two images; layers they share at the bottom are read from one side only."""
    ids_before, ids_after = tuple(before.diff_ids()), tuple(after.diff_ids())
    shared = 0
    for a, b in zip(ids_before, ids_after, strict=False):
        if a != b:
            break
        shared += 1
    if ids_before == ids_after:
        return ImageComparison(before.label, after.label, ids_before, ids_after, shared, None)
    # Read the shared bottom from a side that can skip layers, if either can.
    if after.random_access and not before.random_access:
        first, second, first_ids, second_ids = after, before, ids_after, ids_before
    else:
        first, second, first_ids, second_ids = before, after, ids_before, ids_after
    first_scans = first.scan(range(len(first_ids)))
    second_scans = second.scan(range(shared, len(second_ids)))
    lower = apply_layers(first_scans[i] for i in range(shared))
    first_tree = apply_layers((first_scans[i] for i in range(shared, len(first_ids))), lower)
    second_tree = apply_layers((second_scans[i] for i in range(shared, len(second_ids))), lower)
    if first is before:
        tree_before, tree_after = first_tree, second_tree
    else:
        tree_before, tree_after = second_tree, first_tree
    return ImageComparison(
        before.label,
        after.label,
        ids_before,
        ids_after,
        shared,
        diff_trees(tree_before, tree_after),
    )


@dataclass(frozen=True)
class RegistryImage:
    """An image in a registry, resolved once; any layer can be streamed on its own."""

    client: RegistryClient
    resolved: ResolvedImage
    label: str
    random_access: bool = True
    limits: LayerLimits = field(default_factory=LayerLimits)

    @classmethod
    def open(
        cls, client: RegistryClient, reference: str, platform: Platform | None = None
    ) -> RegistryImage:
        ref = parse_reference(reference)
        return cls(client, client.resolve(ref, platform), reference)

    def diff_ids(self) -> Sequence[Digest]:
        return list(self.resolved.diff_ids)

    def scan(self, indices: Sequence[int]) -> dict[int, LayerScan]:
        from imagekit.errors import LayerFormatError

        result: dict[int, LayerScan] = {}
        ref = self.resolved.reference
        for index in indices:
            desc = self.resolved.layers[index]
            chunks = self.client.stream_blob(ref, desc)
            # closing the stream stops its reader thread, which closes the download
            with open_uncompressed(
                chunks, media_type=desc.media_type, limits=self.limits
            ) as stream:
                try:
                    result[index] = scan_layer(stream, expected=self.resolved.diff_ids[index])
                except (OSError, EOFError) as exc:
                    raise LayerFormatError(
                        f"layer {index} ({desc.digest}) of {self.label} does not decompress: {exc}"
                    ) from exc
        return result
