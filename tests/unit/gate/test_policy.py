"""Policy files: what they may say, and bad input named with the file and the key."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.attest.keys import generate_key_pair
from imagekit.errors import PolicyError
from imagekit.gate.policy import DEFAULT_POLICY, PASSING, age_seconds, load_policy
from imagekit.kinds.audit import AUDIT_POLICY
from imagekit.kinds.gpu_preflight import GPU_PREFLIGHT_POLICY
from imagekit.kinds.push import PROVENANCE_POLICY
from imagekit.kinds.vulnerability_scan import VULNERABILITIES_POLICY
from tests.support.bounded_cli import run_bounded


def test_the_default_asks_for_a_passing_audit_only() -> None:
    audit = AUDIT_POLICY.value(DEFAULT_POLICY)
    assert audit is not None and audit.status == PASSING
    assert VULNERABILITIES_POLICY.value(DEFAULT_POLICY) is None
    assert PROVENANCE_POLICY.value(DEFAULT_POLICY) is None
    assert GPU_PREFLIGHT_POLICY.value(DEFAULT_POLICY) is None


def test_a_policy_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "version: 1\naudit:\n  status: [CPU_PASS]\n  max_age: 24h\nvulnerabilities: none\n"
    )
    policy = load_policy(path)
    audit = AUDIT_POLICY.value(policy)
    assert audit is not None and audit.status == ("CPU_PASS",)
    assert age_seconds("24h") == 86400 and VULNERABILITIES_POLICY.value(policy) == "none"


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
        # Values of the wrong type: one line naming the key, never a crash.
        ("audit:\n  max_age: 30\n", "audit.max_age: an age is text"),
        ("gpu_preflight:\n  max_age: 1.5\n", "gpu_preflight.max_age: an age is text"),
        ("gpu_preflight:\n  max_age: no\n", "gpu_preflight.max_age"),
        ("gpu_preflight:\n  max_age: 2026-12-01\n", "gpu_preflight.max_age"),
        ("gpu_preflight:\n  max_age: [7d]\n", "gpu_preflight.max_age"),
        ("gpu_preflight:\n  gpu_name: H20(\n", "gpu_name 'H20(' is not a regular expression"),
        (
            "gpu_preflight:\n  status: [GPU_PREFLIGHT_PAS]\n",
            "'GPU_PREFLIGHT_PAS' is not a status of gpu-preflight",
        ),
        ("gpu_preflight:\n  min_gpus: true\n", "gpu_preflight.min_gpus"),
        ("gpu_preflight:\n  min_gpus: '8'\n", "gpu_preflight.min_gpus"),
        ("gpu_preflight:\n  min_gpus: 100000000\n", "gpu_preflight.min_gpus"),
        # Values YAML types otherwise than as text (each was an AttributeError, exit 70), a
        # misspelled status (it failed closed, silently) and `version: true` (taken as 1).
        (
            "audit: {max_age: 30}\n",
            "audit.max_age: an age is text such as 90m, 24h or 7d, not the number 30",
        ),
        ("audit: {max_age: 1.5}\n", "not the number 1.5"),
        ("audit: {max_age: no}\n", "not the boolean false"),
        ("audit: {max_age: 2026-01-01}\n", "not the date 2026-01-01"),
        ("audit: {max_age: [7d]}\n", "not a list ['7d']"),
        ("vulnerabilities: {findings: none, max_age: 30}\n", "vulnerabilities"),
        (
            "audit: {status: [CPU_PAS]}\n",
            "audit.status[0]: 'CPU_PAS' is not a status of audit",
        ),
        (
            "version: true\naudit: {}\n",
            "version: the version is the number 1, not the boolean true",
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


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        (
            "audit:\n  status: [CPU_PASSED]\n",
            "audit.status[0]: 'CPU_PASSED' is not a status of audit (no image could ever meet it)",
            "did you mean 'CPU_PASS'?",
        ),
        (
            "gpu_preflight:\n  status: GPU_PREFLIGHT_PAS\n",
            "gpu_preflight.status[0]: 'GPU_PREFLIGHT_PAS' is not a status of gpu-preflight",
            "did you mean 'GPU_PREFLIGHT_PASS'?",
        ),
        ("audti:\n  status: [CPU_PASS]\n", "audti: unknown key", "did you mean 'audit'?"),
        ("audit:\n  max_ag: 7d\n", "audit.max_ag: unknown key", "did you mean 'max_age'?"),
        (
            "vulnerabilities: few\n",
            "vulnerabilities: 'few' is not one of 'none' or 'none-fixable'",
            "docs/ATTESTATIONS.md",
        ),
        ("audit: CPU_PASS\n", "audit: a mapping of keys is meant here", "docs/ATTESTATIONS.md"),
        (
            "gpu_preflight:\n  min_gpus: eight\n",
            "gpu_preflight.min_gpus: a whole number is meant here, not 'eight'",
            "docs/ATTESTATIONS.md",
        ),
    ],
)
def test_a_mistake_in_a_policy_is_said_in_plain_words_with_the_nearest_word(
    tmp_path: Path, text: str, message: str, hint: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert caught.value.exit_code == 2
    assert caught.value.message.startswith(f"{path}: {message}"), caught.value.message
    assert hint in (caught.value.hint or "")
    for pydantic_words in ("Input should be", "Extra inputs", "valid tuple", "literal["):
        assert pydantic_words not in caught.value.diagnostics()


def test_one_value_where_a_list_is_meant_is_a_list_of_one(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    keys = tmp_path / "keys"
    keys.mkdir()
    generate_key_pair(keys / "ci")
    path.write_text("audit:\n  status: CPU_PASS\n  keys: keys/ci.pub\n")
    audit = AUDIT_POLICY.value(load_policy(path))
    assert audit is not None
    assert audit.status == ("CPU_PASS",) and audit.keys == ("keys/ci.pub",)
