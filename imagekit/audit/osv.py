"""An offline OSV database for PyPI: the export OSV publishes, read strictly, matched locally.

Air-gapped clusters cannot reach a vulnerability service, but they can carry OSV's export for
one ecosystem: the ``all.zip`` OSV publishes per ecosystem (one ``<ID>.json`` record each), or
a folder of those JSON files. :func:`load_database` validates every record against the OSV
schema (its optional fields included; an unknown key anywhere is refused) before anything is
matched, so a file that is not an OSV record stops the load with the file's name
(:class:`~imagekit.errors.VulnDatabaseError`, exit 2) and nothing half-read can become a
``clean``.

The schema, as types pydantic validates, is imagekit.audit.osv_schema; matching an installed
version against the records, and pip-audit's service over them, imagekit.audit.osv_match.
Large exports are validated by one forked process per core. Only the records of the
distributions actually looked up are kept parsed; the others were validated and are held as
bytes.

The database's age is taken from the newest ``modified`` timestamp among its records. The
export carries no timestamp of its own (OSV's bucket listing has one, the downloaded zip
does not), and the export cannot be older than the newest record in it, so this age is an
upper bound: a database can look older than it is, never younger.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import zipfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from multiprocessing import get_all_start_methods, get_context
from pathlib import Path
from typing import Any, Literal

from isal import isal_zlib
from packaging.utils import canonicalize_name

from imagekit.audit.osv_schema import (
    MAX_RECORD_BYTES,
    OsvAffected,
    OsvRecord,
    parse_record,
    parse_timestamp,
)
from imagekit.errors import VulnDatabaseError

ECOSYSTEM = "PyPI"
#: Below this many records, forking validators costs more than it saves.
PARALLEL_FROM = 2000
_HINT = "give OSV's export for PyPI (its all.zip) or a folder of its JSON records"


class _Members:
    """The record files of an export, by position: their names and, on demand, their bytes."""

    def __init__(self, names: list[str], read: Callable[[int], bytes]) -> None:
        self.names = names
        self.read = read


def _zip_members(path: Path, data: bytes) -> _Members:
    """The zip's members, inflated on demand with ISA-L (zipfile's reader costs twice as much
    per small member) and checked against their CRC-32."""
    import io

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = [i for i in archive.infolist() if not i.is_dir()]
    except (zipfile.BadZipFile, ValueError) as exc:
        raise VulnDatabaseError(
            f"{path}: not a zip file ({exc})", path=str(path), hint=_HINT
        ) from exc
    for info in infos:
        where = f"{path}!{info.filename}"
        if not info.filename.endswith(".json"):
            raise VulnDatabaseError(
                f"{where}: not an OSV record (an OSV export holds only <ID>.json files)",
                path=where,
                hint="give OSV's export for PyPI (its all.zip) unchanged",
            )
        if info.file_size > MAX_RECORD_BYTES:
            raise VulnDatabaseError(
                f"{where}: {info.file_size} bytes, larger than any OSV record", path=where
            )
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise VulnDatabaseError(
                f"{where}: compressed with method {info.compress_type}, not deflate",
                path=where,
                hint="give OSV's export for PyPI (its all.zip) unchanged",
            )

    def read(i: int) -> bytes:
        info = infos[i]
        where = f"{path}!{info.filename}"
        local = info.header_offset
        header = data[local : local + 30]
        if len(header) < 30 or header[:4] != b"PK\x03\x04":
            raise VulnDatabaseError(f"{where}: its local header is missing", path=where)
        start = local + 30 + int.from_bytes(header[26:28], "little")
        start += int.from_bytes(header[28:30], "little")
        raw = data[start : start + info.compress_size]
        try:
            body = (
                raw
                if info.compress_type == zipfile.ZIP_STORED
                else isal_zlib.decompress(raw, -15, info.file_size or 1)
            )
        except isal_zlib.error as exc:  # type: ignore[misc]
            raise VulnDatabaseError(f"{where}: does not inflate ({exc})", path=where) from exc
        if len(body) != info.file_size or isal_zlib.crc32(body) != info.CRC:
            raise VulnDatabaseError(f"{where}: its CRC-32 or size does not match", path=where)
        return body

    return _Members([f"{path}!{i.filename}" for i in infos], read)


def _folder_members(path: Path) -> tuple[_Members, str, list[str]]:
    """The folder's JSON files (recursively), its listing digest, and what was not JSON."""
    blobs: list[bytes] = []
    names: list[str] = []
    ignored: list[str] = []
    listing: list[str] = []
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        relative = file.relative_to(path).as_posix()
        if not relative.endswith(".json"):
            ignored.append(relative)
            continue
        if file.stat().st_size > MAX_RECORD_BYTES:
            raise VulnDatabaseError(
                f"{file}: {file.stat().st_size} bytes, larger than any OSV record", path=str(file)
            )
        data = file.read_bytes()  # kept: what is matched later is what was hashed now
        listing.append(f"{hashlib.sha256(data).hexdigest()}  {relative}\n")
        names.append(str(file))
        blobs.append(data)
    digest = "sha256:" + hashlib.sha256("".join(listing).encode("utf-8")).hexdigest()
    return _Members(names, blobs.__getitem__), digest, ignored


@dataclass(frozen=True)
class _Summary:
    """What the index needs from a validated record."""

    id: str
    modified: str
    withdrawn: bool
    pypi_names: tuple[str, ...]


def _pypi(record: OsvRecord) -> list[OsvAffected]:
    return [
        a
        for a in record.get("affected") or []
        if "package" in a and a["package"]["ecosystem"] == ECOSYSTEM
    ]


#: The first bad record of a slice, as plain values (they cross a process boundary):
#: (message, path, hint).
_Refusal = tuple[str, str, str | None]


def _summarise(members: _Members, start: int, stop: int) -> list[_Summary] | _Refusal:
    out: list[_Summary] = []
    for i in range(start, stop):
        try:
            record = parse_record(members.names[i], members.read(i))
        except VulnDatabaseError as exc:
            return (exc.message, exc.path, exc.hint)
        out.append(
            _Summary(
                record["id"],
                record["modified"],
                "withdrawn" in record,
                tuple(
                    dict.fromkeys(canonicalize_name(a["package"]["name"]) for a in _pypi(record))
                ),
            )
        )
    return out


_FORKED: _Members | None = None  # the members a forked validator reads (inherited, not sent)


def _summarise_forked(bounds: tuple[int, int]) -> list[_Summary] | _Refusal:
    assert _FORKED is not None  # noqa: S101 - set before the fork
    return _summarise(_FORKED, *bounds)


def _validate_all(members: _Members) -> tuple[list[_Summary], int]:
    """Every record validated, in order; the first bad one raised. Forked processes (one a
    core) share the work when the export is large and this process has no other thread,
    the only case where forking is safe."""
    global _FORKED
    count = len(members.names)
    workers = min(os.cpu_count() or 1, 8)
    parallel = (
        count >= PARALLEL_FROM
        and workers > 1
        and threading.active_count() == 1
        and "fork" in get_all_start_methods()
    )
    parts: list[list[_Summary] | _Refusal] | None = None
    if parallel:
        step = -(-count // workers)
        bounds = [(s, min(s + step, count)) for s in range(0, count, step)]
        _FORKED = members
        try:
            with ProcessPoolExecutor(len(bounds), mp_context=get_context("fork")) as pool:
                parts = list(pool.map(_summarise_forked, bounds))
        except BrokenProcessPool:
            parts = None  # a validator died (killed, out of memory): do it all here instead
        finally:
            _FORKED = None
    if parts is None:
        parts, workers = [_summarise(members, 0, count)], 1
    summaries: list[_Summary] = []
    for part in parts:
        if isinstance(part, tuple):
            message, path, hint = part
            raise VulnDatabaseError(message, path=path, hint=hint)
        summaries.extend(part)
    return summaries, workers


@dataclass(frozen=True)
class OsvDatabase:
    """A loaded export: every record validated, PyPI entries indexed by PEP 503 name."""

    source: Path
    kind: Literal["zip", "folder"]
    digest: str  # sha256 of the zip's bytes, or of the folder's canonical listing
    records: int
    withdrawn: int
    newest_modified: datetime
    ignored_files: tuple[str, ...]
    validated_by: int  # processes
    _members: _Members = field(repr=False)
    _index: dict[str, tuple[int, ...]] = field(repr=False)  # name -> record positions
    _parsed: dict[int, OsvRecord] = field(default_factory=dict, repr=False)

    @property
    def packages(self) -> int:
        return len(self._index)

    def entries(self, name: str) -> list[tuple[OsvRecord, OsvAffected]]:
        """The (record, affected entry) pairs naming this PEP 503 name; withdrawn left out."""
        pairs: list[tuple[OsvRecord, OsvAffected]] = []
        for i in self._index.get(name, ()):
            if i not in self._parsed:  # validated at load; parsed again only when needed
                self._parsed[i] = parse_record(self._members.names[i], self._members.read(i))
            record = self._parsed[i]
            pairs += [
                (record, a)
                for a in _pypi(record)
                if canonicalize_name(a["package"]["name"]) == name
            ]
        return pairs

    def age(self, now: datetime) -> timedelta:
        return now - self.newest_modified

    def describe(self, now: datetime) -> str:
        """'database of 2026-11-30, 3 days old' (the age from its newest record)."""
        days = self.age(now).days
        when = self.newest_modified.date().isoformat()
        if days < 0:
            return f"database of {when}, dated in the future"
        return f"database of {when}, {days} day{'s' if days != 1 else ''} old"

    def to_json(self, now: datetime) -> dict[str, Any]:
        return {
            "name": self.source.name,
            "kind": self.kind,
            "digest": self.digest,
            "records": self.records,
            "withdrawn": self.withdrawn,
            "pypi_packages": self.packages,
            "newest_modified": self.newest_modified.isoformat().replace("+00:00", "Z"),
            "age_days": round(self.age(now).total_seconds() / 86400, 2),
            "age_source": "the newest modified timestamp among the records",
            "described": self.describe(now),
            "ignored_files": list(self.ignored_files),
            "validated_by_processes": self.validated_by,
        }


_NOT_FILES = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def _is_file_or_folder(path: Path) -> None:
    """Refuse, naming it, what is there but is neither a file nor a folder: a FIFO would
    block the read, a device would be read forever, and "no such file" would be untrue."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # absent (or unreadable): said below, as before
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        what = _NOT_FILES.get(stat.S_IFMT(mode), "neither a file nor a folder")
        raise VulnDatabaseError(
            f"{path}: {what}, not a file or folder",
            path=str(path),
            hint="--vuln-db (or IMAGEKIT_VULN_DB) names OSV's all.zip for PyPI or a folder of it",
        )


def load_database(path: Path) -> OsvDatabase:
    """Validate every record of an OSV export and index it, or refuse it naming the file."""
    ignored: list[str] = []
    _is_file_or_folder(path)
    if path.is_dir():
        members, digest, ignored = _folder_members(path)
        kind: Literal["zip", "folder"] = "folder"
    elif path.is_file():
        data = path.read_bytes()  # kept: what is matched later is what was hashed now
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        members, kind = _zip_members(path, data), "zip"
    else:
        raise VulnDatabaseError(
            f"{path}: no such file or folder",
            path=str(path),
            hint="--vuln-db (or IMAGEKIT_VULN_DB) names OSV's all.zip for PyPI or a folder of it",
        )
    summaries, workers = _validate_all(members)
    if not summaries:
        raise VulnDatabaseError(f"{path}: holds no OSV records", path=str(path), hint=_HINT)
    seen: dict[str, int] = {}
    index: dict[str, list[int]] = {}
    for i, summary in enumerate(summaries):
        if summary.id in seen:
            raise VulnDatabaseError(
                f"{members.names[i]}: record {summary.id} is also in "
                f"{members.names[seen[summary.id]]}",
                path=members.names[i],
                hint="an OSV export holds each record once; rebuild the folder from one export",
            )
        seen[summary.id] = i
        if not summary.withdrawn:  # OSV: a withdrawn entry is no longer a vulnerability
            for name in summary.pypi_names:
                index.setdefault(name, []).append(i)
    if not any(s.pypi_names for s in summaries):
        raise VulnDatabaseError(
            f"{path}: {len(summaries)} OSV records, none for a PyPI package",
            path=str(path),
            hint="this is another ecosystem's export; give OSV's export for PyPI",
        )
    return OsvDatabase(
        source=path,
        kind=kind,
        digest=digest,
        records=len(summaries),
        withdrawn=sum(s.withdrawn for s in summaries),
        # Timestamps of the schema's one format compare as strings; only the newest is parsed.
        newest_modified=parse_timestamp(max(s.modified for s in summaries)),
        ignored_files=tuple(ignored),
        validated_by=workers,
        _members=members,
        _index={name: tuple(positions) for name, positions in index.items()},
    )
