"""An offline OSV database for PyPI: the export OSV publishes, read strictly, matched locally.

Air-gapped clusters cannot reach a vulnerability service, but they can carry OSV's export for
one ecosystem: the ``all.zip`` OSV publishes per ecosystem (one ``<ID>.json`` record each), or
a folder of those JSON files. :func:`load_database` validates every record against the OSV
schema (its optional fields included; an unknown key anywhere is refused) before anything is
matched, so a file that is not an OSV record stops the load with the file's name
(:class:`~imagekit.errors.VulnDatabaseError`, exit 2) and nothing half-read can become a
``clean``.

The schema is written as TypedDicts that pydantic validates with ``extra="forbid"``: over an
export of 20,000 records that is half the cost of building model instances (measured by
bench/osv.py), and large exports are validated by one forked process per core. Only the
records of the distributions actually looked up are kept parsed; the others were validated
and are held as bytes.

:class:`OfflineOsvService` is pip-audit's ``VulnerabilityService`` over that database, so the
scan hands pip-audit's own dependency and result types around and writes pip-audit's JSON
format. Matching follows the OSV schema's evaluation algorithm:

- names normalised as PEP 503 says, only ``PyPI`` packages considered;
- versions compared as PEP 440 versions (``packaging``); an installed local version
  (``2.13.0+cu128``) is matched as its public release (``2.13.0``), since a local build
  carries the vulnerabilities of the release it was built from;
- ``affected[].versions`` lists and ``ECOSYSTEM`` ranges (``introduced``, ``fixed``,
  ``last_affected``, ``limit``) both honoured; ``SEMVER`` ranges are read with the same PEP
  440 order; ``GIT`` ranges name commits and are left to the versions list, which OSV requires
  beside them (an entry whose GIT range comes without that list cannot be evaluated);
- withdrawn records skipped;
- records whose ids and aliases overlap (PYSEC, GHSA and CVE names of one flaw) merged
  transitively into one result, so one vulnerability is reported once.

A record that names the distribution but whose range cannot be evaluated (a version string
that is not PEP 440, a GIT range with no versions list) makes that distribution skipped, with
the record named: it was not matched, so it cannot count as clean.

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
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from multiprocessing import get_all_start_methods, get_context
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired, Required

from isal import isal_zlib
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pip_audit._service.interface import (
    Dependency,
    ResolvedDependency,
    SkippedDependency,
    VulnerabilityID,
    VulnerabilityResult,
    VulnerabilityService,
)
from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    with_config,
)
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from imagekit import jsondoc
from imagekit.errors import VulnDatabaseError

ECOSYSTEM = "PyPI"
#: A record larger than this is not one OSV would publish (the largest PyPI ones are ~1 MB).
MAX_RECORD_BYTES = 16 << 20
#: Below this many records, forking validators costs more than it saves.
PARALLEL_FROM = 2000
_HINT = "give OSV's export for PyPI (its all.zip) or a folder of its JSON records"

# RFC 3339 in UTC ending in "Z", as the OSV schema's `timestamp` definition requires.
Timestamp = Annotated[
    str,
    StringConstraints(
        pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z$"
    ),
]
SeverityType = Literal["CVSS_V2", "CVSS_V3", "CVSS_V4", "Ubuntu"]
ReferenceType = Literal[
    "ADVISORY", "ARTICLE", "DETECTION", "DISCUSSION", "REPORT", "FIX", "INTRODUCED", "GIT",
    "PACKAGE", "EVIDENCE", "WEB",
]  # fmt: skip
CreditType = Literal[
    "FINDER", "REPORTER", "ANALYST", "COORDINATOR", "REMEDIATION_DEVELOPER",
    "REMEDIATION_REVIEWER", "REMEDIATION_VERIFIER", "TOOL", "SPONSOR", "OTHER",
]  # fmt: skip
_strict = with_config(ConfigDict(extra="forbid"))


@_strict
class OsvSeverity(TypedDict):
    type: SeverityType
    score: str


@_strict
class OsvPackage(TypedDict):
    ecosystem: str
    name: str
    purl: NotRequired[str]


@_strict
class OsvEvent(TypedDict, total=False):
    """One point of a range's timeline: exactly one of the four keys."""

    introduced: str
    fixed: str
    last_affected: str
    limit: str


def _one_kind(event: OsvEvent) -> OsvEvent:
    if len(event) != 1:
        raise ValueError("an event has exactly one of introduced, fixed, last_affected, limit")
    return event


@_strict
class OsvRange(TypedDict):
    type: Literal["GIT", "SEMVER", "ECOSYSTEM"]
    repo: NotRequired[str]
    events: Annotated[list[Annotated[OsvEvent, AfterValidator(_one_kind)]], Field(min_length=1)]
    database_specific: NotRequired[dict[str, Any]]


def _timeline(rng: OsvRange) -> OsvRange:
    events = rng["events"]
    if not any("introduced" in e for e in events):
        raise ValueError("a range's events must contain an introduced event")
    if any("fixed" in e for e in events) and any("last_affected" in e for e in events):
        raise ValueError("a range has fixed or last_affected events, not both")
    if rng["type"] == "GIT" and not rng.get("repo"):
        raise ValueError("a GIT range needs its repo")
    return rng


@_strict
class OsvAffected(TypedDict, total=False):
    package: OsvPackage
    severity: list[OsvSeverity] | None
    ranges: list[Annotated[OsvRange, AfterValidator(_timeline)]]
    versions: list[str]
    ecosystem_specific: dict[str, Any]
    database_specific: dict[str, Any]


@_strict
class OsvReference(TypedDict):
    type: ReferenceType
    url: str


@_strict
class OsvCredit(TypedDict):
    name: str
    contact: NotRequired[list[str]]
    type: NotRequired[CreditType]


@_strict
class OsvRelated(TypedDict):
    """An early schema's object form of ``related`` (type and id); later ones use strings."""

    type: str
    id: str


@_strict
class OsvRecord(TypedDict, total=False):
    """One OSV record; ``id`` and ``modified`` are required, the rest optional, unknown keys
    refused (the schema's top level has ``additionalProperties: false``)."""

    schema_version: str
    id: Required[Annotated[str, StringConstraints(min_length=1, pattern=r"^\S+$")]]
    modified: Required[Timestamp]
    published: Timestamp
    withdrawn: Timestamp
    aliases: list[str] | None
    related: list[str | OsvRelated] | None
    upstream: list[str] | None
    summary: str
    details: str
    severity: list[OsvSeverity] | None
    affected: list[OsvAffected] | None
    references: list[OsvReference] | None
    credits: list[OsvCredit] | None
    database_specific: dict[str, Any]


def _schema_one(record: OsvRecord) -> OsvRecord:
    version = record.get("schema_version")
    if version is not None and not version.startswith("1."):
        raise ValueError(f"schema_version {version} is not OSV 1.x")
    return record


_RECORD: TypeAdapter[OsvRecord] = TypeAdapter(Annotated[OsvRecord, AfterValidator(_schema_one)])


def _timestamp(value: str) -> datetime:
    return datetime.fromisoformat(value).astimezone(UTC)


_OSV_ONLY = "the export must hold OSV records only (https://ossf.github.io/osv-schema/)"


def parse_record(where: str, data: bytes) -> OsvRecord:
    """One record's bytes as an OsvRecord, or VulnDatabaseError naming ``where``."""
    try:
        return _RECORD.validate_python(jsondoc.loads(data, limit=MAX_RECORD_BYTES))
    except jsondoc.JsonRefused as exc:
        raise VulnDatabaseError(
            f"{where}: not an OSV record: {exc}", path=where, hint=_OSV_ONLY
        ) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first["loc"]) or "(top level)"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise VulnDatabaseError(
            f"{where}: not an OSV record: {at}: {first['msg']}{more}",
            path=where,
            hint=_OSV_ONLY,
        ) from exc


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
        newest_modified=_timestamp(max(s.modified for s in summaries)),
        ignored_files=tuple(ignored),
        validated_by=workers,
        _members=members,
        _index={name: tuple(positions) for name, positions in index.items()},
    )


class Unevaluable(Exception):
    """A record names the distribution but its range cannot be compared with PEP 440."""


def _event_version(value: str, record: OsvRecord) -> Version:
    try:
        return Version(value)
    except InvalidVersion as exc:
        raise Unevaluable(
            f"{record['id']} has a range event {value!r} that is not PEP 440"
        ) from exc


def _in_range(version: Version, rng: OsvRange, record: OsvRecord) -> bool:
    """The OSV schema's IncludedInRanges for one range (its BeforeLimits included)."""
    limits = [e["limit"] for e in rng["events"] if "limit" in e]
    if limits and not any(
        "*" in limit or version < _event_version(limit, record) for limit in limits
    ):
        return False
    timeline: list[tuple[Version | None, str]] = []
    for event in rng["events"]:
        ((kind, value),) = event.items()  # exactly one key: checked at load
        if kind == "limit":
            continue
        at = None if kind == "introduced" and value == "0" else _event_version(str(value), record)
        timeline.append((at, kind))
    # "0" sorts before any version; then the events in version order, as the schema says.
    timeline.sort(key=lambda item: (item[0] is not None, item[0] or Version("0")))
    vulnerable = False
    for at, kind in timeline:
        if kind == "introduced" and (at is None or version >= at):
            vulnerable = True
        elif kind == "fixed" and at is not None and version >= at:
            vulnerable = False
        elif kind == "last_affected" and at is not None and version > at:
            vulnerable = False
    return vulnerable


def _in_versions(version: Version, raw: str, listed: Sequence[str]) -> bool:
    for entry in listed:
        if entry == raw:
            return True
        try:
            if Version(entry) == version:
                return True
        except InvalidVersion:
            continue  # a legacy version string names some other release
    return False


@dataclass(frozen=True)
class Match:
    """A record that affects an installed version, and the fixes its ranges name above it."""

    record: OsvRecord
    by: Literal["range", "versions"]
    fix_versions: tuple[Version, ...]


def match(record: OsvRecord, affected: OsvAffected, version: Version, raw: str) -> Match | None:
    """Does this affected entry cover the installed version (its public part)?"""
    public = Version(version.public)
    fixes: set[Version] = set()
    hit_range = False
    for rng in affected.get("ranges", []):
        if rng["type"] == "GIT":
            continue
        if _in_range(public, rng, record):
            hit_range = True
            fixes.update(
                v
                for e in rng["events"]
                if "fixed" in e and (v := _event_version(e["fixed"], record)) > public
            )
    if hit_range:
        return Match(record, "range", tuple(sorted(fixes)))
    listed = affected.get("versions", [])
    if _in_versions(public, raw, listed):
        return Match(record, "versions", ())
    if not listed and any(rng["type"] == "GIT" for rng in affected.get("ranges", [])):
        # A GIT range names commits, not releases: without the versions list OSV puts beside
        # it there is no telling whether this release lies inside, so it is not a "no".
        raise Unevaluable(
            f"{record['id']} has only a GIT range (commits, no versions list) for "
            f"{affected['package']['name']}, which cannot be compared with a release"
        )
    return None


def _names(record: OsvRecord) -> tuple[str, ...]:
    return (record["id"], *(record.get("aliases") or []))


def _merge(matches: list[Match]) -> list[list[Match]]:
    """Group matches whose {id, *aliases} sets overlap, transitively (union-find)."""
    parent = list(range(len(matches)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, m in enumerate(matches):
        for name in _names(m.record):
            if name in owner:
                parent[root(i)] = root(owner[name])
            else:
                owner[name] = i
    groups: dict[int, list[Match]] = {}
    for i, m in enumerate(matches):
        groups.setdefault(root(i), []).append(m)
    return list(groups.values())


def _result(group: list[Match]) -> VulnerabilityResult:
    group = sorted(group, key=lambda m: m.record["id"])
    ids = sorted({name for m in group for name in _names(m.record)})
    first = group[0].record
    description = (first.get("summary") or first.get("details") or "N/A").replace("\n", " ")
    published = [p for m in group if (p := m.record.get("published"))]
    # pip-audit's own choice of the primary id: PYSEC first, then CVE, then the rest.
    return VulnerabilityResult.create(
        ids=[VulnerabilityID(i) for i in ids],
        description=description,
        fix_versions=sorted({v for m in group for v in m.fix_versions}),
        published=_timestamp(min(published)).replace(tzinfo=None) if published else None,
    )


class OfflineOsvService(VulnerabilityService):
    """pip-audit's service interface over a loaded export; it never opens a connection."""

    def __init__(self, database: OsvDatabase) -> None:
        self.database = database

    def query(self, spec: Dependency) -> tuple[Dependency, list[VulnerabilityResult]]:
        if not isinstance(spec, ResolvedDependency):
            return spec, []
        raw = str(spec.version)
        matches: list[Match] = []
        for record, affected in self.database.entries(spec.canonical_name):
            try:
                found = match(record, affected, spec.version, raw)
            except Unevaluable as exc:
                return SkippedDependency(
                    name=spec.name, skip_reason=f"{raw} could not be matched: {exc}"
                ), []
            if found is not None:
                matches.append(found)
        return spec, [_result(group) for group in _merge(matches)]
