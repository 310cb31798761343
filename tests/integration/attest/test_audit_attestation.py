"""`imagekit audit --sign-key`: the verdict signed and stored beside the image, the ledger
record carrying its digest; a registry that refuses the push is exit 3 with the verdict,
its evidence and its record (naming the envelope that was to be attached) kept; a record
the ledger refuses means nothing is attached (sign, record, then attach)."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from imagekit.attest.keys import generate_key_pair
from imagekit.audit.stage import AuditRequest, audit
from imagekit.errors import NotAttested, RecordRefused
from imagekit.kinds.audit import AUDIT_V1
from imagekit.kinds.vulnerability_scan import COSIGN_VULN_V1
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage, push_base
from tests.support.gotools import cosign_verify_attestation
from tests.support.registries import RunningRegistry, start_registry
from tests.support.upstream import tags


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


def test_a_registry_that_refuses_the_push_is_exit_3_after_the_record_naming_the_envelope(
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
        assert kept.attestation is not None  # type: ignore[attr-defined]
        assert kept.attestation.attestation is None  # type: ignore[attr-defined]
        assert "405" in str(kept.attestation.problem), kept.attestation  # type: ignore[attr-defined]
        assert str(caught.value).startswith("not attested: ") and "405" in str(caught.value)
        # the record was written before the push: it names the envelope that was refused
        assert said.startswith("sha256:"), said
    finally:
        readonly.stop()
        subprocess.run([engine.client_path, "rmi", reference], check=False, capture_output=True)


def test_a_verdict_whose_record_is_refused_is_never_attached(
    engine: Engine, registry: RunningRegistry, workspace: Workspace, tmp_path: Path
) -> None:
    """Sign after record: the ledger refuses the audit's record (its last line is torn), so
    neither signed statement (the verdict, the scan) reaches the registry: no .att tag."""
    image = push_base(engine.client_path, registry.host, "attest/torn-ledger")
    workspace.ledger_path.parent.mkdir(parents=True, exist_ok=True)
    workspace.ledger_path.write_bytes(b'{"seq": 1, "torn')
    pair = generate_key_pair(tmp_path / "torn")
    request = AuditRequest(ref=image.reference, offline=True, sign_key=pair.private)
    try:
        with pytest.raises(RecordRefused) as caught:
            audit(workspace, request, engine=engine)
        kept = caught.value.result
        assert kept is not None and kept.verdict.status  # type: ignore[attr-defined]
        assert f"sha256-{image.digest.partition(':')[2]}.att" not in tags(
            registry.host, image.repository
        )
        assert kept.attestation is None  # type: ignore[attr-defined]
    finally:
        subprocess.run(
            [engine.client_path, "rmi", image.reference], check=False, capture_output=True
        )
