"""Every signed mirror binding is followed, each one level deep."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from imagekit.attest.keys import KeyPairFiles, generate_key_pair
from imagekit.mirror import MirrorOptions, mirror
from imagekit.refs import parse_reference
from imagekit.workspace import Workspace
from tests.support.gate import audit_predicate, failing, sign_onto, verify
from tests.support.images import Blob, M, Writer
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
