"""Trust per predicate type: a policy names which keys may sign which requirement and which
may sign the mirror bindings followed (as Kyverno's attestors and the policy-controller's
authorities do); --key alone keeps its meaning (any key given, any requirement). Key files
are read as Go's crypto/x509 reads them for cosign, one key a file. Every signed binding is
followed, each one level deep."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from imagekit.attest.keys import KeyPairFiles, generate_key_pair
from imagekit.mirror import MirrorOptions, mirror
from imagekit.refs import parse_reference
from imagekit.workspace import Workspace
from tests.support.gate import audit_predicate, failing, sign_onto, verify, verify_refused
from tests.support.images import Blob, M, Pushed, Writer
from tests.support.media_types import OCI_TAR
from tests.support.registries import RunningRegistry

AUDIT = "audit status in {CPU_PASS, CPU_PASS_GPU_CLI_DEFERRED}"


@pytest.fixture
def ci(tmp_path: Path) -> KeyPairFiles:
    (tmp_path / "keys").mkdir(exist_ok=True)
    return generate_key_pair(tmp_path / "keys" / "ci")


@pytest.fixture
def mirror_key(tmp_path: Path) -> KeyPairFiles:
    (tmp_path / "keys").mkdir(exist_ok=True)
    return generate_key_pair(tmp_path / "keys" / "mirror")


def _policy(tmp_path: Path, text: str) -> Path:
    """A policy file in a folder of its own: its key paths are relative to it."""
    folder = tmp_path / "policies"
    folder.mkdir(exist_ok=True)
    path = folder / "gate.yaml"
    path.write_text(text)
    return path


def test_a_key_only_the_mirror_job_holds_cannot_sign_audits(
    make_image: Callable[[str], Pushed], ci: KeyPairFiles, mirror_key: KeyPairFiles,
    tmp_path: Path,
) -> None:  # fmt: skip
    image = str(parse_reference(make_image("gate/trust").reference))
    sign_onto(parse_reference(image), mirror_key, audit_predicate())
    # --key alone: any key given may sign any requirement, as before
    assert verify(image, "--key", str(ci.public), "--key", str(mirror_key.public))[0] == 0
    policy = _policy(
        tmp_path,
        "version: 1\naudit:\n  keys: [../keys/ci.pub]\n"
        "mirror_binding:\n  keys: [../keys/mirror.pub]\n",
    )
    code, document = verify(image, "--key", str(mirror_key.public), "--policy", str(policy))
    assert code == 1, document
    why = failing(document)[AUDIT]
    assert why.startswith("no audit attestation signed by the keys given")
    assert (
        f"1 more signed by key(s) the policy does not trust for audit ({mirror_key.public})" in why
    )
    # signed by the key the policy names, it holds, with no --key at all
    sign_onto(parse_reference(image), ci, audit_predicate(age=-timedelta(seconds=2)))
    code, document = verify(image, "--policy", str(policy))
    assert code == 0, document
    assert document["attestations"][-1]["key"].endswith("ci.pub")


def test_key_files_a_policy_names_are_its_own_and_checked(
    make_image: Callable[[str], Pushed], ci: KeyPairFiles, tmp_path: Path
) -> None:
    image = str(parse_reference(make_image("gate/keyfiles").reference))
    missing = _policy(tmp_path, "version: 1\naudit:\n  keys: [../keys/nobody.pub]\n")
    said = verify_refused(image, "--policy", str(missing))
    assert "audit.keys[0]" in said and "nobody.pub" in said and "cannot read it" in said
    private = _policy(tmp_path, "version: 1\naudit:\n  keys: [../keys/ci.key]\n")
    assert "is a private key" in verify_refused(image, "--policy", str(private))
    nothing = _policy(tmp_path, "version: 1\naudit:\n  status: [CPU_PASS]\n")
    said = verify_refused(image, "--policy", str(nothing))
    assert "give at least one --key" in said and "names no keys for audit" in said


def test_a_key_file_of_two_keys_is_refused(
    make_image: Callable[[str], Pushed], ci: KeyPairFiles, mirror_key: KeyPairFiles,
    tmp_path: Path,
) -> None:  # fmt: skip
    """cosign would read the first key alone; whoever wrote the second meant it to count."""
    image = str(parse_reference(make_image("gate/twokeys").reference))
    both = tmp_path / "both.pub"
    both.write_bytes(ci.public.read_bytes() + mirror_key.public.read_bytes())
    said = verify_refused(image, "--key", str(both))
    assert "holds 2 PEM blocks; a key file holds one key" in said


def test_every_signed_mirror_binding_is_followed(
    registry: RunningRegistry, ci: KeyPairFiles, mirror_key: KeyPairFiles,
    workspace: Workspace, tmp_path: Path,
) -> None:  # fmt: skip
    """The copy is bound to two sources of the same content; the older binding's source
    passed, the other's newer audit failed. Following the first binding alone would pass."""
    members = [M("app/model.txt", data=b"weights, not really " * 500)]
    with Writer(registry.host) as writer:
        first = writer.image("trust/src-a", "v1", [Blob.gzip(members)])
        layer = Blob.gzip(members)
        plain = Blob(layer.tar, layer.tar, OCI_TAR)
        second = writer.image("trust/src-b", "v1", [plain], config_bytes=first.config)
        copy = writer.image("trust/copy", "v1", [Blob.zstd(members)], config_bytes=first.config)
    options = MirrorOptions(sign_key=mirror_key.private)
    for source in (first, second):
        report = mirror(source.reference, copy.reference, options=options, workspace=workspace)
        assert str(report.verdict) == "content-identical", report.message
    sign_onto(parse_reference(first.reference), ci, audit_predicate(age=timedelta(hours=2)))
    failed = audit_predicate("CPU_CHECK_INCOMPLETE", age=timedelta(hours=1))
    sign_onto(parse_reference(second.reference), ci, failed)
    keys = ["--key", str(ci.public), "--key", str(mirror_key.public)]
    code, document = verify(copy.reference, *keys)
    assert code == 1, document
    assert "status CPU_CHECK_INCOMPLETE" in failing(document)[AUDIT]
    assert document["binding"].count("content-identical to") == 2
    # a policy that trusts only the CI key for bindings follows neither
    policy = _policy(tmp_path, "version: 1\nmirror_binding:\n  keys: [../keys/ci.pub]\n")
    code, document = verify(copy.reference, *keys, "--policy", str(policy))
    assert code == 1 and document["binding"] is None
    assert failing(document)[AUDIT].startswith("no audit attestation")
