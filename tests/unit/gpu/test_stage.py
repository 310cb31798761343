"""`imagekit gpu-preflight`'s bad input: one line, exit 2, nothing run and nothing recorded."""

from __future__ import annotations

import importlib.util
import json
import shutil
import socket
import stat
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from imagekit.cli import main
from imagekit.ledger import read_records
from tests.support.gpu_reports import encoded, log_of, report

REF = "r.example/team/m3@sha256:" + "a" * 64


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
        # Every numeric option and pattern checked where it is read, never on the GPU node.
        (["--host", "--timeout", "nan"], "--timeout nan: give a finite number"),
        (["--host", "--timeout", "inf"], "--timeout inf: give a finite number"),
        (["--host", "--sizes", "1,nan"], "--sizes nan"),
        (["--host", "--gpu-name", "H20("], "--gpu-name 'H20(' is not a regular expression"),
        (["--host", "--min-capability", "abc"], "--min-capability abc"),
        (["--host", "--min-memory-gib", "inf"], "--min-memory-gib inf"),
        (["--host", "--min-busbw", "nan"], "--min-busbw nan"),
        (["--host", "--launcher-arg=-m", "--launcher-arg=evil"], "--launcher-arg -m"),
        (["--host", "--launcher-arg=--nnodes"], "the option's value is missing"),
        (["--emit-job", REF, "--gpus", "8", "--timeout", "0.1"], "--timeout 0.1"),
        (["--emit-job", REF, "--gpus", "8", "--timeout", "inf"], "--timeout inf"),
        (["--emit-job", REF, "--gpus", "8", "--gpu-name", "H20("], "not a regular expression"),
        (
            [
                "--emit-job",
                REF,
                "--gpus",
                "8",
                "--node-selector",
                "zone=a",
                "--node-selector",
                "zone=b",
            ],
            "given twice",
        ),  # fmt: skip
        (["--emit-job", REF, "--gpus", "8", "--namespace", "ML"], "--namespace"),
        (["--emit-job", REF, "--gpus", "8", "--priority-class", "a b"], "--priority-class"),
        (["--cluster", "--host"], "not --host"),
        (["--cluster", REF, "--report", "j.log", "--pod", "p.json"], "no --report, --pod"),
        (
            ["--cluster", "--all-nodes", REF, "--gpus", "8", "--node", "n1"],
            "--all-nodes and --node",
        ),
        (["--all-nodes", REF, "--gpus", "8"], "it needs --cluster"),
        (["--cluster", "--all-nodes", REF, "--gpus", "8", "--emit-job"], "no --emit-job"),
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


def _nothing_written(here: Path) -> None:
    assert not (here / "manifests" / "ledger.jsonl").exists()
    assert not (here / "evidence").exists() or not any((here / "evidence").rglob("*"))


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d["ranks"][0].update(rank="zero"), "ranks.0.rank"),
        (lambda d: d["checks"]["gpus"].update(gpus="eight"), "checks.gpus.gpus"),
        (
            lambda d: d["checks"]["gpus"]["gpus"][0].update(memory_gib="lots"),
            "checks.gpus.gpus.0.memory_gib",
        ),  # fmt: skip
        (
            lambda d: d["checks"]["gpus"]["gpus"][0].update(numa_node="x"),
            "checks.gpus.gpus.0.numa_node",
        ),  # fmt: skip
        (lambda d: d["checks"]["all_reduce"].update(sizes={"x": 1}), "checks.all_reduce.sizes"),
    ],
)
def test_a_report_of_the_wrong_types_is_exit_2_before_any_evidence_or_record(
    here: Path, edit: Any, field: str
) -> None:
    document = report(8)
    edit(document)
    (here / "job.log").write_bytes(log_of(document))
    (here / "pod.json").write_text(json.dumps({"kind": "Pod", "metadata": {"name": "p"}}))
    result = CliRunner().invoke(
        main, ["gpu-preflight", "127.0.0.1:1/x@sha256:" + "a" * 64, "--report", "job.log",
               "--pod", "pod.json"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f": {field}:" in result.stderr and "Traceback" not in result.output
    _nothing_written(here)


def test_a_log_with_two_reports_is_exit_2_and_nothing_written(here: Path) -> None:
    failing = report(8)
    failing["checks"]["all_reduce"]["sizes"][0]["all_elements_right"] = False
    (here / "job.log").write_bytes(log_of(failing, report(8)))
    (here / "pod.json").write_text(json.dumps({"kind": "Pod", "metadata": {"name": "p"}}))
    result = CliRunner().invoke(
        main, ["gpu-preflight", "127.0.0.1:1/x@sha256:" + "a" * 64, "--report", "job.log",
               "--pod", "pod.json"],
    )  # fmt: skip
    assert result.exit_code == 2 and "carries 2 GPU probe reports" in result.stderr
    _nothing_written(here)


def test_a_report_is_read_with_the_same_cap_as_the_host_s_16_mib(here: Path) -> None:
    log = here / "job.log"
    with log.open("wb") as handle:
        handle.write(log_of(report(8)))
        handle.write(b"x" * (17 << 20))
    (here / "pod.json").write_text(json.dumps({"kind": "Pod", "metadata": {"name": "p"}}))
    result = CliRunner().invoke(
        main, ["gpu-preflight", "127.0.0.1:1/x@sha256:" + "a" * 64, "--report", "job.log",
               "--pod", "pod.json"],
    )  # fmt: skip
    assert result.exit_code == 2 and "16 MiB" in result.stderr, result.stderr
    _nothing_written(here)


def _stub_python(here: Path, document: dict[str, Any]) -> Path:
    """The attack: an "interpreter" that runs nothing and writes a PASS report where the
    launcher's --out points."""
    kept = here / "stub-report.json"
    kept.write_bytes(encoded(document))
    stub = here / "python-stub"
    stub.write_text(
        "#!/bin/sh\n"
        'while [ $# -gt 0 ]; do [ "$1" = --out ] && cp "' + str(kept) + '" "$2"; shift; done\n'
    )
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    return stub


def _path_without_nvidia_smi(here: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = here / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "cp"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def test_a_stub_interpreter_s_pass_on_a_host_with_no_nvidia_smi_is_incomplete(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = _stub_python(here, report(8, host=socket.gethostname()))
    _path_without_nvidia_smi(here, monkeypatch)
    result = CliRunner().invoke(main, ["gpu-preflight", "--host", "--python", str(stub), "--json"])
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document["status"] == "GPU_PREFLIGHT_INCOMPLETE"
    assert (
        "this host shows no GPU to imagekit (nvidia-smi is not on this host's PATH)"
        in (document["sentence"])
    )
    [record] = read_records(here / "manifests" / "ledger.jsonl")
    assert record.status == "GPU_PREFLIGHT_INCOMPLETE"


def test_a_report_claiming_gpus_this_host_does_not_show_is_refused_and_not_recorded(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = _stub_python(here, report(8, host=socket.gethostname()))
    bin_dir = _path_without_nvidia_smi(here, monkeypatch)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\necho '0, GPU-11111111-2222-3333-4444-555555555555, NVIDIA L4, 23034'\n"
    )
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    result = CliRunner().invoke(main, ["gpu-preflight", "--host", "--python", str(stub)])
    assert result.exit_code == 1
    assert "claims GPU(s) this host does not show" in result.stderr
    assert not (here / "manifests" / "ledger.jsonl").exists()


def test_a_report_of_the_gpus_this_host_shows_is_judged_on_its_numbers(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = _stub_python(here, report(2, host=socket.gethostname()))
    bin_dir = _path_without_nvidia_smi(here, monkeypatch)
    rows = "\n".join(
        f"echo '{i}, GPU-{i:08d}-0000-0000-0000-000000000000, NVIDIA H20, 97871'" for i in range(2)
    )
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{rows}\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    result = CliRunner().invoke(main, ["gpu-preflight", "--host", "--python", str(stub),
                                       "--gpus", "2", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    checks = {c["name"]: c["status"] for c in json.loads(result.stdout)["preflight"]["checks"]}
    assert checks["host_gpus"] == "PASS" and checks["all_reduce"] == "PASS"


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is not None, reason="this interpreter has torch"
)
def test_host_without_torch_names_the_fix(here: Path) -> None:
    """imagekit's own venv holds no torch: the line says to pass --python or use the image."""
    result = CliRunner().invoke(main, ["gpu-preflight", "--host", "--timeout", "60"])
    assert result.exit_code == 1, result.output
    assert (
        "give --python PATH, an interpreter that has torch, or run the preflight in the "
        "image" in result.stdout
    )
