"""`imagekit audit --sign-key`: the verdict signed and stored beside the image, the ledger
record carrying its digest; a registry that refuses the push is exit 3 with the verdict,
its evidence and a record saying "not attested" kept."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from imagekit.attest.keys import generate_key_pair
from imagekit.audit.stage import AuditRequest, audit
from imagekit.errors import NotAttested
from imagekit.kinds.audit import AUDIT_V1
from imagekit.kinds.vulnerability_scan import COSIGN_VULN_V1
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.gotools import cosign_verify_attestation
from tests.support.registries import RunningRegistry, start_registry


def _records(workspace: Workspace) -> list[dict[str, object]]:
    return [json.loads(line) for line in workspace.ledger_path.read_text().splitlines()]


def test_an_audit_attests_its_verdict_and_cosign_accepts_it(
    engine: Engine, base_image: BaseImage, workspace: Workspace, tmp_path: Path
) -> None:
    pair = generate_key_pair(tmp_path / "audit")
    request = AuditRequest(ref=base_image.reference, offline=True, sign_key=pair.private)
    result = audit(workspace, request, engine=engine)
    assert result.attestation is not None and result.attestation.attestation is not None
    stored = result.attestation.attestation
    assert str(stored.subjects[0]) == base_image.digest
    record = next(r for r in _records(workspace) if r["kind"] == "audit")
    assert record["details"]["attestation"] == str(stored.envelope_digest)  # type: ignore[index]
    accepted = cosign_verify_attestation(base_image.reference, pair.public, AUDIT_V1)
    assert accepted.returncode == 0, accepted.stderr
    envelope = json.loads(accepted.stdout.splitlines()[0])
    statement = json.loads(base64.b64decode(envelope["payload"]))
    predicate = statement["predicate"]
    assert predicate["status"] == result.verdict.status
    assert predicate["evidence"]["audit-report.json"].startswith("sha256:")
    assert statement["subject"][0]["digest"]["sha256"] == base_image.digest.split(":")[1]
    # the vulnerability scan, as cosign's own vuln predicate, on its own record
    assert result.vuln_attestation is not None and result.vuln_attestation.attestation
    scan_record = next(r for r in _records(workspace) if r["kind"] == "vulnerability-scan")
    vuln_digest = str(result.vuln_attestation.attestation.envelope_digest)
    assert scan_record["details"]["attestation"] == vuln_digest  # type: ignore[index]
    vuln = cosign_verify_attestation(base_image.reference, pair.public, "vuln")
    assert vuln.returncode == 0, vuln.stderr
    scan = json.loads(base64.b64decode(json.loads(vuln.stdout.splitlines()[0])["payload"]))
    assert scan["predicateType"] == COSIGN_VULN_V1
    assert scan["predicate"]["scanner"]["result"]["status"] == result.vulns.status


def test_a_registry_that_refuses_the_push_is_exit_3_and_the_record_says_not_attested(
    engine: Engine,
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    tmp_path: Path,
) -> None:
    readonly = start_registry(tmp_path / "ro", readonly=True, storage_of=registry.storage)
    try:
        repository = base_image.reference.split("/", 1)[1]
        reference = f"{readonly.host}/{repository}"
        pair = generate_key_pair(tmp_path / "refused")
        request = AuditRequest(ref=reference, offline=True, sign_key=pair.private)
        with pytest.raises(NotAttested) as caught:
            audit(workspace, request, engine=engine)
        assert caught.value.exit_code == 3
        kept = caught.value.result
        assert kept is not None and kept.verdict.status  # type: ignore[attr-defined]
        assert kept.report_path.is_file()  # type: ignore[attr-defined]
        record = next(r for r in _records(workspace) if r["kind"] == "audit")
        said = str(record["details"]["attestation"])  # type: ignore[index]
        assert said.startswith("not attested: ") and "405" in said, said
    finally:
        readonly.stop()
        subprocess.run([engine.client_path, "rmi", reference], check=False, capture_output=True)
