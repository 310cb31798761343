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

Each image is read through the image interface (imagekit.image: any implementation, the
registry's for the nightly flow) and each layer scanned by imagekit.image.members: layers are
never held in memory or written to disk; only small package metadata (``*.dist-info/METADATA``
and ``RECORD``, dpkg's status file) is kept, to name distributions.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from email.parser import HeaderParser
from enum import StrEnum
from typing import Any

from packaging.utils import canonicalize_name

from imagekit.image.interface import LayerSource
from imagekit.image.members import FileEntry, LayerScan, member_path
from imagekit.refs import Digest

# How many set-apart paths a report lists by name (the count is always exact).
_LIST_LIMIT = 200


def is_bytecode(path: str) -> bool:
    """Bytecode caches embed source mtimes, so they differ between equal rebuilds."""
    return path.endswith((".pyc", ".pyo")) or "/__pycache__/" in f"/{path}/"


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
                        files.add(member_path(posixpath.join(location, rel)))
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
