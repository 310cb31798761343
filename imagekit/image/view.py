"""An image's merged filesystem, asked path by path, from its layers' indexes.

The image is never extracted: its filesystem is answered layer by layer from the top down,
following the OCI layer rules
(https://github.com/opencontainers/image-spec/blob/main/layer.md#whiteouts):

- the topmost layer with an entry at the path decides it;
- a layer that whites the path out (``.wh.NAME``), whites out a folder above it, makes a
  folder above it opaque (``.wh..wh..opq``), or puts a non-folder where a folder above it
  was, decides that the path is absent (its own entries under an opaque folder still count);
- a layer that only has something below the path makes it a folder (tars need not carry an
  entry for every folder).

A layer is read (streamed and indexed, see imagekit.image.index) only when no layer above it
decided: a file patched in the top layer costs one layer, and a cached index costs none.
An index hashes small files and the paths asked for; when the file that decides is a large
one it did not hash (reached through a symbolic or hard link, or indexed earlier for another
caller), the layers read so far are read again, hashing every file, and the path is resolved
once more.

Paths resolve as COPY resolves its destination: symbolic links are followed within the
image's root, in the folders above the file and in the file itself; a hard link is the file
it names. The builders' overlay guard (imagekit.builders.assemble.guard), the base bump and
the SBOM read an image so.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from imagekit.errors import CouldNotFinish, ImagekitError, RegistryNotFound
from imagekit.image.index import IndexStore, LayerIndex, ReadStats
from imagekit.image.interface import Image
from imagekit.image.members import FileEntry
from imagekit.layers.media import LayerLimits, layer_media_type

#: As Linux's MAXSYMLINKS: more links than this on one path is a loop.
MAX_LINKS = 40
_HARDLINK_DEPTH = 8


@dataclass(frozen=True)
class Found:
    """What the merged base has at one literal path (no link followed)."""

    path: str
    entry: FileEntry | None  # the deciding layer's entry; None: nothing of its own there
    layer: int | None  # the layer that decided; None: no layer has anything at the path
    folder: bool = False  # a folder known only from what lies below it
    content: FileEntry | None = None  # for a hard link: the file it names
    content_layer: int | None = None  # for a hard link: the layer that file is in

    @property
    def exists(self) -> bool:
        return self.entry is not None or self.folder

    @property
    def is_folder(self) -> bool:
        return self.folder or (self.entry is not None and self.entry.kind == "dir")

    def describe(self) -> str:
        """What the guard reports as found: sha256:..., absent, directory, symlink:T, ..."""
        if not self.exists:
            return "missing"
        if self.is_folder:
            return "directory"
        assert self.entry is not None  # noqa: S101 - exists and not a folder
        if self.entry.kind == "file":
            return str(self.entry.sha256)
        if self.entry.kind == "hardlink":
            return str(self.content.sha256) if self.content else f"hardlink:{self.entry.link}"
        if self.entry.kind == "symlink":
            return f"symlink:{self.entry.link}"
        return self.entry.kind


@dataclass(frozen=True)
class Resolution:
    """Where a destination lands in the base once its symbolic links are followed."""

    requested: str  # the plan's destination, relative to the root
    path: str  # where the file is written
    final: Found  # what the base has at ``path``
    parents: tuple[Found, ...]  # the folders above ``path`` the base has, top first
    missing: tuple[str, ...]  # the folders above ``path`` the base lacks (written new)
    links: tuple[tuple[str, str], ...]  # each link followed: (where, its target)
    blocked: Found | None = None  # a non-folder where a folder above the path must be


class LinkLoop(ImagekitError):
    """More than MAX_LINKS symbolic links on one destination."""


@dataclass
class LayerUse:
    """How the guard used one base layer: read now, from the cache, or not at all."""

    index: int
    digest: str
    how: str = "not needed"  # read, cached, not needed
    stats: ReadStats | None = None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"layer": self.index, "digest": self.digest, "how": self.how}
        if self.stats is not None:
            document.update(
                compressed_bytes=self.stats.compressed_bytes,
                uncompressed_bytes=self.stats.uncompressed_bytes,
                entries=self.stats.entries,
                seconds=self.stats.seconds,
            )
        return document


def _added(before: ReadStats | None, now: ReadStats) -> ReadStats:
    """What reading a layer cost in all, when it was read again to hash every file."""
    if before is None:
        return now
    return ReadStats(
        now.digest,
        before.compressed_bytes + now.compressed_bytes,
        before.uncompressed_bytes + now.uncompressed_bytes,
        now.entries,
        round(before.seconds + now.seconds, 3),
    )


class BaseView:
    """An image's merged filesystem (a plan's base, for the guard), asked path by path, top
    layer first."""

    def __init__(
        self,
        image: Image,
        store: IndexStore,
        *,
        limits: LayerLimits | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._image, self._store = image, store
        self._layers, self._diff_ids = tuple(image.layers()), tuple(image.diff_ids())
        self._limits, self._log = limits, log
        self._indexes: dict[int, LayerIndex] = {}
        self.uses = [LayerUse(i, str(d.digest)) for i, d in enumerate(self._layers)]
        self.wanted: frozenset[str] = frozenset()  # paths to hash in any layer read
        self._complete = False  # every file of every layer read from now on is hashed

    @property
    def top(self) -> int:
        return len(self._layers) - 1

    def close(self) -> None:
        for index in self._indexes.values():
            index.close()
        self._indexes.clear()

    def __enter__(self) -> BaseView:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _index(self, i: int) -> LayerIndex:
        if i in self._indexes:
            return self._indexes[i]
        desc, diff_id = self._layers[i], self._diff_ids[i]
        use = self.uses[i]
        index = self._store.cached(desc.digest, diff_id, complete=self._complete)
        if index is not None:
            use.how = "cached" if use.stats is None else use.how
        else:
            if self._log is not None:
                self._log(
                    f"guard: reading layer {i} ({desc.digest.short}, {desc.size} bytes) to index it"
                )
            try:
                layer = self._image.layer(i, limits=self._limits)
                index, stats = self._store.build(
                    layer,
                    wanted=self.wanted,
                    complete=self._complete,
                )
            except RegistryNotFound as exc:
                known = layer_media_type(desc.media_type)
                foreign = known is not None and not known[1]
                raise CouldNotFinish(
                    f"layer {i} ({desc.digest}) of the base is not in "
                    f"{self._image.name}"
                    + (" (a non-distributable layer; its URLs are not followed)" if foreign else "")
                    + ": the guard cannot tell what lies below the layers above it",
                    hint="mirror that layer into the base's registry, or build with "
                    "--builder engine",
                ) from exc
            if stats is not None:
                use.how, use.stats = "read", _added(use.stats, stats)
            elif use.stats is None:
                use.how = "cached"
        self._indexes[i] = index
        return index

    def unhashed(self, found: Found) -> bool:
        """True when ``found`` is a file (or a hard link's file) whose index skipped its
        content: its sha256 is not known until its layer is read again."""
        file = (
            found.content
            if found.entry is not None and found.entry.kind == "hardlink"
            else found.entry
        )
        return file is not None and file.kind == "file" and file.sha256 is None

    def hash_everything(self) -> None:
        """From now on every layer is indexed with every file hashed: the incomplete
        indexes opened so far are dropped, so the next lookup reads their layers again."""
        self._complete = True
        for i, index in list(self._indexes.items()):
            if not index.complete:
                index.close()
                del self._indexes[i]

    # ------------------------------------------------------------------ lookups

    def literal(self, path: str, top: int | None = None, *, _depth: int = 0) -> Found:
        """What the merged layers ``0..top`` have at ``path`` (relative, normalised)."""
        for i in range(self.top if top is None else top, -1, -1):
            index = self._index(i)
            entry = index.entry(path)
            if entry is not None:
                content, content_layer = None, None
                if entry.kind == "hardlink" and entry.link and _depth < _HARDLINK_DEPTH:
                    target = self.literal(entry.link, i, _depth=_depth + 1)
                    content = target.content or target.entry
                    content_layer = target.content_layer if target.content else target.layer
                return Found(path, entry, i, content=content, content_layer=content_layer)
            if index.opaque(path) or index.holds_under(path):
                return Found(path, None, i, folder=True)
            if index.whiteout(path) or self._hidden(index, path):
                return Found(path, None, i)
        return Found(path, None, None)

    @staticmethod
    def _hidden(index: LayerIndex, path: str) -> bool:
        """True when this layer hides what lower layers have at ``path``."""
        parent = posixpath.dirname(path)
        while True:
            if index.opaque(parent):
                return True
            if parent:
                if index.whiteout(parent):
                    return True
                above = index.entry(parent)
                if above is not None and above.kind != "dir":
                    return True
            if not parent:
                return False
            parent = posixpath.dirname(parent)

    def resolve(self, destination: str, *, follow_last: bool) -> Resolution:
        """Follow the base's symbolic links on ``destination`` (an absolute path)."""
        requested = destination.strip("/")
        pending = requested.split("/")
        done: list[str] = []
        parents: list[Found] = []
        links: list[tuple[str, str]] = []
        while pending:
            name = pending.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                if done:
                    done.pop()
                    if parents:
                        parents.pop()
                continue
            candidate = "/".join([*done, name])
            found = self.literal(candidate)
            last = not any(p not in ("", ".") for p in pending)
            entry = found.entry
            if entry is not None and entry.kind == "symlink" and (follow_last or not last):
                if len(links) >= MAX_LINKS:
                    raise LinkLoop(
                        f"/{requested}: more than {MAX_LINKS} symbolic links in the base (a loop)",
                        hint="point the overlay at the file itself",
                    )
                target = entry.link or ""
                links.append((candidate, target))
                if target.startswith("/"):
                    done, parents = [], []
                pending = target.split("/") + pending
                continue
            if last:
                return Resolution(requested, candidate, found, tuple(parents), (), tuple(links))
            if not found.exists:
                rest = [p for p in pending if p not in ("", ".")]
                written = "/".join([*done, name, *rest])
                missing = ["/".join([*done, name, *rest[:k]]) for k in range(len(rest))]
                absent = Found(written, None, found.layer)
                return Resolution(
                    requested, written, absent, tuple(parents), tuple(missing), tuple(links)
                )
            if not found.is_folder:
                return Resolution(
                    requested,
                    candidate,
                    Found(requested, None, found.layer),
                    tuple(parents),
                    (),
                    tuple(links),
                    blocked=found,
                )
            parents.append(found)
            done.append(name)
        raise CouldNotFinish(f"{destination!r} names no file")  # pragma: no cover - validated
