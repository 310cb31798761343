"""What several kinds' details share: the ``attestation`` field, said once."""

from __future__ import annotations

from imagekit.kinds.audit import AuditDetails
from imagekit.kinds.build import BuildDetails
from imagekit.kinds.details import RecordDetails, attestation_field


class Signed(RecordDetails):
    attestation: str | None = attestation_field("the verdict attestation")


def test_the_attestation_field_says_what_was_signed_and_when() -> None:
    assert Signed.model_fields["attestation"].description == (
        "with --sign-key: the verdict attestation's envelope digest, or 'not attested: WHY'"
    )
    assert Signed().attestation is None and Signed().to_json() == {}
    assert Signed(attestation="not attested: the registry said no").to_json() == {
        "attestation": "not attested: the registry said no"
    }


def test_a_kind_says_when_it_signs_and_what_more() -> None:
    build = BuildDetails.model_fields["attestation"].description or ""
    assert build.startswith("--buildkit/--buildx-builder with --sign-key (a build record with")
    audit = AuditDetails.model_fields["attestation"].description or ""
    assert audit.endswith("'not attested: WHY' when the registry did not take it")
