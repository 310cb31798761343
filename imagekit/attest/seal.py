"""How every stage that records ends: sign, record, attach, and raise unless stored.

One order for every stage that proves something about an image (the builders, the push, the
audit, the mirror, the final pull, the GPU preflight), so that a signed verdict without its
record cannot happen and nothing proved is lost to a ledger's or a registry's refusal:

1. ``sign``: the stage's statements are signed here, attaching nothing (each a
   :class:`~imagekit.attest.attach.Prepared`; none without a signing key), so that the
   record can name each envelope that is to be attached, or say "not attested: WHY";
2. ``record``: the stage's records are appended, naming them; a ledger that refuses raises
   ``RecordRefused`` carrying the stage's result (what ``keeping`` makes of it), since the
   stage's work and evidence stand, and nothing is attached;
3. ``attach``: only then are the envelopes attached, and ``attached`` puts what that came to
   in the result;
4. an envelope the registry did not store ends the stage exit 3 (``NotAttested``, carrying
   the recorded result), where ``must_store`` says the stage's verdict needs it stored.

The stages keep what is their own (what they sign, their record's details, where the
outcome goes in their result); this module keeps the order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from imagekit.attest.attach import AttestOutcome, Prepared
from imagekit.errors import RecordRefused

R = TypeVar("R")


def _attach_each(prepared: Sequence[Prepared]) -> tuple[AttestOutcome, ...]:
    return tuple(each.attach() for each in prepared)


def _unchanged(result: R, outcomes: tuple[AttestOutcome, ...]) -> R:
    return result


def _always(result: object) -> bool:
    return True


def _itself(result: R) -> object:
    return result


def sign_record_attach(
    result: R,
    *,
    sign: Callable[[R], Sequence[Prepared]] | None,
    record: Callable[[R, Sequence[Prepared]], R] | None,
    attached: Callable[[R, tuple[AttestOutcome, ...]], R] = _unchanged,
    attach: Callable[[Sequence[Prepared]], tuple[AttestOutcome, ...]] = _attach_each,
    must_store: Callable[[R], bool] = _always,
    keeping: Callable[[R], object] | None = _itself,
) -> R:
    """RESULT signed (``sign``; None: nothing to sign), recorded (``record``, given what was
    signed; None: not recorded; ``keeping`` makes the result a refusal carries, None:
    none), its envelopes attached (``attach``, each once its record is
    written) and put in it (``attached``), and NotAttested raised for one the registry did not
    store when ``must_store`` holds for the result (see the module docstring)."""
    prepared = tuple(sign(result)) if sign is not None else ()
    if record is not None and keeping is not None:
        with RecordRefused.keeping(keeping(result)):
            result = record(result, prepared)
    elif record is not None:  # a refusal carries no result
        result = record(result, prepared)
    if not prepared:
        return result
    outcomes = attach(prepared)  # only now, the records written, is anything attached
    result = attached(result, outcomes)
    if must_store(result):
        for outcome in outcomes:
            outcome.raise_unless_stored(result)
    return result
