"""The final pull against a real loopback registry through the real engine."""

from __future__ import annotations

import json
import subprocess

import pytest

from imagekit.ledger import read_records, verify
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.tiny_image import TinyImage, docker, run_imagekit

pytestmark = pytest.mark.integration


def _image_present(engine: Engine, ref: str) -> bool:
    result = subprocess.run(
        [engine.client_path, "image", "inspect", ref], capture_output=True, check=False
    )
    return result.returncode == 0


def test_final_pull_records_the_engine_image_id(
    engine: Engine, tiny_image: TinyImage, workspace: Workspace
) -> None:
    ref = f"{tiny_image.repository}@{tiny_image.digest}"
    assert not _image_present(engine, ref)
    result = run_imagekit(
        "pull", ref, "--record", "--plan", "tiny", "--where", "loopback", "--json"
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["status"] == "verified"
    assert _image_present(engine, ref)
    local_id = docker(engine, "image", "inspect", "--format", "{{.Id}}", ref)
    assert document["image_id"] == local_id
    expected_id = (
        tiny_image.digest if engine.image_store == "containerd" else tiny_image.config_digest
    )
    assert local_id == expected_id

    (record,) = read_records(workspace.ledger_path)
    assert record.kind == "final-pull" and record.status == "verified" and record.plan == "tiny"
    assert record.images == {"image": ref}
    assert record.details["image_id"] == expected_id
    assert record.details["image_store"] == engine.image_store
    assert record.details["engine_version"] == engine.server_version
    assert record.details["expected_config_digest"] == tiny_image.config_digest
    assert f"{tiny_image.repository}@{tiny_image.digest}" in record.details["repo_digests"]
    assert record.details["where"] == "loopback"
    assert record.evidence is not None
    assert (workspace.root / record.evidence.path).is_file()
    assert verify(workspace).ok

    lock = run_imagekit("ledger", "lock", "--json")
    assert lock.returncode == 0, lock.stderr
    # No build was recorded for "tiny", so the pull cannot be tied to a prepared image.
    assert json.loads(lock.stdout)["lock"]["images"]["tiny"]["final_pull"] == "not-recorded"


def test_final_pull_fails_on_a_wrong_expected_digest(
    engine: Engine, tiny_image: TinyImage, workspace: Workspace
) -> None:
    wrong = "sha256:" + "0" * 64
    tagged = f"{tiny_image.repository}:{tiny_image.tag}"
    result = run_imagekit("pull", tagged, "--expect-digest", wrong, "--record", "--json")
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert document["status"] == "mismatch" and document["ok"] is False
    failed = {c["name"] for c in document["checks"] if not c["ok"]}
    assert {"registry digest", "engine RepoDigests"} <= failed
    (record,) = read_records(workspace.ledger_path)
    assert record.status == "mismatch" and record.kind == "final-pull"
    assert record.details["expected_manifest_digest"] == wrong

    # The right digest for the same tag passes and is a new record; the failure stays.
    good = run_imagekit("pull", tagged, "--expect-digest", tiny_image.digest, "--record")
    assert good.returncode == 0, good.stderr
    assert [r.status for r in read_records(workspace.ledger_path)] == ["mismatch", "verified"]


def test_a_tag_without_digest_is_refused(tiny_image: TinyImage, workspace: Workspace) -> None:
    result = run_imagekit("pull", f"{tiny_image.repository}:v1", "--record", "--json")
    assert result.returncode == 2
    assert "not pinned by digest" in json.loads(result.stdout)["error"]["message"]
    assert not workspace.ledger_path.exists()


def test_final_pull_of_the_base_image(
    engine: Engine, base_image: BaseImage, workspace: Workspace
) -> None:
    result = run_imagekit("pull", base_image.reference, "--record", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["status"] == "verified"
    local_id = docker(engine, "image", "inspect", "--format", "{{.Id}}", base_image.reference)
    assert document["image_id"] == local_id
    (record,) = read_records(workspace.ledger_path)
    assert record.details["image_id"] == local_id
    assert record.images["image"] == base_image.reference


def test_a_final_pull_onto_a_duplicated_tail_is_reported_and_not_recorded(
    tiny_image: TinyImage, workspace: Workspace
) -> None:
    ref = f"{tiny_image.repository}@{tiny_image.digest}"
    first = run_imagekit("pull", ref, "--record", "--json")
    assert first.returncode == 0, first.stderr
    line = workspace.ledger_path.read_bytes()
    workspace.ledger_path.write_bytes(line + line)  # the one record, duplicated
    again = run_imagekit("pull", ref, "--record", "--json")
    assert again.returncode == 1, again.stderr
    document = json.loads(again.stdout)
    assert document["status"] == "verified" and document["evidence"]
    assert "duplicated" in document["ledger_refused"]["message"]
    assert workspace.ledger_path.read_bytes() == line + line
