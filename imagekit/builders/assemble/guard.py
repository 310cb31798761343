"""The overlay guard without a pull: what the base has at a path, from its layers' indexes.

An overlay says what it replaces: a file with this sha256, or nothing. The engine path checks
that inside the build, on the extracted base. Here the base is never extracted: its
filesystem is answered layer by layer from the top down, following the OCI layer rules
(https://github.com/opencontainers/image-spec/blob/main/layer.md#whiteouts):

- the topmost layer with an entry at the path decides it;
- a layer that whites the path out (``.wh.NAME``), whites out a folder above it, makes a
  folder above it opaque (``.wh..wh..opq``), or puts a non-folder where a folder above it
  was, decides that the path is absent (its own entries under an opaque folder still count);
- a layer that only has something below the path makes it a folder (tars need not carry an
  entry for every folder).

A layer is read (streamed and indexed, see imagekit.builders.assemble.index) only when no
layer above it decided: a file patched in the top layer costs one layer, and a cached index
costs none.
An index hashes small files and the overlays' own destinations; when the file that decides
is a large one it did not hash (reached through a symbolic or hard link, or indexed earlier
for another plan), the layers read so far are read again, hashing every file, and the
destination is resolved once more: one extra read in a rare case, against a third sha256
pass over every byte of every cold read.

Paths resolve as COPY resolves its destination: symbolic links in the base are followed
within the image's root, in the folders above the file and in the file itself, so a guard on
``/lib/x`` where ``/lib -> usr/lib`` checks and writes ``/usr/lib/x``; ``absent`` is checked
on the path itself, as ``[ -e p ] || [ -L p ]`` does (a dangling link is present). A hard
link is the file it names: its content is checked, and the overlay replaces this name only.
The plan's rules about destinations hold for the path as it resolves: a base link that
carries a destination under /proc, /sys or /dev (or onto /etc/hosts) is refused, ``blocked``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from imagekit.builders.assemble.index import IndexStore, LayerIndex, LayerStream, ReadStats
from imagekit.errors import CouldNotFinish, ImagekitError, RegistryNotFound
from imagekit.layerdiff import FileEntry
from imagekit.layers.media import LayerLimits, layer_media_type
from imagekit.plans.steps import Overlay, Step, runtime_mounted
from imagekit.registry import RegistryClient, ResolvedImage

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
    """The base image's merged filesystem, asked path by path, top layer first."""

    def __init__(
        self,
        client: RegistryClient,
        image: ResolvedImage,
        store: IndexStore,
        *,
        limits: LayerLimits | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._client, self._image, self._store = client, image, store
        self._limits, self._log = limits, log
        self._indexes: dict[int, LayerIndex] = {}
        self.uses = [LayerUse(i, str(d.digest)) for i, d in enumerate(image.layers)]
        self.wanted: frozenset[str] = frozenset()  # paths to hash in any layer read
        self._complete = False  # every file of every layer read from now on is hashed

    @property
    def top(self) -> int:
        return len(self._image.layers) - 1

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
        desc, diff_id = self._image.layers[i], self._image.diff_ids[i]
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
                layer = LayerStream(
                    self._client, self._image.reference, desc, diff_id, limits=self._limits
                )
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
                    f"{self._image.reference.name}"
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


@dataclass(frozen=True)
class OverlayCheck:
    """One overlay's guard: what was expected, what the base has, and where it is written."""

    step: int
    destination: str
    expected: str  # sha256:<hex> or absent
    found: str  # sha256:<hex>, absent, missing, directory, symlink:T, present (kind), ...
    verdict: str  # ok, drift, blocked
    resolution: Resolution
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    @property
    def written(self) -> str:
        return "/" + self.resolution.path

    def marker(self) -> str:
        """The engine guard's grep-able words: path=... expected=... actual=..."""
        return f"path={self.destination} expected={self.expected} actual={self.found}"

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "destination": self.destination,
            "written": self.written,
            "expected": self.expected,
            "found": self.found,
            "verdict": self.verdict,
            "decided_by_layer": self.resolution.final.layer,
            "links_followed": [list(link) for link in self.resolution.links],
            "notes": list(self.notes),
        }


def check_overlay(view: BaseView, step: int, overlay: Overlay) -> OverlayCheck:
    """Check one overlay against the base, reading as few layers as decide it."""
    absent = bool(overlay.replaces.absent)
    expected = "absent" if absent else f"sha256:{overlay.replaces.sha256}"
    try:
        resolution = view.resolve(overlay.destination, follow_last=not absent)
        if view.unhashed(resolution.final):
            view.hash_everything()
            resolution = view.resolve(overlay.destination, follow_last=not absent)
    except LinkLoop as exc:
        here = Found(overlay.destination.strip("/"), None, None)
        loop = Resolution(here.path, here.path, here, (), (), ())
        return OverlayCheck(
            step, overlay.destination, expected, "symlink-loop", "blocked", loop, (exc.message,)
        )
    notes = [f"/{where} is a symbolic link to {target}" for where, target in resolution.links]
    if resolution.blocked is not None:
        blocked = resolution.blocked
        found = f"{blocked.describe()} at /{blocked.path}"
        notes.append(
            f"/{blocked.path} is not a folder in the base (found {blocked.describe()}), so "
            f"nothing can be written below it"
        )
        return OverlayCheck(
            step, overlay.destination, expected, found, "blocked", resolution, tuple(notes)
        )
    final = resolution.final
    refused = runtime_mounted("/" + resolution.path) if resolution.links else None
    if refused is not None:
        # The plan's path passed this rule; the base's links carry it where it does not.
        notes.append(f"/{resolution.path} {refused[0]}; {refused[1]}")
        return OverlayCheck(
            step,
            overlay.destination,
            expected,
            f"/{resolution.path}, which {refused[0].split(':')[0]}",
            "blocked",
            resolution,
            tuple(notes),
        )
    if absent:
        if final.exists:
            kind = final.describe()
            found = "present" if kind.startswith("sha256:") else f"present ({kind})"
            return OverlayCheck(
                step, overlay.destination, expected, found, "drift", resolution, tuple(notes)
            )
        return OverlayCheck(
            step, overlay.destination, expected, "absent", "ok", resolution, tuple(notes)
        )
    found = final.describe()
    if final.entry is not None and final.entry.kind == "hardlink":
        notes.append(
            f"/{final.path} is a hard link to /{final.entry.link}; the overlay replaces "
            f"/{final.path} only, /{final.entry.link} keeps its content"
        )
    verdict = "ok" if found == expected else "drift"
    return OverlayCheck(
        step, overlay.destination, expected, found, verdict, resolution, tuple(notes)
    )


def guard_overlays(
    client: RegistryClient,
    image: ResolvedImage,
    steps: Sequence[Step],
    store: IndexStore,
    *,
    log: Callable[[str], None] | None = None,
) -> tuple[tuple[OverlayCheck, ...], tuple[LayerUse, ...]]:
    """Every overlay of ``steps`` checked against ``image``; and how each layer was used.

    The one guard both callers use: the registry builder before it writes a layer, and a
    base bump (imagekit.builders.bump) before it proposes a new digest.
    """
    with BaseView(client, image, store, log=log) as view:
        view.wanted = frozenset(
            step.destination.strip("/") for step in steps if isinstance(step, Overlay)
        )
        checks = tuple(
            check_overlay(view, i, step)
            for i, step in enumerate(steps)
            if isinstance(step, Overlay)
        )
        return checks, tuple(view.uses)
