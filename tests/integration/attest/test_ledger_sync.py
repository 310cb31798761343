"""`imagekit ledger sync`: a final pull attested in a separate workspace (a node) lands in
the main ledger, verified, marked as imported with the key that signed it; once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagekit.attest.keys import generate_key_pair
from imagekit.ledger import read_records, verify
from imagekit.workspace import Workspace
from tests.support.tiny_image import TinyImage, run_imagekit


def test_a_final_pull_attested_elsewhere_is_imported_once(
    tiny_image: TinyImage,
    workspace: Workspace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node_key = generate_key_pair(tmp_path / "node")
    stranger = generate_key_pair(tmp_path / "stranger")
    ref = tiny_image.pinned
    # the main ledger knows the image (an unsigned pull recorded here)
    here = run_imagekit("pull", ref, "--record", "--where", "build-host")
    assert here.returncode == 0, here.stderr
    # a node, with a ledger of its own, pulls, records and signs
    node_ledger = tmp_path / "node-ledger.jsonl"
    with monkeypatch.context() as env:
        env.setenv("IMAGEKIT_LEDGER", str(node_ledger))
        env.setenv("IMAGEKIT_EVIDENCE_DIR", str(tmp_path / "node-evidence"))
        there = run_imagekit(
            "pull", ref, "--record", "--where", "node-7", "--sign-key", str(node_key.private)
        )
        assert there.returncode == 0, there.stderr
    (node_record,) = read_records(node_ledger)

    refused = run_imagekit("ledger", "sync", "--key", str(stranger.public), "--json")
    assert refused.returncode == 0, refused.stderr
    assert json.loads(refused.stdout)["imported"] == []

    synced = run_imagekit("ledger", "sync", "--key", str(node_key.public), "--json")
    assert synced.returncode == 0, synced.stderr
    (item,) = json.loads(synced.stdout)["imported"]
    assert (
        item["kind"] == "final-pull" and item["attestation"] == node_record.details["attestation"]
    )
    records = read_records(workspace.ledger_path)
    imported = records[-1]
    assert imported.kind == "final-pull" and imported.details["where"] == "node-7"
    assert imported.details["imported"].startswith("imported: signed by sha256:")
    assert str(node_key.public) in imported.details["imported"]
    assert verify(workspace).ok

    again = run_imagekit("ledger", "sync", "--key", str(node_key.public), "--json")
    document = json.loads(again.stdout)
    assert document["imported"] == [] and document["already_in_ledger"] == 1
