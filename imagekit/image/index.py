"""What each base layer holds, cached by the layer's compressed digest: read a layer once, ever.

The overlay guard asks "what is at this path in the base?". Answering from the layers
themselves means streaming gigabytes; answering from an index of each layer (every member's
path, type, mode, owner, size, sha256, link target and mtime, plus the layer's whiteouts and
opaque folders) means a few lookups. A layer's index is a function of its bytes, so it is
kept under the layer's compressed digest and can never go stale: a second build, or a nightly
rebuild on the same base, reads no layer at all.

Hashing is most of what reading a layer costs: the blob's digest, the diffID, and each file's
content are three sha256 passes over the same bytes. The first two prove the layer is the
one the image names and are never skipped; the third is only asked of the few files an
overlay replaces. So an index hashes every file up to :data:`HASHED_UP_TO` bytes (most of an
image's files, few of its bytes) and the paths the caller names; a larger file's sha256 is
left out (NULL) and the index is marked incomplete. A caller that meets such a file where it
needs the content asks for the layer again with ``complete=True``, which reads it once more,
hashing every file, and replaces the index.

One SQLite file a layer, ``<cache>/layer-index/v1/sha256/<hex>.sqlite`` (``<cache>`` is
``$IMAGEKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/imagekit``, else ``~/.cache/imagekit``):
a lookup reads a few pages, never the whole index, so memory stays flat whatever the number
of files. An index is written under a temporary name and renamed into place only after the
whole layer was read and both its compressed digest and its diffID matched what the image
names; a lock file per layer keeps two processes from reading the same layer at once. A file
that cannot be opened, or whose recorded digests differ, is treated as absent and rebuilt.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from imagekit.errors import LayerFormatError
from imagekit.image.interface import Layer
from imagekit.image.members import FileEntry, Member, Tap
from imagekit.refs import Digest

INDEX_VERSION = 2
#: Files up to this size are hashed whenever a layer is indexed; larger ones only when asked.
HASHED_UP_TO = 1 << 20
_BATCH = 2000
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE entries (
    path TEXT PRIMARY KEY, kind TEXT NOT NULL, mode INTEGER NOT NULL, uid INTEGER NOT NULL,
    gid INTEGER NOT NULL, size INTEGER NOT NULL, sha256 TEXT, link TEXT, mtime INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE whiteouts (path TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE opaques (path TEXT PRIMARY KEY) WITHOUT ROWID;
"""


def cache_root() -> Path:
    """The user's cache folder for imagekit (shared with the rest of imagekit's caches)."""
    if os.environ.get("IMAGEKIT_CACHE_DIR"):
        return Path(os.environ["IMAGEKIT_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "imagekit"


@dataclass(frozen=True)
class LayerIndex:
    """The index of one layer, opened read-only."""

    digest: Digest
    diff_id: Digest
    entries: int
    complete: bool  # every file's sha256 is in it (else files over HASHED_UP_TO may lack one)
    path: Path
    _db: sqlite3.Connection

    def entry(self, path: str) -> FileEntry | None:
        row = self._db.execute(
            "SELECT path, kind, mode, uid, gid, size, sha256, link, mtime FROM entries "
            "WHERE path = ?",
            (path,),
        ).fetchone()
        return FileEntry(*row) if row else None

    def whiteout(self, path: str) -> bool:
        return self._exists("whiteouts", path)

    def opaque(self, path: str) -> bool:
        return self._exists("opaques", path)

    def holds_under(self, folder: str) -> bool:
        """True when the layer has anything below ``folder``: the folder exists in this
        layer even where the tar has no entry of its own for it."""
        low, high = (f"{folder}/", f"{folder}0") if folder else ("", "\U0010ffff")
        return any(
            self._db.execute(
                f"SELECT 1 FROM {table} WHERE path > ? AND path < ? LIMIT 1",  # noqa: S608 - fixed names
                (low, high),
            ).fetchone()
            for table in ("entries", "whiteouts", "opaques")
        )

    def _exists(self, table: str, path: str) -> bool:
        query = f"SELECT 1 FROM {table} WHERE path = ?"  # noqa: S608 - a fixed table name
        return self._db.execute(query, (path,)).fetchone() is not None

    def close(self) -> None:
        self._db.close()


@dataclass(frozen=True)
class ReadStats:
    """What reading one layer cost."""

    digest: Digest
    compressed_bytes: int
    uncompressed_bytes: int
    entries: int
    seconds: float


def _open(path: Path, digest: Digest, diff_id: Digest) -> LayerIndex | None:
    if not path.is_file():
        return None
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, check_same_thread=False)
        db.execute("PRAGMA cache_size=-256")  # KiB: lookups touch a few pages, no more
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.Error:
        return None
    if (meta.get("version"), meta.get("digest"), meta.get("diff_id")) != (
        str(INDEX_VERSION),
        str(digest),
        str(diff_id),
    ):
        db.close()
        return None
    complete = meta.get("complete") == "1"
    return LayerIndex(digest, diff_id, int(meta.get("entries", "0")), complete, path, db)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _rows(members: Iterable[Member]) -> Iterator[tuple[str, tuple[object, ...]]]:
    for member in members:
        if member.kind == "whiteout":
            yield "whiteouts", (member.path,)
        elif member.kind == "opaque":
            yield "opaques", (member.path,)
        else:
            yield "entries", member.fields()


class _Hashed:
    """Which files an index hashes; ``complete`` once every file it met was hashed."""

    def __init__(self, wanted: frozenset[str], everything: bool) -> None:
        self._wanted, self._everything = wanted, everything
        self.complete = True

    def __call__(self, path: str, size: int) -> bool:
        if self._everything or size <= HASHED_UP_TO or path in self._wanted:
            return True
        self.complete = False
        return False


class IndexStore:
    """The per-layer indexes under one cache folder; reads a layer only when asked to."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or cache_root()) / "layer-index" / f"v{INDEX_VERSION}"

    def _path(self, digest: Digest) -> Path:
        return self.root / digest.algorithm / f"{digest.hex}.sqlite"

    def cached(
        self, digest: Digest, diff_id: Digest, *, complete: bool = False
    ) -> LayerIndex | None:
        """The index of this layer if one was made before (by any build, any image); with
        ``complete``, only one that has every file's sha256."""
        index = _open(self._path(digest), digest, diff_id)
        if index is not None and complete and not index.complete:
            index.close()
            return None
        return index

    def build(
        self,
        layer: Layer,
        *,
        wanted: frozenset[str] = frozenset(),
        complete: bool = False,
        tap: Tap | None = None,
    ) -> tuple[LayerIndex, ReadStats | None]:
        """Stream the layer once, from wherever its image is kept (unless its index is there
        by then), and index it; (index, what it cost).

        Files up to HASHED_UP_TO bytes and the paths in ``wanted`` are hashed; with
        ``complete``, every file; ``tap`` reads what it asks for in the same pass (see
        imagekit.image.members.iter_members). When another process indexed it meanwhile
        (completely enough), its index is used (and no stats; nothing was tapped).
        Raises DigestMismatch when the layer's bytes are not what the image names
        (compressed digest or diffID), LayerFormatError when they do not decompress.
        """
        desc, diff_id = layer.desc, layer.diff_id
        target = self._path(desc.digest)
        with _locked(target.with_suffix(".lock")):
            ready = self.cached(desc.digest, diff_id, complete=complete)
            if ready is not None:
                return ready, None
            started = time.monotonic()
            partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
            partial.unlink(missing_ok=True)
            try:
                hashed = _Hashed(wanted, complete)
                stats = self._write(layer, partial, hashed, tap)
                os.replace(partial, target)
            finally:
                partial.unlink(missing_ok=True)
        index = _open(target, desc.digest, diff_id)
        if index is None:  # pragma: no cover - written and checked just above
            raise LayerFormatError(f"the index of {desc.digest} could not be read back")
        return index, ReadStats(
            desc.digest,
            stats[0],
            stats[1],
            index.entries,
            round(time.monotonic() - started, 3),
        )

    def _write(
        self, layer: Layer, partial: Path, hashed: _Hashed, tap: Tap | None
    ) -> tuple[int, int]:
        db = sqlite3.connect(partial)
        try:
            db.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;" + _SCHEMA)
            pending: dict[str, list[tuple[object, ...]]] = {
                "entries": [],
                "whiteouts": [],
                "opaques": [],
            }
            count = 0

            def flush() -> None:
                for table, rows in pending.items():
                    if not rows:
                        continue
                    marks = ", ".join("?" * len(rows[0]))
                    db.executemany(
                        f"INSERT OR REPLACE INTO {table} VALUES ({marks})",  # noqa: S608
                        rows,
                    )
                    rows.clear()

            with contextlib.closing(layer.members(hash_content=hashed, tap=tap)) as members:
                for table, row in _rows(members):
                    pending[table].append(row)
                    count += table == "entries"
                    if len(pending[table]) >= _BATCH:
                        flush()
            flush()
            result = layer.result()
            meta: Sequence[tuple[str, str]] = (
                ("version", str(INDEX_VERSION)),
                ("digest", str(layer.desc.digest)),
                ("diff_id", str(layer.diff_id)),
                ("media_type", layer.desc.media_type),
                ("entries", str(count)),
                ("complete", "1" if hashed.complete else "0"),
                ("compressed_bytes", str(result.compressed_bytes)),
                ("uncompressed_bytes", str(result.uncompressed_bytes)),
            )
            db.executemany("INSERT INTO meta VALUES (?, ?)", meta)
            db.commit()
            return result.compressed_bytes, result.uncompressed_bytes
        finally:
            db.close()
