"""`imagekit gpu-preflight`'s bad input: one line, exit 2, nothing run and nothing recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagekit.cli import main


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "manifests").mkdir()
    monkeypatch.chdir(tmp_path)
    for name in ("IMAGEKIT_ROOT", "IMAGEKIT_LEDGER", "IMAGEKIT_EVIDENCE_DIR", "IMAGEKIT_PLANS_DIR"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--host", "--gpus", "0"], "0 is not in the range x>=1"),
        (["--host", "--gpus", "eight"], "'eight' is not a valid integer"),
        (["--host", "--sizes", "1,x"], "not a list of sizes"),
        (["--host", "r.example/x@sha256:" + "a" * 64], "takes no image"),
        ([], "name the image to preflight"),
        (["r.example/x@sha256:" + "a" * 64, "--report", "job.log"], "--report and --pod"),
        (["--host", "--launcher-arg", "--no-python"], "rendezvous options"),
        (["--host", "--fault", "nope"], "--fault nope: not JSON"),
        (["--emit-job", "r.example/x:latest", "--gpus", "8"], "by digest"),
        (["--emit-job", "r.example/x@sha256:" + "a" * 64], "GPU count"),
    ],
)
def test_bad_input_is_exit_2_with_one_line_and_nothing_recorded(
    here: Path, argv: list[str], said: str
) -> None:
    result = CliRunner().invoke(main, ["gpu-preflight", *argv, "--json"])
    assert result.exit_code == 2, result.output
    document = json.loads(result.stdout)
    assert said in json.dumps(document)
    assert not (here / "manifests" / "ledger.jsonl").exists()
    assert not (here / "evidence").exists() or not any((here / "evidence").rglob("*.json"))


def test_host_with_a_signing_key_is_refused_there_is_no_image(here: Path) -> None:
    key = here / "k.key"
    key.write_text("x")
    result = CliRunner().invoke(main, ["gpu-preflight", "--host", "--sign-key", str(key)])
    assert result.exit_code == 2 and "claims no image" in result.stderr


def test_a_report_that_is_not_the_probe_s_is_exit_2_and_nothing_recorded(here: Path) -> None:
    log = here / "job.log"
    log.write_text('@@IMAGEKIT_GPU_REPORT@@ {"probe": "mine", "status": "PASS"}\n')
    pod = here / "pod.json"
    pod.write_text(json.dumps({"kind": "Pod", "metadata": {"name": "p"}}))
    ref = "127.0.0.1:1/x@sha256:" + "a" * 64
    result = CliRunner().invoke(
        main, ["gpu-preflight", ref, "--report", str(log), "--pod", str(pod)]
    )
    assert result.exit_code == 2 and "not a report of imagekit's GPU probe" in result.stderr
    assert not (here / "manifests" / "ledger.jsonl").exists()


def test_the_emitted_job_is_one_json_document(here: Path) -> None:
    ref = "r.example/team/m3@sha256:" + "a" * 64
    result = CliRunner().invoke(
        main, ["gpu-preflight", ref, "--emit-job", "--gpus", "8", "--gpu-name", "H20", "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [item["kind"] for item in document["items"]] == ["ConfigMap", "Job"]
