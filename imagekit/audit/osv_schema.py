"""The OSV schema (https://ossf.github.io/osv-schema/) as types, and one record read strictly.

The schema is written as TypedDicts that pydantic validates with ``extra="forbid"``: over an
export of 20,000 records that is half the cost of building model instances (measured by
bench/osv.py).

Apart from the export's loading (imagekit.audit.osv) and the matching (osv_match.py), which
both read records of these types: what a record may hold is said once, here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, NotRequired, Required

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


def parse_timestamp(value: str) -> datetime:
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
