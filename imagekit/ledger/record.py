"""One ledger record: its fields, each kind's typed ``details``, and the bytes of its line.

A record is read back from a file anyone could have edited, so it is a trust boundary: every
model refuses unknown keys, and each kind's ``details`` must fit that kind's model (a
misspelt ``manifest_digst`` in a push record makes the line malformed, instead of a lock
that silently says "not recorded"). Writers build the details as these models; readers
(the lock, nightly, record-pod) read them through :attr:`LedgerRecord.info` instead of
fishing in a dict with ``.get``. The kinds, and each kind's details model, are registered
once in imagekit.kinds; this module derives what it knows of them from that registry.

The chain hashes the exact bytes of a line, never a re-serialisation: :func:`encode_line` is
the one serialisation the ledger writes, and the bytes on disk are what count afterwards.
Details are written with only the fields the writer set (``exclude_unset``), so a field
added to a model later never changes the bytes of records written before it.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from imagekit import jsondoc
from imagekit.errors import UsageError
from imagekit.kinds import KINDS as KIND_SPECS
from imagekit.kinds import NAMES, names
from imagekit.kinds import kind as kind_spec
from imagekit.kinds.audit import AuditDetails, AuditSummary
from imagekit.kinds.build import BuildDetails, RejectedBuildDetails
from imagekit.kinds.details import (
    AssertionRunDetails,
    AuditedImageDetails,
    BaseImageDetails,
    BaseLayerUse,
    GuardCheckDetails,
    GuardReport,
    OverlayLayerDetails,
    RecordDetails,
    TagResolution,
)
from imagekit.kinds.final_pull import ContainerdStore, FinalPullDetails, PullCheck
from imagekit.kinds.gpu_preflight import GpuPreflightDetails
from imagekit.kinds.mirror import MirrorDetails
from imagekit.kinds.note import (
    NIGHTLY_STATUS_PREFIX,
    NightlyDetails,
    NoteDetails,
    UpstreamTagDetails,
)
from imagekit.kinds.push import CopyDetails, PushDetails
from imagekit.kinds.spec import KindSpec
from imagekit.kinds.vulnerability_scan import (
    VulnerabilityDatabase,
    VulnerabilityScanDetails,
    VulnerabilitySummary,
)

SCHEMA_VERSION = 1
#: Every kind of record, by name, in the registry's order (imagekit.kinds).
KINDS: tuple[str, ...] = NAMES
Kind = str
DETAILS_MODELS: dict[str, type[RecordDetails]] = {spec.name: spec.details for spec in KIND_SPECS}

__all__ = [
    "DETAILS_MODELS",
    "KINDS",
    "NIGHTLY_STATUS_PREFIX",
    "SCHEMA_VERSION",
    "AssertionRunDetails",
    "AuditDetails",
    "AuditSummary",
    "AuditedImageDetails",
    "BaseImageDetails",
    "BaseLayerUse",
    "BuildDetails",
    "ContainerdStore",
    "CopyDetails",
    "EvidenceRef",
    "FinalPullDetails",
    "GpuPreflightDetails",
    "GuardCheckDetails",
    "GuardReport",
    "Kind",
    "LedgerRecord",
    "MirrorDetails",
    "NightlyDetails",
    "NoteDetails",
    "OverlayLayerDetails",
    "PullCheck",
    "PushDetails",
    "RecordDetails",
    "RejectedBuildDetails",
    "TagResolution",
    "UpstreamTagDetails",
    "VulnerabilityDatabase",
    "VulnerabilityScanDetails",
    "VulnerabilitySummary",
    "check_no_secrets",
    "details_for",
    "details_model",
    "encode_line",
    "line_hash",
]


class EvidenceRef(BaseModel):
    """The main evidence file of a record: where it is and the sha256 of its bytes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    sha256: str


class LedgerRecord(BaseModel):
    """One line of the ledger, as read back (every field is required to be present)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: int = Field(alias="schema")
    seq: int
    time: str
    kind: str
    plan: str | None
    images: dict[str, str]
    status: str
    scope: str
    evidence: EvidenceRef | None
    imagekit: str
    host: str
    details: dict[str, Any]
    prev: str | None

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in names():
            raise ValueError(f"unknown kind {value!r} (known: {', '.join(names())})")
        return value

    @model_validator(mode="after")
    def _details_fit_the_kind(self) -> LedgerRecord:
        self._details_model().model_validate(self.details)
        return self

    def _details_model(self) -> type[RecordDetails]:
        return details_model(self.kind, self.status)

    @property
    def info(self) -> Any:
        """The details as their kind's model (``BuildDetails`` for a build, and so on).

        Typed ``Any`` because the kind decides the class; callers that know the kind
        annotate the variable (``info: PushDetails = record.info``).
        """
        return self._details_model().model_validate(self.details)

    def identifiers(self) -> list[str]:
        """Every reference and digest the record names: its images, and the image IDs and
        digests its details carry (what `ledger show --image` and the lock match on)."""
        texts = list(self.images.values())
        for key in kind_spec(self.kind).identifier_keys:
            value = self.details.get(key)
            if isinstance(value, str):
                texts.append(value)
            elif isinstance(value, list):
                texts.extend(str(v) for v in value)
        return texts

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    @classmethod
    def from_json(cls, data: Any) -> LedgerRecord:
        return cls.model_validate(data)


def details_model(kind: str, status: str) -> type[RecordDetails]:
    """The model a record's details must fit: its kind's, and a night's note its own."""
    return _spec(kind).details_model(status)


def _spec(name: str) -> KindSpec:
    try:
        return kind_spec(name)
    except KeyError:
        raise UsageError(
            f"no record kind {name!r}", hint=f"the kinds are {', '.join(names())} (imagekit.kinds)"
        ) from None


def details_for(
    kind: str, details: RecordDetails | dict[str, Any] | None, status: str = ""
) -> dict[str, Any]:
    """The details dict to write for ``kind``: a model of that kind, or a dict that fits one.

    A model of another kind, or a key the kind's model does not know, is the caller's bug
    and refused before anything is written.
    """
    model = details_model(kind, status)
    if details is None:
        return {}
    # pydantic writes a NaN as null in JSON mode: a measurement silently lost. Refused here,
    # naming where, before anything is written.
    where = jsondoc.non_finite(
        details.model_dump(exclude_unset=True) if isinstance(details, RecordDetails) else details,
        "$.details",
    )
    if where is not None:
        raise UsageError(
            f"refusing to record a {kind} record: a number that is not finite: {where}",
            hint="a record's numbers must be finite; the stage that measured it must refuse "
            "the input it came from",
        )
    if isinstance(details, RecordDetails):
        if not isinstance(details, model):
            raise UsageError(
                f"a {kind} record needs {model.__name__} details, not {type(details).__name__}"
            )
        return details.to_json()
    try:
        return model.model_validate(details).to_json()
    except ValueError as exc:
        first = str(exc).splitlines()
        raise UsageError(
            f"the details of this {kind} record do not fit {model.__name__}: "
            + (" ".join(line.strip() for line in first[1:3]) if len(first) > 1 else str(exc)),
            hint="every record kind's details are typed in imagekit.ledger.record",
        ) from exc


def line_hash(raw: bytes) -> str:
    """The chain hash of a line: sha256 of its exact bytes, newline included."""
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def encode_line(document: dict[str, Any]) -> bytes:
    """The one serialisation the ledger writes: compact, sorted keys, UTF-8, newline.

    Strict JSON: a number that is not finite is refused (``jsondoc.JsonRefused``, a
    ValueError naming where it is), never written as a bare ``NaN`` that strict readers of
    the ledger (jq, Go, the chain's own reader) refuse; a NaN is no measurement to record."""
    text = jsondoc.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return (text + "\n").encode("utf-8")


# Keys that name a credential; a record carrying one is refused whatever its value.
_SECRET_KEYS = re.compile(
    r"^(password|passwd|secret|token|access_token|refresh_token|identitytoken|"
    r"registrytoken|authorization|private_key|x-registry-auth)$",
    re.IGNORECASE,
)
# Text that looks like a credential wherever it sits (values, scope sentences, messages).
# Case matters for the token schemes so that prose ("a basic roundtrip") is not refused.
_SECRET_TEXT = re.compile(
    r"((?i:authorization\s*:\s*(basic|bearer)\b)"
    r"|\bBearer [A-Za-z0-9._~+/-]{16,}"
    r"|\bBasic (?=[A-Za-z0-9+/]*[A-Z0-9+/])(?=[A-Za-z0-9+/]*[a-z])[A-Za-z0-9+/]{12,}"
    r"|-----BEGIN [A-Z ]*(CERTIFICATE|PRIVATE KEY)-----"
    r"|\"auths\"\s*:)",
)


def check_no_secrets(value: Any, where: str = "record") -> None:
    """Refuse (UsageError) a record with a credential-like key or text anywhere in it.

    Nothing is scrubbed silently: the caller's bug shows instead of being hidden.
    """
    if isinstance(value, dict):
        for key, inner in value.items():
            if isinstance(key, str) and _SECRET_KEYS.match(key):
                raise UsageError(
                    f"refusing to write a ledger record with a credential-like key {key!r} "
                    f"in {where}",
                    hint="records must never carry credentials; drop that key",
                )
            check_no_secrets(inner, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for index, inner in enumerate(value):
            check_no_secrets(inner, f"{where}[{index}]")
    elif isinstance(value, str) and _SECRET_TEXT.search(value):
        raise UsageError(
            f"refusing to write a ledger record: {where} looks like it carries a credential "
            "(an Authorization header, a bearer/basic token, a key or a certificate)",
            hint="records must never carry credentials; pass only references and digests",
        )
