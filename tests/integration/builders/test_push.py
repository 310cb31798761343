"""imagekit/builders/push.py: an engine image pushed, its push record appended, and what was
signed for the pushed digest attached only after that record (sign, record, then attach)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from imagekit.attest.attach import Prepared, prepare_reference
from imagekit.attest.keys import generate_key_pair
from imagekit.attest.signer import KeyFileSigner
from imagekit.builders.push import push_and_record
from imagekit.errors import RecordRefused
from imagekit.kinds.push import SLSA_PROVENANCE_V1
from imagekit.refs import parse_reference
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.base_image import ensure_local_image
from tests.support.registries import RunningRegistry
from tests.support.upstream import tags

REPOSITORY = "imagekit-test/torn-push"


def test_a_push_whose_record_is_refused_attaches_nothing(
    engine: Engine, registry: RunningRegistry, workspace: Workspace, tmp_path: Path
) -> None:
    """The ledger refuses the push record (its last line is torn): the image is pushed, but
    what was signed for its digest must not reach the registry (no .att tag)."""
    signer = KeyFileSigner.from_file(generate_key_pair(tmp_path / "push").private)
    local = ensure_local_image(engine.client_path)
    signed: list[Prepared] = []

    def attest(pushed: str) -> dict[str, Prepared]:
        prepared = prepare_reference(
            signer, parse_reference(pushed), SLSA_PROVENANCE_V1, {"buildType": "test"}
        )
        signed.append(prepared)
        return {"attestation": prepared}

    workspace.ledger_path.parent.mkdir(parents=True, exist_ok=True)
    workspace.ledger_path.write_bytes(b'{"seq": 1, "torn')
    log = tmp_path / "push.log"
    log.write_text("")
    try:
        with pytest.raises(RecordRefused):
            push_and_record(
                workspace, engine, local, f"{registry.host}/{REPOSITORY}", log,
                plan="demo", image_id="sha256:" + "0" * 64, attest=attest,
            )  # fmt: skip
        [prepared] = signed
        assert prepared.envelope is not None and prepared.subjects, prepared.problem
        held = tags(registry.host, REPOSITORY)
        assert held, "the image itself was pushed"
        for subject in prepared.subjects:
            assert f"sha256-{subject.hex}.att" not in held, held
    finally:
        remote = f"{registry.host}/{REPOSITORY}:{local.rpartition(':')[2]}"
        subprocess.run([engine.client_path, "rmi", remote], check=False, capture_output=True)
