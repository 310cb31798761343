"""The gate's rules: each requirement of a policy is a Rule with one ``evaluate``.

As sigstore-python composes a ``VerificationPolicy`` of small policies, imagekit's gate holds
an image to the rules its policy file names, one rule a requirement, joined by a loop
(imagekit.attest.gate). Each kind of record that can be required registers its rule in its
spec (imagekit.kinds): the audit's status, the vulnerabilities of the audited image, the
build's provenance, the GPU preflight's verdict. A rule sees the attestations collected for
one image (the image of one platform, for an index) and says which of its requirements hold
and why; the gate names every one that does not.

What several rules share lives here: :func:`newest`, the newest signed predicate of a type by
the time it carries (a later audit supersedes an earlier one, so a pass followed by a failure
is a failure), with its unreadable attestations named, and the age arithmetic of
``max_age``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from imagekit.refs import Digest

if TYPE_CHECKING:
    from imagekit.attest.collect import Collected, VerifiedAttestation

_AGE = re.compile(r"^(\d+)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def age_seconds(text: str) -> int:
    """A policy's ``max_age`` (90m, 24h, 7d) in seconds; ValueError naming the text."""
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not an age such as 90m, 24h or 7d")
    return int(match.group(1)) * _UNIT[match.group(2)]


def age_s(when: str, now: datetime) -> float | None:
    """How long before NOW a predicate's signed time was, or None when it does not parse."""
    try:
        at = datetime.strptime(when, TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None
    return (now - at).total_seconds()


@dataclass(frozen=True)
class Requirement:
    """One requirement of the policy, held or not, and why (the attestation that decided)."""

    name: str
    held: bool
    why: str
    attestation: Digest | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "requirement": self.name,
            "held": self.held,
            "why": self.why,
            "attestation": str(self.attestation) if self.attestation else None,
        }


class Rule(Protocol):
    """One requirement of a policy file, ready to be held against an image's attestations."""

    @property
    def platform(self) -> str | None:
        """The platform this rule requires the image to be (an index is then held on that
        platform's image alone), or None."""

    def evaluate(self, collected: Collected, now: datetime) -> list[Requirement]:
        """The requirements this rule makes of one image, each held or not."""


P = TypeVar("P", bound=BaseModel)


@dataclass(frozen=True)
class Newest(Generic[P]):
    """The newest signed predicate of one type, or none, and what could not be read."""

    attestation: VerifiedAttestation | None
    predicate: P | None
    unreadable: tuple[str, ...]


def newest(
    collected: Collected,
    predicate_type: str,
    model: type[P],
    when: Callable[[P], str],
    called: str,
) -> Newest[P]:
    """The newest attestation of PREDICATE_TYPE by the time WHEN reads from its predicate
    (an equal time: the one found later); those whose predicate does not fit MODEL are
    named in ``unreadable`` as "not CALLED"."""
    found: tuple[VerifiedAttestation, P] | None = None
    unreadable: list[str] = []
    for attestation in collected.verified:
        if attestation.predicate_type != predicate_type:
            continue
        try:
            predicate = model.model_validate(attestation.statement.predicate)
        except ValidationError:
            unreadable.append(f"{attestation.envelope_digest.short}: not {called}")
            continue
        if found is None or when(predicate) >= when(found[1]):
            found = (attestation, predicate)
    if found is None:
        return Newest(None, None, tuple(unreadable))
    return Newest(found[0], found[1], tuple(unreadable))
