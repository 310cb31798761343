"""The gate's result says how many keys it checked, and where each came from."""

from __future__ import annotations

from imagekit.gate.verify import GateResult
from imagekit.refs import Digest


def _result(keys: tuple[str, ...], given: int | None) -> GateResult:
    return GateResult(
        reference="r/x@sha256:" + "a" * 64,
        digest=Digest("sha256:" + "a" * 64),
        policy="policy.yaml",
        requirements=(),
        verified=(),
        skipped=(),
        source="r/x's .att tag",
        keys=keys,
        given=given,
    )


def test_the_keys_are_counted_as_given_and_as_the_policy_names_them() -> None:
    # `--key other.pub` with a policy naming keys/ci.pub: one given, one named.
    scope = _result(("other.pub", "keys/ci.pub"), given=1).scope
    assert "signed by 1 key given and 1 the policy names;" in scope
    assert "2 key(s) given" not in scope
    assert "signed by 2 keys given;" in _result(("a.pub", "b.pub"), given=2).scope
    assert "signed by 0 keys given and 1 the policy names;" in _result(("c.pub",), 0).scope
