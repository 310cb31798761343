"""Matching installed versions against the offline OSV database, as pip-audit's service.

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

Apart from the loading (imagekit.audit.osv): the database is read once, strictly; this is
how each distribution is then looked up in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from packaging.version import InvalidVersion, Version
from pip_audit._service.interface import (
    Dependency,
    ResolvedDependency,
    SkippedDependency,
    VulnerabilityID,
    VulnerabilityResult,
    VulnerabilityService,
)

from imagekit.audit.osv import OsvDatabase
from imagekit.audit.osv_schema import OsvAffected, OsvRange, OsvRecord, parse_timestamp


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
        published=parse_timestamp(min(published)).replace(tzinfo=None) if published else None,
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
