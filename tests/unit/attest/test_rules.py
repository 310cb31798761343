"""The gate's shared rule arithmetic: times parsed as RFC 3339, a maximum age given or
lifted by the word that says so, and the newest verdict decided without being gamed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from imagekit.attest.collect import Collected, VerifiedAttestation
from imagekit.attest.keys import public_key_of
from imagekit.attest.rules import (
    DEFAULT_MAX_AGE,
    UNBOUNDED,
    Signed,
    decide_newest,
    max_age_value,
    parse_time,
)
from imagekit.attest.statement import Statement
from imagekit.kinds.spec import PredicateModel
from imagekit.refs import Digest

NOW = datetime(2026, 3, 10, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "when"),
    [
        ("2026-03-10T12:00:00Z", NOW),
        ("2026-03-10t12:00:00z", NOW),
        ("2026-03-10T07:00:00-05:00", NOW),
        ("2026-03-10T12:00:00.5Z", NOW + timedelta(microseconds=500_000)),
        ("2026-03-10T12:00:00.123456789Z", NOW + timedelta(microseconds=123_456)),
    ],
)
def test_rfc3339_times_parse(text: str, when: datetime) -> None:
    assert parse_time(text) == when


@pytest.mark.parametrize(
    "text",
    [
        "2026-3-10T12:00:00Z",  # unpadded: sorts wrongly as a string
        "2026-03-10 12:00:00Z",
        "2026-03-10T12:00:00",  # no zone
        "2026-02-30T12:00:00Z",
        "2026-03-10T12:00:00+24:00",
        "yesterday",
        None,
        20260310,
    ],
)
def test_what_is_not_rfc3339_is_refused_with_its_reason(text: object) -> None:
    with pytest.raises(ValueError, match="is not an RFC 3339 time"):
        parse_time(text)


def test_a_maximum_age_is_an_age_or_the_word_that_lifts_it() -> None:
    assert DEFAULT_MAX_AGE == "30d"
    assert max_age_value("7d") == "7d" and max_age_value(UNBOUNDED) == UNBOUNDED
    for bad in (None, "forever", "7 days"):
        with pytest.raises(ValueError):
            max_age_value(bad)


class Verdict(PredicateModel):
    ok: bool
    at: str


SIGNED = Signed("https://t/v1", Verdict, "at", "verdict")


KEY = public_key_of(ec.generate_private_key(ec.SECP256R1()), "test.pub")


def _collected(*predicates: dict[str, object]) -> Collected:
    made = [
        VerifiedAttestation(
            Digest("sha256:" + f"{n:02x}" * 32), Statement((), "https://t/v1", p), KEY, (KEY,)
        )
        for n, p in enumerate(predicates)
    ]
    return Collected("test", tuple(made), ())


def _decide(collected: Collected, max_age: str = "30d") -> tuple[bool, str]:
    found = decide_newest(
        "r", collected, SIGNED, NOW, max_age,
        lambda v: [] if v.ok else ["said no"], lambda v: "said yes",
    )  # fmt: skip
    return found.held, found.why


def _at(delta: timedelta) -> str:
    return (NOW - delta).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_the_newest_decides_and_a_tie_goes_to_the_worse() -> None:
    old_no, new_yes = (
        {"ok": False, "at": _at(timedelta(hours=2))},
        {"ok": True, "at": _at(timedelta(hours=1))},
    )
    assert _decide(_collected(old_no, new_yes))[0] is True
    tie = {"ok": False, "at": new_yes["at"]}
    held, why = _decide(_collected(new_yes, tie))
    assert not held and "(of 2 signed at the same time, the worse): said no" in why


def test_an_unreadable_verdict_fails_unless_a_readable_one_is_newer() -> None:
    yes = {"ok": True, "at": _at(timedelta(hours=1))}
    newer_unknown = {"ok": True, "at": _at(timedelta(minutes=1)), "extra": 1}
    older_unknown = {"ok": True, "at": _at(timedelta(hours=3)), "extra": 1}
    held, why = _decide(_collected(yes, newer_unknown))
    assert not held and "a signed verdict this imagekit cannot read (extra:" in why
    assert _decide(_collected(yes, older_unknown))[0] is True


def test_a_verdict_out_of_time_passes_nothing_and_fails_when_it_says_no() -> None:
    yes = {"ok": True, "at": _at(timedelta(hours=1))}
    ahead_yes = {"ok": True, "at": _at(-timedelta(hours=1))}
    ahead_no = {"ok": False, "at": _at(-timedelta(hours=1))}
    within_skew = {"ok": True, "at": _at(-timedelta(minutes=4))}
    held, why = _decide(_collected(ahead_yes))
    assert not held and "ahead of this machine's clock: refused" in why
    held, why = _decide(_collected(yes, ahead_no))
    assert not held and "said no; and its at" in why
    assert _decide(_collected(within_skew))[0] is True


def test_old_verdicts_count_for_nothing_unless_the_age_is_lifted() -> None:
    old = _collected({"ok": True, "at": _at(timedelta(days=31))})
    held, why = _decide(old)
    assert not held and "older than 30d" in why
    held, why = _decide(old, UNBOUNDED)
    assert held and "no maximum age" in why


def test_an_offset_time_is_ordered_by_the_instant() -> None:
    earlier_utc = {"ok": True, "at": _at(timedelta(hours=2))}
    later_offset = {"ok": False, "at": (NOW - timedelta(hours=1)).astimezone(
        timezone(-timedelta(hours=5))).isoformat()}  # fmt: skip
    assert _decide(_collected(earlier_utc, later_offset))[0] is False
