"""The committed JSON schemas are the models' own: neither drifts from the other."""

from __future__ import annotations

from imagekit.attest.predicates import AUDIT_V1, SCHEMAS, AuditPredicate, schema_text


def test_the_committed_audit_schema_is_the_model_s() -> None:
    committed = (SCHEMAS / "audit-v1.schema.json").read_text()
    assert committed == schema_text(AuditPredicate, AUDIT_V1), (
        "regenerate imagekit/attest/schemas/audit-v1.schema.json from AuditPredicate"
    )


def test_the_committed_policy_schema_is_the_model_s() -> None:
    from imagekit.attest.policy import Policy
    from imagekit.attest.predicates import POLICY_V1

    committed = (SCHEMAS / "policy-v1.schema.json").read_text()
    assert committed == schema_text(Policy, POLICY_V1)


def test_the_committed_mirror_schema_is_the_model_s() -> None:
    from imagekit.attest.predicates import MIRROR_V1, MirrorPredicate

    committed = (SCHEMAS / "mirror-verification-v1.schema.json").read_text()
    assert committed == schema_text(MirrorPredicate, MIRROR_V1)


def test_the_committed_final_pull_schema_is_the_model_s() -> None:
    from imagekit.attest.predicates import FINAL_PULL_V1, FinalPullPredicate

    committed = (SCHEMAS / "final-pull-v1.schema.json").read_text()
    assert committed == schema_text(FinalPullPredicate, FINAL_PULL_V1)
