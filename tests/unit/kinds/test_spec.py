"""The pieces every kind's spec is built from: how ``ledger sync`` imports a predicate of
imagekit's own."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric import ec

from imagekit.attest.collect import Collected, VerifiedAttestation
from imagekit.attest.keys import public_key_of
from imagekit.attest.rules import Signed
from imagekit.attest.statement import Statement
from imagekit.kinds.details import ImportedMark, RecordDetails
from imagekit.kinds.spec import Imported, Predicate, PredicateModel
from imagekit.refs import Digest

DIGEST = Digest("sha256:" + "b" * 64)
KEY = public_key_of(ec.generate_private_key(ec.SECP256R1()), "test.pub")


class Verdict(PredicateModel):
    ok: bool
    at: str
    note: str = ""


SIGNED = Signed("https://t/verdict/v1", Verdict, "at", "verdict")


def _collected(predicate: dict[str, object]) -> Collected:
    statement = Statement((), SIGNED.predicate_type, predicate)
    return Collected("test", (VerifiedAttestation(DIGEST, statement, KEY),), ())


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
