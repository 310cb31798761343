"""Policy files: what they may say, and bad input named with the file and the key."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.attest.keys import generate_key_pair
from imagekit.attest.policy import DEFAULT_POLICY, PASSING, age_seconds, load_policy, requirement
from imagekit.errors import PolicyError
from tests.support.bounded_cli import run_bounded


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
        # Hostile policy files: a crash, a silent overwrite, a policy
        # that would refuse every image without naming why.
        pytest.param("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels", id="deep"),
        (
            "audit:\n  status: [CPU_PASS]\n  status: [CPU_CHECK_INCOMPLETE]\n",
            "the key 'status' appears twice (lines 2 and 3)",
        ),
        ("version: 1\nvulnerabilities: none\nvulnerabilities: null\n", "the key 'vulnerabilities'"),
        ("audit: null\n", "this policy requires nothing"),
        ("audit: null\nvulnerabilities: null\nprovenance: null\n", "this policy requires nothing"),
        # Values YAML types otherwise than as text (each was an AttributeError, exit 70), a
        # misspelled status (it failed closed, silently) and `version: true` (taken as 1).
        (
            "audit: {max_age: 30}\n",
            "audit.max_age: Value error, an age is text such as 90m, 24h or 7d, not the number 30",
        ),
        ("audit: {max_age: 1.5}\n", "not the number 1.5"),
        ("audit: {max_age: no}\n", "not the boolean false"),
        ("audit: {max_age: 2026-01-01}\n", "not the date 2026-01-01"),
        ("audit: {max_age: [7d]}\n", "not a list ['7d']"),
        ("vulnerabilities: {findings: none, max_age: 30}\n", "vulnerabilities"),
        (
            "audit: {status: [CPU_PAS]}\n",
            "audit.status: Value error, 'CPU_PAS' is not one of "
            "the audit statuses: CPU_PASS, CPU_PASS_GPU_CLI_DEFERRED, CPU_CHECK_INCOMPLETE",
        ),
        (
            "version: true\naudit: {}\n",
            "version: Value error, the version is the number 1, not the boolean true",
        ),
    ],
)
def test_bad_policies_name_the_file_and_the_key(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert caught.value.exit_code == 2 and str(path) in caught.value.message
    assert said in caught.value.message


def test_a_policy_that_is_not_utf8_names_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"version: 1\n# caf\xe9\naudit: {}\n")
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert caught.value.message == (
        f"{path}: not YAML (not UTF-8 text, byte 0xe9 at offset 16: invalid continuation byte)"
    )


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: os.mkfifo(p), "the policy file is a FIFO, not a regular file"),
        (lambda p: p.symlink_to("/dev/zero"), "the policy file is a character device (a symbolic "
         "link to /dev/zero), not a regular file"),
        (lambda p: p.write_bytes(b"audit:\n  status:\n" + b"    - CPU_PASS\n" * 100_000),
         "the policy file is 1500017 bytes, more than the 1 MiB imagekit reads of one"),
        (lambda p: p.write_text("audit: null\n"), "this policy requires nothing"),
    ],
)  # fmt: skip
def test_verify_refuses_a_policy_file_it_cannot_use_before_any_registry(
    tmp_path: Path, make: Callable[[Path], None], said: str
) -> None:
    """Exit 2 naming the file, before the registry (nothing listens at port 9) is asked;
    a FIFO once blocked forever, /dev/zero was read until the kernel killed imagekit."""
    pair = generate_key_pair(tmp_path / "k")
    policy = tmp_path / "policy.yaml"
    make(policy)
    done = run_bounded(
        "verify", f"127.0.0.1:9/x@sha256:{'0' * 64}", "--key", str(pair.public),
        "--policy", str(policy),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"{policy}: {said}" in done.stderr
