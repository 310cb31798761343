"""An offline OSV database for PyPI: the export OSV publishes, read strictly, matched locally.

Air-gapped clusters cannot reach a vulnerability service, but they can carry OSV's export for
one ecosystem: the ``all.zip`` OSV publishes per ecosystem (one ``<ID>.json`` record each), or
a folder of those JSON files. :func:`load_database` reads every record through strict models
(the OSV schema's fields, optional ones included; an unknown key anywhere is refused) before
anything is matched, so a file that is not an OSV record stops the load with the file's name
(:class:`~imagekit.errors.VulnDatabaseError`, exit 2) and nothing half-read can become a
``clean``.

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
  beside them;
- withdrawn records skipped;
- records whose ids and aliases overlap (PYSEC, GHSA and CVE names of one flaw) merged
  transitively into one result, so one vulnerability is reported once.

A record that matches a distribution's name but whose range cannot be evaluated (a version
string that is not PEP 440) makes that distribution skipped, with the record named: it was
not matched, so it cannot count as clean.

The database's age is taken from the newest ``modified`` timestamp among its records. The
export carries no timestamp of its own (OSV's bucket listing has one, the downloaded zip
does not), and the export cannot be older than the newest record in it, so this age is an
upper bound: a database can look older than it is, never younger.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

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
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from pydantic import model_validator as _model_validator

from imagekit.errors import VulnDatabaseError

ECOSYSTEM = "PyPI"
#: A record larger than this is not one OSV would publish (the largest PyPI ones are ~1 MB).
MAX_RECORD_BYTES = 16 << 20

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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OsvSeverity(_Strict):
    type: SeverityType
    score: str


class OsvPackage(_Strict):
    ecosystem: str
    name: str
    purl: str | None = None


class OsvEvent(_Strict):
    """One point of a range's timeline: exactly one of the four keys."""

    introduced: str | None = None
    fixed: str | None = None
    last_affected: str | None = None
    limit: str | None = None

    @_model_validator(mode="after")
    def _one_kind(self) -> OsvEvent:
        given = [v for v in (self.introduced, self.fixed, self.last_affected, self.limit) if v]
        if len(given) != 1:
            raise ValueError("an event has exactly one of introduced, fixed, last_affected, limit")
        return self


class OsvRange(_Strict):
    type: Literal["GIT", "SEMVER", "ECOSYSTEM"]
    repo: str | None = None
    events: list[OsvEvent] = Field(min_length=1)
    database_specific: dict[str, Any] | None = None

    @_model_validator(mode="after")
    def _timeline(self) -> OsvRange:
        if not any(e.introduced is not None for e in self.events):
            raise ValueError("a range's events must contain an introduced event")
        has_fixed = any(e.fixed is not None for e in self.events)
        if has_fixed and any(e.last_affected is not None for e in self.events):
            raise ValueError("a range has fixed or last_affected events, not both")
        if self.type == "GIT" and not self.repo:
            raise ValueError("a GIT range needs its repo")
        return self


class OsvAffected(_Strict):
    package: OsvPackage | None = None
    severity: list[OsvSeverity] | None = None
    ranges: list[OsvRange] = Field(default_factory=list)
    versions: list[str] = Field(default_factory=list)
    ecosystem_specific: dict[str, Any] | None = None
    database_specific: dict[str, Any] | None = None


class OsvReference(_Strict):
    type: ReferenceType
    url: str


class OsvCredit(_Strict):
    name: str
    contact: list[str] = Field(default_factory=list)
    type: CreditType | None = None


class OsvRelated(_Strict):
    """An early schema's object form of ``related`` (type and id); later ones use strings."""

    type: str
    id: str


class OsvRecord(_Strict):
    """One OSV record; ``id`` and ``modified`` are required, the rest optional, unknown keys
    refused (the schema's top level has ``additionalProperties: false``)."""

    schema_version: str | None = None
    id: Annotated[str, StringConstraints(min_length=1, pattern=r"^\S+$")]
    modified: Timestamp
    published: Timestamp | None = None
    withdrawn: Timestamp | None = None
    aliases: list[str] | None = None
    related: list[str | OsvRelated] | None = None
    upstream: list[str] | None = None
    summary: str | None = None
    details: str | None = None
    severity: list[OsvSeverity] | None = None
    affected: list[OsvAffected] | None = None
    references: list[OsvReference] | None = None
    credits: list[OsvCredit] | None = None
    database_specific: dict[str, Any] | None = None

    @_model_validator(mode="after")
    def _version_one(self) -> OsvRecord:
        if self.schema_version is not None and not self.schema_version.startswith("1."):
            raise ValueError(f"schema_version {self.schema_version} is not OSV 1.x")
        return self


def _timestamp(value: str) -> datetime:
    return datetime.fromisoformat(value).astimezone(UTC)


@dataclass(frozen=True)
class OsvDatabase:
    """A loaded export: every record validated, PyPI entries indexed by PEP 503 name."""

    source: Path
    kind: Literal["zip", "folder"]
    digest: str  # sha256 of the zip's bytes, or of the folder's canonical listing
    records: int
    withdrawn: int
    newest_modified: datetime
    ignored_files: tuple[str, ...] = ()
    index: dict[str, tuple[tuple[OsvRecord, OsvAffected], ...]] = field(
        default_factory=dict, repr=False
    )

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
            "pypi_packages": len(self.index),
            "newest_modified": self.newest_modified.isoformat().replace("+00:00", "Z"),
            "age_days": round(self.age(now).total_seconds() / 86400, 2),
            "age_source": "the newest modified timestamp among the records",
            "described": self.describe(now),
            "ignored_files": list(self.ignored_files),
        }


def _read_zip(path: Path, data: bytes) -> Iterator[tuple[str, bytes]]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise VulnDatabaseError(
            f"{path}: not a zip file ({exc})",
            path=str(path),
            hint="give OSV's export for PyPI (its all.zip) or a folder of its JSON records",
        ) from exc
    with archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            where = f"{path}!{info.filename}"
            if not info.filename.endswith(".json"):
                raise VulnDatabaseError(
                    f"{where}: not an OSV record (an OSV export holds only <ID>.json files)",
                    path=where,
                    hint="give OSV's export for PyPI (its all.zip) unchanged",
                )
            if info.file_size > MAX_RECORD_BYTES:
                raise VulnDatabaseError(
                    f"{where}: {info.file_size} bytes, larger than any OSV record",
                    path=where,
                )
            try:
                yield where, archive.read(info)
            except (zipfile.BadZipFile, OSError, EOFError) as exc:
                raise VulnDatabaseError(
                    f"{where}: cannot be read from the zip ({exc})", path=where
                ) from exc


def _read_folder(path: Path) -> tuple[list[tuple[str, bytes]], str, list[str]]:
    """The folder's JSON files (recursively), its listing digest, and what was not JSON."""
    files: list[tuple[str, bytes]] = []
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
        data = file.read_bytes()
        listing.append(f"{hashlib.sha256(data).hexdigest()}  {relative}\n")
        files.append((str(file), data))
    digest = "sha256:" + hashlib.sha256("".join(listing).encode("utf-8")).hexdigest()
    return files, digest, ignored


def _parse(where: str, data: bytes) -> OsvRecord:
    try:
        return OsvRecord.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise VulnDatabaseError(
            f"{where}: not an OSV record: {at}: {first['msg']}"
            + (f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""),
            path=where,
            hint="the export must hold OSV records only (https://ossf.github.io/osv-schema/)",
        ) from exc


def load_database(path: Path) -> OsvDatabase:
    """Read and validate every record of an OSV export, or refuse it naming the file."""
    if path.is_dir():
        files, digest, ignored = _read_folder(path)
        kind: Literal["zip", "folder"] = "folder"
        entries: Iterator[tuple[str, bytes]] | list[tuple[str, bytes]] = files
    elif path.is_file():
        data = path.read_bytes()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        kind, ignored, entries = "zip", [], _read_zip(path, data)
    else:
        raise VulnDatabaseError(
            f"{path}: no such file or folder",
            path=str(path),
            hint="--vuln-db (or IMAGEKIT_VULN_DB) names OSV's all.zip for PyPI or a folder of it",
        )
    seen: dict[str, str] = {}
    index: dict[str, list[tuple[OsvRecord, OsvAffected]]] = {}
    newest: str | None = None
    withdrawn = 0
    pypi_records = 0
    for where, data in entries:
        record = _parse(where, data)
        if record.id in seen:
            raise VulnDatabaseError(
                f"{where}: record {record.id} is also in {seen[record.id]}",
                path=where,
                hint="an OSV export holds each record once; rebuild the folder from one export",
            )
        seen[record.id] = where
        newest = record.modified if newest is None or record.modified > newest else newest
        pypi = [
            a
            for a in record.affected or []
            if a.package is not None and a.package.ecosystem == ECOSYSTEM
        ]
        pypi_records += bool(pypi)
        if record.withdrawn is not None:
            withdrawn += 1
            continue  # OSV: a withdrawn entry is no longer a vulnerability
        for affected in pypi:
            assert affected.package is not None  # noqa: S101 - filtered above
            index.setdefault(canonicalize_name(affected.package.name), []).append(
                (record, affected)
            )
    if newest is None:
        raise VulnDatabaseError(
            f"{path}: holds no OSV records",
            path=str(path),
            hint="give OSV's export for PyPI (its all.zip) or a folder of its JSON records",
        )
    if pypi_records == 0:
        raise VulnDatabaseError(
            f"{path}: {len(seen)} OSV records, none for a PyPI package",
            path=str(path),
            hint="this is another ecosystem's export; give OSV's export for PyPI",
        )
    return OsvDatabase(
        source=path,
        kind=kind,
        digest=digest,
        records=len(seen),
        withdrawn=withdrawn,
        # Timestamps of one fixed format compare as strings; only the newest is parsed.
        newest_modified=_timestamp(newest),
        ignored_files=tuple(ignored),
        index={name: tuple(pairs) for name, pairs in index.items()},
    )


class Unevaluable(Exception):
    """A record names the distribution but its range cannot be compared with PEP 440."""


def _event_version(value: str, record: OsvRecord) -> Version:
    try:
        return Version(value)
    except InvalidVersion as exc:
        raise Unevaluable(f"{record.id} has a range event {value!r} that is not PEP 440") from exc


def _in_range(version: Version, rng: OsvRange, record: OsvRecord) -> bool:
    """The OSV schema's IncludedInRanges for one range (its BeforeLimits included)."""
    limits = [e.limit for e in rng.events if e.limit is not None]
    if limits and not any(
        "*" in limit or version < _event_version(limit, record) for limit in limits
    ):
        return False
    timeline: list[tuple[tuple[int, Version | None], OsvEvent]] = []
    for event in rng.events:
        if event.introduced is not None:
            key = (
                (0, None)
                if event.introduced == "0"
                else (1, _event_version(event.introduced, record))
            )
        elif event.fixed is not None:
            key = (1, _event_version(event.fixed, record))
        elif event.last_affected is not None:
            key = (1, _event_version(event.last_affected, record))
        else:
            continue
        timeline.append((key, event))
    timeline.sort(key=lambda item: (item[0][0], item[0][1] or Version("0")))
    vulnerable = False
    for (_, at), event in timeline:
        if event.introduced is not None and (at is None or version >= at):
            vulnerable = True
        elif event.fixed is not None and at is not None and version >= at:
            vulnerable = False
        elif event.last_affected is not None and at is not None and version > at:
            vulnerable = False
    return vulnerable


def _in_versions(version: Version, raw: str, listed: list[str]) -> bool:
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
    """Why a record affects an installed version, and the fixes its ranges name."""

    record: OsvRecord
    by: Literal["range", "versions"]
    fix_versions: tuple[Version, ...]


def match(record: OsvRecord, affected: OsvAffected, version: Version, raw: str) -> Match | None:
    """Does this affected entry cover the installed version (public part of ``version``)?"""
    public = Version(version.public)
    fixes: set[Version] = set()
    hit_range = False
    for rng in affected.ranges:
        if rng.type == "GIT":
            continue
        if _in_range(public, rng, record):
            hit_range = True
            fixes.update(
                v
                for e in rng.events
                if e.fixed is not None and (v := _event_version(e.fixed, record)) > public
            )
    if hit_range:
        return Match(record, "range", tuple(sorted(fixes)))
    if _in_versions(public, raw, affected.versions):
        return Match(record, "versions", ())
    return None


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
        for name in (m.record.id, *(m.record.aliases or [])):
            if name in owner:
                parent[root(i)] = root(owner[name])
            else:
                owner[name] = i
    groups: dict[int, list[Match]] = {}
    for i, m in enumerate(matches):
        groups.setdefault(root(i), []).append(m)
    return list(groups.values())


def _result(group: list[Match]) -> VulnerabilityResult:
    group = sorted(group, key=lambda m: m.record.id)
    ids = sorted({name for m in group for name in (m.record.id, *(m.record.aliases or []))})
    first = group[0].record
    description = (first.summary or first.details or "N/A").replace("\n", " ")
    published = [m.record.published for m in group if m.record.published]
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
        for record, affected in self.database.index.get(spec.canonical_name, ()):
            try:
                found = match(record, affected, spec.version, raw)
            except Unevaluable as exc:
                return SkippedDependency(
                    name=spec.name, skip_reason=f"{raw} could not be matched: {exc}"
                ), []
            if found is not None:
                matches.append(found)
        return spec, [_result(group) for group in _merge(matches)]
