"""The gate's rules: each requirement of a policy is a Rule with one ``evaluate``.

As sigstore-python composes a ``VerificationPolicy`` of small policies, imagekit's gate holds
an image to the rules its policy file names, one rule a requirement, joined by a loop
(imagekit.gate.verify). Each kind of record that can be required registers its rule in its
spec (imagekit.kinds): the audit's status, the vulnerabilities of the audited image, the
build's provenance, the GPU preflight's verdict. A rule sees the attestations collected for
one image (the image of one platform, for an index), signed by the keys the policy trusts
for it, and says which of its requirements hold and why; the gate names every one that
does not.

What several rules share lives here: :func:`decide_newest`, which holds the newest signed
predicate of a type to a rule (a later verdict supersedes an earlier one, so a pass
followed by a failure is a failure), and the time and age arithmetic. A verdict whose place
in time or whose content cannot be told can fail a requirement but never pass one:

- times are parsed (RFC 3339: ``Z`` or an offset, fractions of a second); a time that does
  not parse (an unpadded date too) or lies more than :data:`FUTURE_SKEW_S` seconds ahead of
  this machine's clock refuses its attestation with the reason;
- a tie at the newest time goes to the worse verdict (the layer order is the pusher's);
- a signed statement of the type that this imagekit cannot read (a newer imagekit's, with
  one field more) fails the requirement, naming it, unless a readable verdict is newer;
- every requirement that reads a verdict has a maximum age, :data:`DEFAULT_MAX_AGE` unless
  the policy says otherwise (``max_age: unbounded`` lifts it), so that a rollback by
  deleting the newer failing layer from the mutable ``.att`` tag ages out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from imagekit.refs import Digest

if TYPE_CHECKING:
    from imagekit.attest.collect import Collected, VerifiedAttestation

_AGE = re.compile(r"^(\d+)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: How old a verdict may be when the policy does not say: a month. Audits are re-run by the
#: nightly flow and on every base bump, so a current image's newest audit is days old; a
#: month leaves room for a quiet holiday without letting a verdict that was rolled back
#: (the newer failing layer deleted from the mutable .att tag) stand for long.
DEFAULT_MAX_AGE = "30d"
#: The explicit word that lifts the maximum age.
UNBOUNDED = "unbounded"
#: How far ahead of this machine's clock a signed time may be (clocks drift a little).
FUTURE_SKEW_S = 300
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})"
)


def age_seconds(text: str) -> int:
    """A policy's ``max_age`` (90m, 24h, 7d) in seconds; ValueError naming the text."""
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not an age such as 90m, 24h or 7d")
    return int(match.group(1)) * _UNIT[match.group(2)]


def max_age_value(value: object) -> str:
    """A ``max_age`` field's validator: an age (90m, 24h, 7d) or ``unbounded``; a null is
    refused, so a maximum age is lifted only by the word that says so. YAML makes ``30`` a
    number, ``no`` a boolean and ``2026-01-01`` a date: each is refused as what it is."""
    if value is None:
        raise ValueError(f"give an age such as 7d, or {UNBOUNDED!r} for no maximum age")
    if not isinstance(value, str):
        raise ValueError(f"an age is text such as 90m, 24h or 7d, not {_as_yaml(value)}")
    if value != UNBOUNDED:
        age_seconds(value)
    return value


def _as_yaml(value: object) -> str:
    """What YAML made of a value, in a policy author's words (``the number 30``)."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, date):
        return f"the date {value.isoformat()}"
    if isinstance(value, list | tuple):
        return f"a list {list(value)!r}"
    if isinstance(value, dict):
        return "a mapping"
    return repr(value)


def parse_time(value: object) -> datetime:
    """An RFC 3339 time (``Z`` or an offset, any fraction of a second) as an aware datetime;
    ValueError saying why VALUE is not one (an unpadded date is not)."""
    match = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return _not_a_time(value)
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    fraction = (match.group(7) or "")[:6].ljust(6, "0")
    zone = match.group(8)
    if zone in ("Z", "z"):
        offset = UTC
    else:
        sign = -1 if zone[0] == "-" else 1
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 23 or minutes > 59:
            return _not_a_time(value)
        offset = timezone(sign * timedelta(hours=hours, minutes=minutes))
    try:
        return datetime(year, month, day, hour, minute, second, int(fraction), tzinfo=offset)
    except ValueError:
        return _not_a_time(value)


def _not_a_time(value: object) -> datetime:
    shown = repr(value)[:60]
    raise ValueError(f"{shown} is not an RFC 3339 time (such as 2026-01-05T10:00:00Z)")


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
        platform's images), or None."""

    @property
    def keys(self) -> tuple[str, ...] | None:
        """The key files (relative to the policy file) trusted to sign what this rule reads,
        or None: every key given with --key."""

    @property
    def predicate_type(self) -> str:
        """The predicate type this rule reads (to name what an untrusted key signed)."""

    def evaluate(self, collected: Collected, now: datetime) -> list[Requirement]:
        """The requirements this rule makes of one image, each held or not."""


P = TypeVar("P", bound=BaseModel)


@dataclass(frozen=True)
class Signed(Generic[P]):
    """How a rule reads the verdicts of one predicate type: the type, its model, the field
    holding its signed time, and what it is called in messages ("audit")."""

    predicate_type: str
    model: type[P]
    time_field: str
    called: str


@dataclass(frozen=True)
class _Read(Generic[P]):
    attestation: VerifiedAttestation
    predicate: P | None
    at: datetime | None
    unreadable: str | None
    untimed: str | None

    @property
    def short(self) -> str:
        return self.attestation.envelope_digest.short


def _read_all(collected: Collected, signed: Signed[P], now: datetime) -> list[_Read[P]]:
    found: list[_Read[P]] = []
    for attestation in collected.verified:
        if attestation.predicate_type != signed.predicate_type:
            continue
        raw = attestation.statement.predicate
        predicate: P | None = None
        unreadable = None
        try:
            predicate = signed.model.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "predicate"
            unreadable = (
                f"a signed {signed.called} this imagekit cannot read ({where}: {first['msg']})"
            )
        at: datetime | None = None
        untimed = None
        try:
            at = parse_time(raw.get(signed.time_field))
            if (at - now).total_seconds() > FUTURE_SKEW_S:
                untimed = (
                    f"its {signed.time_field} {raw.get(signed.time_field)} is more than "
                    f"{FUTURE_SKEW_S // 60} minutes ahead of this machine's clock: refused"
                )
                at = None
        except ValueError as exc:
            untimed = f"its {signed.time_field}: {exc}: refused"
        found.append(_Read(attestation, predicate, at, unreadable, untimed))
    return found


def decide_newest(
    name: str,
    collected: Collected,
    signed: Signed[P],
    now: datetime,
    max_age: str | None,
    judge: Callable[[P], Sequence[str]],
    said: Callable[[P], str],
) -> Requirement:
    """Hold the newest signed verdict of SIGNED's type to a rule: JUDGE gives a verdict's
    problems (none: it passes), SAID what a passing one proved.

    The newest is by the signed time, parsed; verdicts older than MAX_AGE count for
    nothing; at a tie the worse verdict wins. A verdict that cannot be placed in time (no
    parsable time, or one ahead of this clock) or read (a newer imagekit's) fails the
    requirement when it could be the newest and is not known to pass; it never passes it.
    """
    limit = None if max_age in (None, UNBOUNDED) else age_seconds(max_age or "")
    everything = _read_all(collected, signed, now)
    current: list[_Read[P]] = []
    aged: list[_Read[P]] = []
    for read in everything:
        if read.at is not None and limit is not None and (now - read.at).total_seconds() > limit:
            aged.append(read)
        else:
            current.append(read)
    placed = [r for r in current if r.at is not None and r.predicate is not None]
    newest_at = max((r.at for r in placed if r.at is not None), default=None)
    against: list[str] = []
    refused: list[str] = []
    for read in current:
        if read.predicate is not None and read.at is not None:
            continue
        if read.predicate is None:
            # It may be the newest and may say no: it fails the requirement, unless a
            # readable verdict was signed after it.
            if read.at is None or newest_at is None or read.at >= newest_at:
                reasons = "; ".join(x for x in (read.unreadable, read.untimed) if x)
                against.append(f"{read.short}: {reasons}")
            continue
        problems = judge(read.predicate)
        if problems:
            against.append(f"{read.short}: {', '.join(problems)}; and {read.untimed}")
        else:
            refused.append(f"{read.short}: {read.untimed}")
    top = [r for r in placed if r.at == newest_at]
    judged = [(r, list(judge(r.predicate))) for r in top if r.predicate is not None]
    failing = [(r, problems) for r, problems in judged if problems]
    bound = f"at most {max_age} old" if limit is not None else "no maximum age"
    notes = f"; refused: {'; '.join(refused)}" if refused else ""
    if against:
        return Requirement(name, False, "; ".join(against) + notes)
    if failing:
        read, problems = failing[0]
        tie = f" (of {len(top)} signed at the same time, the worse)" if len(top) > 1 else ""
        return Requirement(
            name,
            False,
            f"the newest {signed.called} {read.short}{tie}: {', '.join(problems)}{notes}",
            read.attestation.envelope_digest,
        )
    if judged:
        read = judged[0][0]
        assert read.predicate is not None  # noqa: S101 - judged holds readable ones
        when = read.attestation.statement.predicate.get(signed.time_field)
        return Requirement(
            name,
            True,
            f"{said(read.predicate)}; signed at {when} ({bound}){notes}",
            read.attestation.envelope_digest,
        )
    why = f"no {signed.called} attestation signed by the keys given for this digest"
    if aged:
        oldest_newest = max(aged, key=lambda r: r.at or now)
        when = oldest_newest.attestation.statement.predicate.get(signed.time_field)
        why += f"; the newest, {oldest_newest.short}, was signed at {when}, older than {max_age}"
    return Requirement(name, False, why + notes)
