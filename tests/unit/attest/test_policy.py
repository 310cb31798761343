"""Policy files: what they may say, and bad input named with the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.attest.policy import DEFAULT_POLICY, PASSING, age_seconds, load_policy, requirement
from imagekit.errors import PolicyError


def test_the_default_asks_for_a_passing_audit_only() -> None:
    audit = requirement(DEFAULT_POLICY, "audit")
    assert audit is not None and audit.status == PASSING
    assert requirement(DEFAULT_POLICY, "vulnerabilities") is None
    assert requirement(DEFAULT_POLICY, "provenance") is None
    assert requirement(DEFAULT_POLICY, "gpu_preflight") is None


def test_a_policy_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "version: 1\naudit:\n  status: [CPU_PASS]\n  max_age: 24h\nvulnerabilities: none\n"
    )
    policy = load_policy(path)
    audit = requirement(policy, "audit")
    assert audit is not None and audit.status == ("CPU_PASS",)
    assert age_seconds("24h") == 86400 and requirement(policy, "vulnerabilities") == "none"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("version: 2\n", "version"),
        ("audit:\n  max_age: soon\n", "audit.max_age"),
        ("vulnerabilities: few\n", "vulnerabilities"),
        ("audit:\n  status: []\n", "audit.status"),
        ("[unclosed\n", "not YAML"),
    ],
)
def test_bad_policies_name_the_file_and_the_key(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert caught.value.exit_code == 2 and str(path) in caught.value.message
    assert said in caught.value.message
