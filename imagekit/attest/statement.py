"""in-toto Statements v1 (https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md).

A statement binds a predicate (what was proved) to subjects (image manifests, by sha256).
Written with sorted keys and no whitespace so the same facts make the same bytes; read back
through a strict model, and the subject digests are what the gate compares, never the
names. A statement without ``_type`` is read, as cosign reads it (cosign never checks the
field); one whose ``_type`` names another format than in-toto's statements is refused, since
its fields might not mean what a statement's mean (cosign would read it: a difference
written in docs/ATTESTATIONS.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from imagekit import jsondoc
from imagekit.attest.dsse import MAX_ENVELOPE_BYTES
from imagekit.errors import ReferenceFormatError, UsageError
from imagekit.refs import Digest

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
# cosign itself still writes v0.1 statements; both are read.
STATEMENT_TYPES = frozenset({STATEMENT_TYPE, "https://in-toto.io/Statement/v0.1"})


class StatementError(ValueError):
    """A payload that is not an in-toto statement."""


class _Subject(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = ""
    digest: dict[str, str]


class _StatementModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    type_: str | None = Field(default=None, alias="_type")
    subject: tuple[_Subject, ...]
    predicateType: str
    predicate: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class Subject:
    name: str
    digest: Digest


@dataclass(frozen=True)
class Statement:
    subjects: tuple[Subject, ...]
    predicate_type: str
    predicate: dict[str, Any]

    def names(self, digest: Digest) -> bool:
        """Whether DIGEST is one of the subjects (only sha256 subjects count)."""
        return any(s.digest == digest for s in self.subjects)


def make_statement(
    subjects: tuple[Subject, ...], predicate_type: str, predicate: dict[str, Any]
) -> bytes:
    document = {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": s.name, "digest": {s.digest.algorithm: s.digest.hex}} for s in subjects
        ],
        "predicateType": predicate_type,
        "predicate": predicate,
    }
    try:
        return jsondoc.dumps(document, separators=(",", ":"), sort_keys=True).encode()
    except jsondoc.JsonRefused as exc:
        # Strict verifiers (cosign, Kyverno) refuse a bare NaN: nothing is signed.
        raise UsageError(
            f"refusing to sign a {predicate_type} statement: {exc}",
            hint="a verdict's numbers must be finite; the stage that measured it must refuse "
            "the input it came from",
        ) from None


def parse_statement(payload: bytes) -> Statement:
    try:
        model = _StatementModel.model_validate(jsondoc.loads(payload, limit=MAX_ENVELOPE_BYTES))
    except jsondoc.JsonRefused as exc:
        raise StatementError(f"not an in-toto statement ({exc})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "document"
        raise StatementError(f"not an in-toto statement ({where}: {first['msg']})") from None
    if model.type_ is not None and model.type_ not in STATEMENT_TYPES:
        raise StatementError(f"unknown statement type {model.type_!r}")
    subjects = []
    for subject in model.subject:
        value = subject.digest.get("sha256")
        if value is None:
            continue
        try:
            subjects.append(Subject(subject.name, Digest(f"sha256:{value}")))
        except ReferenceFormatError:
            continue  # not a digest: it names nothing this gate compares
    return Statement(tuple(subjects), model.predicateType, dict(model.predicate))
