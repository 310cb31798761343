"""The committed JSON schemas are the models' own: neither drifts from the other.

Every kind that signs a predicate of imagekit's own registers its model and schema file in
its spec (imagekit.kinds); a kind added there is checked here without an edit.
"""

from __future__ import annotations

import pytest

from imagekit.attest.predicates import SCHEMAS, schema_text
from imagekit.gate.policy import POLICY_V1, Policy
from imagekit.kinds import KINDS
from imagekit.kinds.spec import KindSpec

OWN = [spec for spec in KINDS if spec.predicate is not None and spec.predicate.model is not None]


@pytest.mark.parametrize("spec", OWN, ids=[spec.name for spec in OWN])
def test_the_committed_predicate_schema_is_the_model_s(spec: KindSpec) -> None:
    predicate = spec.predicate
    assert predicate is not None and predicate.model is not None and predicate.schema
    committed = (SCHEMAS / predicate.schema).read_text()
    assert committed == schema_text(predicate.model, predicate.uri), (
        f"regenerate imagekit/attest/schemas/{predicate.schema} from {predicate.model.__name__}"
    )


def test_every_schema_committed_is_a_kind_s_or_the_policy_s() -> None:
    named = {spec.predicate.schema for spec in OWN if spec.predicate is not None}
    assert {p.name for p in SCHEMAS.glob("*.json")} == named | {"policy-v1.schema.json"}


def test_the_committed_policy_schema_is_the_model_s() -> None:
    committed = (SCHEMAS / "policy-v1.schema.json").read_text()
    assert committed == schema_text(Policy, POLICY_V1)
