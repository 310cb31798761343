"""`imagekit pull --record --sign-key`: the verified final pull signed beside the image
(runtime, store, image ID, node), its record carrying the attestation's digest; a record
the ledger refuses means nothing is attached (sign, record, then attach)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from imagekit.attest.keys import generate_key_pair
from imagekit.kinds.final_pull import FINAL_PULL_V1
from imagekit.ledger import read_records
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.gotools import cosign_verify_attestation
from tests.support.registries import RunningRegistry
from tests.support.tiny_image import TinyImage, run_imagekit
from tests.support.upstream import tags


def test_a_verified_final_pull_is_attested(
    engine: Engine, tiny_image: TinyImage, workspace: Workspace, tmp_path: Path
) -> None:
    pair = generate_key_pair(tmp_path / "node")
    ref = tiny_image.pinned
    result = run_imagekit(
        "pull", ref, "--record", "--where", "node-a", "--sign-key", str(pair.private), "--json"
    )
    assert result.returncode == 0, result.stderr
    (record,) = read_records(workspace.ledger_path)
    assert record.details["attestation"].startswith("sha256:")
    accepted = cosign_verify_attestation(ref, pair.public, FINAL_PULL_V1)
    assert accepted.returncode == 0, accepted.stderr
    envelope = json.loads(accepted.stdout.splitlines()[0])
    predicate = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    assert predicate["runtime"] == "engine" and predicate["node"] == "node-a"
    assert predicate["image_id"] == json.loads(result.stdout)["image_id"]
    assert predicate["status"] == "verified"


def test_sign_key_without_record_is_bad_input(tiny_image: TinyImage, tmp_path: Path) -> None:
    pair = generate_key_pair(tmp_path / "node")
    result = run_imagekit("pull", tiny_image.pinned, "--sign-key", str(pair.private))
    assert result.returncode == 2 and "give --record too" in result.stderr


def test_a_pull_whose_record_is_refused_is_never_attached(
    engine: Engine,
    tiny_image: TinyImage,
    registry: RunningRegistry,
    workspace: Workspace,
    tmp_path: Path,
) -> None:
    """Sign after record: the ledger refuses the record (its last line is torn), so the
    signed pull must not reach the registry (no .att tag)."""
    pair = generate_key_pair(tmp_path / "node")
    workspace.ledger_path.parent.mkdir(parents=True, exist_ok=True)
    workspace.ledger_path.write_bytes(b'{"seq": 1, "torn')
    result = run_imagekit(
        "pull", tiny_image.pinned, "--record", "--where", "node-a", "--sign-key",
        str(pair.private), "--json",
    )  # fmt: skip
    assert result.returncode != 0, result.stderr
    assert json.loads(result.stdout)["status"] == "verified"
    repository = tiny_image.repository.split("/", 1)[1]
    assert f"sha256-{tiny_image.digest.partition(':')[2]}.att" not in tags(
        registry.host, repository
    )
