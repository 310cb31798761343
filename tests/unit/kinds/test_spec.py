"""The pieces every kind's spec is built from: a rule's platform and name, the newest-verdict
rule with its maximum age, and how ``ledger sync`` imports a predicate of imagekit's own."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import ValidationError

from imagekit.attest.collect import Collected, VerifiedAttestation
from imagekit.attest.keys import public_key_of
from imagekit.attest.rules import Requirement, Signed
from imagekit.attest.statement import Statement
from imagekit.kinds.audit import AuditedPlatform, AuditRequirement, AuditRule
from imagekit.kinds.details import ImportedMark, RecordDetails
from imagekit.kinds.gpu_preflight import GpuPreflightRequirement, GpuPreflightRule
from imagekit.kinds.push import ProvenanceRequirement, ProvenanceRule
from imagekit.kinds.spec import AgedRequirement, AgedRule, Imported, Predicate, PredicateModel
from imagekit.kinds.vulnerability_scan import VulnerabilityRequirement, VulnerabilityRule
from imagekit.refs import Digest

NOW = datetime(2026, 3, 10, 12, 0, 0, tzinfo=UTC)
DIGEST = Digest("sha256:" + "b" * 64)
KEY = public_key_of(ec.generate_private_key(ec.SECP256R1()), "test.pub")


class Verdict(PredicateModel):
    ok: bool
    at: str
    note: str = ""


SIGNED = Signed("https://t/verdict/v1", Verdict, "at", "verdict")


class VerdictRequirement(AgedRequirement):
    platform: AuditedPlatform = None


@dataclass(frozen=True)
class VerdictRule(AgedRule[VerdictRequirement]):
    predicate_type: str = SIGNED.predicate_type

    def evaluate(self, collected: Collected, now: datetime) -> list[Requirement]:
        return self.newest(
            "verdict ok", SIGNED, collected, now, lambda v: [] if v.ok else ["no"], lambda v: "ok"
        )


def _collected(predicate: dict[str, object]) -> Collected:
    statement = Statement((), SIGNED.predicate_type, predicate)
    return Collected("test", (VerifiedAttestation(DIGEST, statement, KEY),), ())


def test_a_rule_asks_for_the_platform_its_requirement_names_and_none_otherwise() -> None:
    on_arm = {"platform": "linux/arm64"}
    assert AuditRule(AuditRequirement.model_validate(on_arm)).platform == "linux/arm64"
    assert AuditRule(AuditRequirement()).platform is None
    scan = VulnerabilityRequirement.model_validate({"findings": "none", **on_arm})
    assert VulnerabilityRule.of(scan).platform == "linux/arm64"
    assert VulnerabilityRule.of("none").platform is None
    assert GpuPreflightRule(GpuPreflightRequirement()).platform is None
    assert ProvenanceRule(ProvenanceRequirement(plan="p")).platform is None


def test_a_requirement_s_platform_is_refused_unless_it_parses() -> None:
    with pytest.raises(ValidationError, match="platform"):
        VerdictRequirement.model_validate({"platform": "linux"})
    assert VerdictRequirement.model_validate({"platform": "linux/amd64"}).platform


@pytest.mark.parametrize(
    ("given", "name"),
    [
        ({}, "verdict ok"),
        ({"platform": "linux/amd64"}, "verdict ok on linux/amd64"),
        ({"max_age": "7d"}, "verdict ok, at most 7d old"),
        (
            {"platform": "linux/amd64", "max_age": "unbounded"},
            "verdict ok on linux/amd64, of any age",
        ),
    ],
)
def test_an_aged_rule_is_named_by_what_then_the_platform_then_the_age(
    given: dict[str, str], name: str
) -> None:
    rule = VerdictRule(VerdictRequirement.model_validate(given))
    at = (NOW - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    [found] = rule.evaluate(_collected({"ok": True, "at": at}), NOW)
    assert (found.name, found.held, found.attestation) == (name, True, DIGEST)


def test_an_aged_rule_holds_its_maximum_age() -> None:
    at = (NOW - timedelta(days=8)).strftime("%Y-%m-%dT%H:%M:%SZ")
    collected = _collected({"ok": True, "at": at})
    [aged] = VerdictRule(VerdictRequirement(max_age="7d")).evaluate(collected, NOW)
    assert not aged.held and "older than 7d" in aged.why
    [kept] = VerdictRule(VerdictRequirement()).evaluate(collected, NOW)
    assert kept.held


class VerdictDetails(RecordDetails):
    note: str | None = None
    attestation: str | None = None
    imported: ImportedMark = None


def _record(verdict: Verdict) -> Imported:
    return Imported("ok" if verdict.ok else "no", "a verdict", VerdictDetails(note=verdict.note))


def _imported(predicate: dict[str, object]) -> Imported | None:
    imports = Predicate.own(SIGNED.predicate_type, Verdict, "verdict.json", _record).imports
    assert imports is not None
    return imports(_collected(predicate).verified[0], "imported: by test.pub")


def test_an_imported_predicate_is_marked_with_its_envelope_and_its_signer() -> None:
    made = _imported({"ok": True, "at": "x", "note": "n"})
    assert made is not None and (made.status, made.scope) == ("ok", "a verdict")
    assert made.details.to_json() == {
        "note": "n", "attestation": str(DIGEST), "imported": "imported: by test.pub"
    }  # fmt: skip


def test_a_predicate_that_does_not_fit_its_model_is_not_imported() -> None:
    assert _imported({"ok": True, "at": "x", "newer": 1}) is None
    assert _imported({"at": "x"}) is None
