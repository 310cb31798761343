"""A kind of record, described once: everything the records layer needs to know about it.

A stage proves something about an image and appends a record of its kind to the ledger; it
may also sign the same verdict as an attestation beside the image. The ledger (what the
details of a record of this kind are), ``ledger sync`` (how a verified attestation becomes
such a record), the lock (which column shows the newest verdict, which statuses are failed
attempts kept as investigations, which detail keys name the image) and the gate (which
requirement a policy file may make of it, and the rule that decides it) all read the kind's
:class:`KindSpec`, registered once in ``imagekit.kinds.KINDS``. Nothing else lists kinds, so
a stage left out of one of those places cannot fail silently: it is in the tuple or nowhere.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Generic, Never, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError
from typing_extensions import TypeForm

from imagekit.attest.rules import (
    DEFAULT_MAX_AGE,
    UNBOUNDED,
    Requirement,
    Signed,
    decide_newest,
    max_age_value,
)
from imagekit.kinds.details import RecordDetails

if TYPE_CHECKING:
    from imagekit.attest.collect import Collected, VerifiedAttestation
    from imagekit.attest.rules import Rule


class PredicateModel(BaseModel):
    """Base of the predicates and policy requirements imagekit reads: what a signed statement
    or a policy file says is read through a model that refuses unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class TrustedRequirement(PredicateModel):
    """A policy requirement that may name the keys trusted to sign what it reads, as
    Kyverno's attestors and the policy-controller's authorities name theirs: a key that
    only the mirror job holds then cannot sign audits."""

    keys: tuple[str, ...] | None = Field(
        default=None,
        min_length=1,
        description="public key files (PEM, relative to the policy file) trusted to sign "
        "what this requirement reads; absent: every key given with --key",
    )


class AgedRequirement(TrustedRequirement):
    """A requirement on the newest signed verdict of a kind, which ages: the tag holding
    the verdicts is mutable, and a newer failing one deleted must not let an old pass stand
    for ever."""

    max_age: str = Field(
        default=DEFAULT_MAX_AGE,
        description=f"90m, 24h, 7d: how old the newest verdict may be ({DEFAULT_MAX_AGE} "
        f"unless given; {UNBOUNDED!r} lifts it)",
    )

    @field_validator("max_age", mode="before")
    @classmethod
    def _age(cls, value: object) -> str:
        return max_age_value(value)

    def said_max_age(self) -> str:
        """The maximum age as a requirement's name says it: only where the policy set it."""
        if "max_age" not in self.model_fields_set:
            return ""
        return ", of any age" if self.max_age == UNBOUNDED else f", at most {self.max_age} old"


def statuses_of(kind: str, vocabulary: Iterable[str]) -> Callable[[str], str]:
    """A requirement's status checked against its kind's vocabulary where the policy is
    read (an AfterValidator on each status): a misspelled status would fail closed,
    silently, as no verdict ever carries it; it is refused, named, with the nearest status
    as the hint (``unknown_status``, whose context carries it: imagekit.gate.policy says it).
    The one place a status is checked."""
    known = tuple(str(status) for status in vocabulary)

    def check(value: str) -> str:
        if value not in known:
            close = difflib.get_close_matches(value, known, n=1, cutoff=0.5)
            guess = f"did you mean {close[0]!r}? " if close else ""
            said = f"{value!r} is not a status of {kind} (no image could ever meet it)"
            raise PydanticCustomError(
                "unknown_status",
                said,
                {"hint": f"{guess}the statuses: {', '.join(known)}"},
            )
        return value

    return check


R = TypeVar("R", bound=TrustedRequirement)
A = TypeVar("A", bound=AgedRequirement)
P = TypeVar("P", bound=BaseModel)


@dataclass(frozen=True)
class RequirementRule(Generic[R]):
    """The part of a gate rule (imagekit.attest.rules.Rule) every kind's rule shares: it holds
    one requirement of the policy file, and trusts the keys that requirement names."""

    requirement: R

    @property
    def platform(self) -> str | None:
        """The platform the requirement asks for: its ``platform`` field, where its model has
        one (the audit's and the vulnerabilities'), so that every rule whose requirement may
        name a platform is held per platform of an index; None otherwise."""
        platform = getattr(self.requirement, "platform", None)
        return platform if isinstance(platform, str) else None

    @property
    def keys(self) -> tuple[str, ...] | None:
        return self.requirement.keys


@dataclass(frozen=True)
class AgedRule(RequirementRule[A]):
    """A rule on the newest signed verdict of one predicate type, which ages (see
    :class:`AgedRequirement`)."""

    def newest(
        self,
        what: str,
        signed: Signed[P],
        collected: Collected,
        now: datetime,
        judge: Callable[[P], Sequence[str]],
        said: Callable[[P], str],
    ) -> list[Requirement]:
        """The requirement WHAT, held by the newest verdict SIGNED reads no older than the
        maximum age (imagekit.attest.rules.decide_newest: JUDGE gives a verdict's problems,
        SAID what a passing one proved). Its name is WHAT, then the platform and the maximum
        age where the policy named them."""
        name = f"{what} on {self.platform}" if self.platform else what
        name += self.requirement.said_max_age()
        max_age = self.requirement.max_age
        return [decide_newest(name, collected, signed, now, max_age, judge, said)]


@dataclass(frozen=True)
class Imported:
    """A record made from a verified attestation by ``ledger sync``: its status, scope and
    details, and the images it names besides the attested one (a mirror's source)."""

    status: str
    scope: str
    details: RecordDetails
    images: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Predicate:
    """The in-toto predicate a kind's verdict is signed as.

    ``model`` and ``schema`` are set for imagekit's own types (the JSON schema committed under
    imagekit/attest/schemas/ is generated from the model and held equal to it by a test);
    published types (SLSA provenance, cosign's vuln) have neither. ``imports`` turns a
    verified attestation into the record ``ledger sync`` appends (given the sentence saying
    who signed it), or None where the predicate does not fit; a kind without it is never
    imported (a build's provenance: a build record needs the build's own evidence).
    """

    uri: str
    model: type[BaseModel] | None = None
    schema: str | None = None
    imports: Callable[[VerifiedAttestation, str], Imported | None] | None = None

    @classmethod
    def own(
        cls, uri: str, model: type[P], schema: str, record: Callable[[P], Imported]
    ) -> Predicate:
        """A predicate type of imagekit's own, which ``ledger sync`` imports: read through
        MODEL (None where the signed predicate does not fit it, a newer imagekit's), made
        into a record by RECORD, and marked with the attestation's envelope digest and the
        sentence saying who signed it (the ``attestation`` and ``imported`` fields of every
        imported kind's details; tests/unit/kinds/test_registry.py holds each kind to them).
        """

        def imports(attestation: VerifiedAttestation, marked: str) -> Imported | None:
            try:
                predicate = model.model_validate(attestation.statement.predicate)
            except ValidationError:
                return None
            made = record(predicate)
            marks = {"attestation": str(attestation.envelope_digest), "imported": marked}
            return replace(made, details=made.details.model_copy(update=marks))

        return cls(uri, model, schema, imports)


V = TypeVar("V")


class PolicyKey(Protocol):
    """What a kind registers for the policy file, as the gate reads it (sigstore-python's
    ``VerificationPolicy`` shape: a small protocol whose one method decides): its key, the
    type of its value as the file writes it, the value when the key is absent, and
    ``rule_of``, the object that decides what the policy requires under the key (None when it
    requires nothing there, or when the entry only names keys)."""

    @property
    def key(self) -> str: ...

    @property
    def form(self) -> TypeForm[object]: ...

    @property
    def description(self) -> str: ...

    @property
    def default(self) -> Callable[[], object] | None: ...

    @property
    def rule(self) -> Callable[[Never], Rule] | None: ...

    def rule_of(self, policy: BaseModel) -> Rule | None: ...


@dataclass(frozen=True)
class PolicyEntry(Generic[V]):
    """What a policy file may require of this kind (a :class:`PolicyKey`): its key in the
    file, the type of its value (``form``: a requirement model, or a union with a short form
    such as the vulnerabilities' ``none``), the requirement when the key is absent (the
    audit's: a passing audit), and the rule that holds an image to a value; no rule where the
    entry only says whose signatures on the kind are trusted (the mirror's bindings, which the
    gate follows: it reads them through :meth:`value`)."""

    key: str
    form: TypeForm[V | None]
    rule: Callable[[V], Rule] | None
    default: Callable[[], V] | None = None
    description: str = ""

    def value(self, policy: BaseModel) -> V | None:
        """What POLICY (a model the gate built with this entry's field) requires under the
        key: the value as validated, or None."""
        found: V | None = getattr(policy, self.key)
        return found

    def rule_of(self, policy: BaseModel) -> Rule | None:
        value = self.value(policy)
        return None if value is None or self.rule is None else self.rule(value)


@dataclass(frozen=True)
class KindSpec:
    """One kind of ledger record (see the module docstring)."""

    name: str
    details: type[RecordDetails]
    #: every status a record of this kind may carry ((): free, as a note's)
    statuses: tuple[str, ...] = ()
    #: the statuses that are failed attempts: kept among the lock's investigations
    failing: frozenset[str] = frozenset()
    predicate: Predicate | None = None
    #: the lock's column holding the newest verdict of this kind about the prepared image
    #: (per platform for a plan of several); None where the lock shows the kind otherwise
    lock_column: str | None = None
    #: whether a record of this kind counts for a plan when it names the plan's images, even
    #: when it was made with no plan (`imagekit audit REF` run on its own)
    about_images: bool = False
    #: the detail keys that name the image a record is about (image IDs, digests)
    identifier_keys: tuple[str, ...] = ()
    policy: PolicyKey | None = None
    #: a details model chosen by status instead of ``details`` (a night's note)
    details_by_status: Callable[[str], type[RecordDetails] | None] | None = None

    def details_model(self, status: str) -> type[RecordDetails]:
        if self.details_by_status is not None:
            chosen = self.details_by_status(status)
            if chosen is not None:
                return chosen
        return self.details

    def failed(self, status: str) -> bool:
        return status in self.failing

    def attestation_keys(self) -> tuple[str, ...]:
        """The detail keys that hold an attestation's envelope digest a record made (a
        pipeline's push record names the audit's too): every field named ``*attestation``."""
        return tuple(name for name in self.details.model_fields if name.endswith("attestation"))
