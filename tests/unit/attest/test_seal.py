"""The one ending of every stage that records: sign, record, attach, raise unless stored.

The stages' own tests run it for real (tests/integration/attest/); here each step is a
stand-in that notes when it ran, to pin the order and what a refusal carries.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from imagekit.attest.attach import AttestOutcome, Prepared
from imagekit.attest.seal import sign_record_attach
from imagekit.errors import NotAttested, RecordRefused

_PREPARED = Prepared.nothing("https://example.invalid/toy/v1", "key", "no registry here")


def test_the_order_is_sign_record_attach() -> None:
    steps: list[str] = []

    def sign(result: str) -> tuple[Prepared, ...]:
        steps.append("sign")
        return (_PREPARED,)

    def record(result: str, prepared: Sequence[Prepared]) -> str:
        steps.append(f"record naming {prepared[0].ledger_value}")
        return result + " recorded"

    def attach(prepared: Sequence[Prepared]) -> tuple[AttestOutcome, ...]:
        steps.append("attach")
        return (AttestOutcome(None, "refused"),)

    with pytest.raises(NotAttested) as caught:
        sign_record_attach("verdict", sign=sign, record=record, attach=attach)
    assert steps == ["sign", "record naming not attested: no registry here", "attach"]
    assert caught.value.result == "verdict recorded"  # the recorded result, kept


def test_a_refused_record_attaches_nothing_and_carries_the_result() -> None:
    attached: list[Sequence[Prepared]] = []

    def refuse(result: str, prepared: Sequence[Prepared]) -> str:
        raise RecordRefused("refused", hint="h", ledger="l", problem="torn line")

    def attach(prepared: Sequence[Prepared]) -> tuple[AttestOutcome, ...]:
        attached.append(prepared)
        return ()

    with pytest.raises(RecordRefused) as caught:
        sign_record_attach(
            "verdict", sign=lambda _: (_PREPARED,), record=refuse, attach=attach, keeping=str.upper
        )
    assert attached == [] and caught.value.result == "VERDICT"


def test_an_outcome_not_stored_raises_only_where_the_verdict_needs_it() -> None:
    refused = (AttestOutcome(None, "refused"),)
    done = sign_record_attach(
        "mismatch",
        sign=lambda _: (_PREPARED,),
        record=None,
        attach=lambda _: refused,
        attached=lambda result, outcomes: f"{result}, {outcomes[0].ledger_value}",
        must_store=lambda result: not result.startswith("mismatch"),
    )
    assert done == "mismatch, not attested: refused"


def test_nothing_signed_is_recorded_and_nothing_attached() -> None:
    done = sign_record_attach(
        "verdict",
        sign=None,
        record=lambda result, prepared: f"{result} recorded ({len(prepared)} envelopes)",
    )
    assert done == "verdict recorded (0 envelopes)"
