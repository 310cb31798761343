"""What the gate's tests share: predicates made to order, statements signed and attached as
a signer with push rights would, attestations tampered with as anyone with push rights
could, and `imagekit verify` run as a user runs it."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from imagekit.attest.attach import attest
from imagekit.attest.cosign_tags import att_tag
from imagekit.attest.keys import KeyPairFiles
from imagekit.attest.signer import KeyFileSigner
from imagekit.cli import main
from imagekit.kinds.audit import AUDIT_V1, AuditPredicate, AuditVulnerabilities
from imagekit.refs import Digest, Reference
from imagekit.registry import RegistryClient
from tests.support.images import Writer
from tests.support.media_types import OCI_MANIFEST
from tests.support.registries import RunningRegistry


def rfc3339(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def audit_predicate(
    status: str = "CPU_PASS",
    *,
    findings: int = 0,
    fixable: int = 0,
    age: timedelta = timedelta(),
    at: str | None = None,
    platform: str = "linux/amd64",
    scan: str | None = None,
) -> dict[str, Any]:
    """An audit's predicate: STATUS, signed AGE ago (or AT, written as given), of PLATFORM,
    its scan FINDINGS (FIXABLE of them with a fix), its scan status SCAN where given."""
    return AuditPredicate(
        status=status,
        status_sentence=f"{status} (test)",
        scope="CPU-only checks, no weights loaded, no GPU test",
        profile="generic",
        platform=platform,
        emulated=False,
        checks=[],
        failing=[],
        deferred=[],
        skipped=[],
        vulnerabilities=AuditVulnerabilities(
            status=scan or ("findings" if findings else "clean"),
            findings=findings,
            fixable=fixable,
            finding_ids=[f"PYSEC-{n}" for n in range(findings)],
        ),
        evidence={},
        audited_at=at or rfc3339(datetime.now(UTC) - age),
        imagekit_version="test",
    ).model_dump(mode="json")


def sign_onto(
    image: Reference,
    pair: KeyPairFiles,
    predicate: dict[str, Any],
    kind: str = AUDIT_V1,
    subjects: Sequence[Digest] = (),
) -> Digest:
    """PREDICATE signed with PAIR's key about IMAGE (and SUBJECTS), attached as imagekit
    attaches; the envelope's digest."""
    assert image.digest is not None
    signer = KeyFileSigner.from_file(pair.private)
    with RegistryClient() as client:
        made = attest(client, image, [image.digest, *subjects], kind, predicate, signer)
    return made.envelope_digest


def verify(reference: str, *args: str) -> tuple[int, dict[str, Any]]:
    """`imagekit verify --json REFERENCE ARGS...`: its exit code and its one document."""
    result = CliRunner().invoke(main, ["verify", "--json", reference, *args])
    return result.exit_code, json.loads(result.stdout)


def verify_refused(reference: str, *args: str) -> str:
    """`imagekit verify REFERENCE ARGS...` refused as bad input (exit 2): its one line."""
    result = CliRunner().invoke(main, ["verify", reference, *args])
    assert result.exit_code == 2, result.output
    return result.stderr


def failing(document: dict[str, Any]) -> dict[str, str]:
    """The requirements a verify document says do not hold, each with why."""
    return {r["requirement"]: r["why"] for r in document["requirements"] if not r["held"]}


def keys_args(*paths: Path) -> list[str]:
    return [arg for path in paths for arg in ("--key", str(path))]


def rewrite_att(
    registry: RunningRegistry, image: Reference, target: Digest, edit: Callable[[bytes], bytes]
) -> None:
    """As a tamperer with push rights would: change the envelope blob, and point the .att
    tag of TARGET at a manifest naming the changed blob."""
    assert image.digest is not None
    repo = image.repository
    with Writer(registry.host) as writer:
        manifest = json.loads(writer.get_manifest(repo, att_tag(image.digest)).content)
        layer = manifest["layers"][0]
        data = edit(writer.get_blob(repo, layer["digest"]))
        layer["digest"] = writer.blob(repo, data)
        layer["size"] = len(data)
        config = json.loads(writer.get_blob(repo, manifest["config"]["digest"]))
        config["rootfs"]["diff_ids"] = [layer["digest"]]
        config_bytes = json.dumps(config).encode()
        manifest["config"]["digest"] = writer.blob(repo, config_bytes)
        manifest["config"]["size"] = len(config_bytes)
        writer.manifest(repo, att_tag(target), json.dumps(manifest).encode(), OCI_MANIFEST)


def edit_payload(change: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    """For :func:`rewrite_att`: the envelope with CHANGE made to its payload, the signature
    left as it was (so it no longer matches)."""

    def edit(data: bytes) -> bytes:
        envelope = json.loads(data)
        payload = change(base64.b64decode(envelope["payload"]))
        envelope["payload"] = base64.b64encode(payload).decode()
        return json.dumps(envelope).encode()

    return edit
