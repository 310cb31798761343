"""Exit codes come from the error class, as the command-line contract says."""

from __future__ import annotations

import pytest

from imagekit import errors


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (errors.ReferenceFormatError, 2),
        (errors.ProfileError, 2),
        (errors.BuildRejected, 1),
        (errors.LedgerBroken, 1),
        (errors.EngineUnavailable, 3),
        (errors.RetriesExhausted, 3),
    ],
)
def test_exit_codes_follow_the_contract(cls: type[errors.ImagekitError], code: int) -> None:
    assert cls.exit_code == code


def test_digest_mismatch_is_a_no_with_fields() -> None:
    exc = errors.DigestMismatch("bytes differ", expected="sha256:a", actual="sha256:b")
    assert exc.exit_code == 1
    assert exc.to_json()["expected"] == "sha256:a"
    assert exc.to_json()["actual"] == "sha256:b"


def test_plan_error_names_file_and_key() -> None:
    exc = errors.PlanError("must be pinned", path="manifests/x.yaml", key="base.reference")
    assert exc.message == "manifests/x.yaml: base.reference: must be pinned"
    assert exc.exit_code == 2


def test_diagnostics_carry_the_hint() -> None:
    exc = errors.RegistryUnauthorized("401 from r", registry="r", hint="docker login r")
    assert exc.diagnostics() == "401 from r\nhint: docker login r"
    assert exc.to_json()["registry"] == "r"
