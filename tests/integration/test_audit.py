"""`imagekit audit` against real images with planted defects, run by the real engine.

Two images are built from the base image fixture (tests/fixtures/audit/README.md says what
each holds): a healthy one, and one FROM it with one planted defect per check. Each defect
must come out of a real locked-down container as the status the issue names; the healthy
image must come out as CPU_PASS and, with a CLI that needs a GPU to parse its arguments, as
CPU_PASS_GPU_CLI_DEFERRED. The images are removed afterwards.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from imagekit.audit.report import CheckResult
from imagekit.audit.stage import AuditRequest, AuditResult, audit
from imagekit.errors import CouldNotFinish
from imagekit.ledger import read_records
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.engine_refs import containers
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "audit"
TAMPERED = "/usr/local/lib/python3.11/dist-packages/tamperpkg/core.py"


@dataclass(frozen=True)
class AuditImages:
    healthy: str
    defects: str


def _build(engine: Engine, dockerfile: str, tag: str, build_args: dict[str, str]) -> None:
    """A BuildKit build through the engine's client (no buildx here), --network host."""
    previous = os.environ.get("DOCKER_BUILDKIT")
    os.environ["DOCKER_BUILDKIT"] = "1"
    try:
        engine.client.legacy_build(
            FIXTURES,
            file=FIXTURES / dockerfile,
            build_args=build_args,
            network="host",
            tags=[tag],
        )
    finally:
        if previous is None:
            os.environ.pop("DOCKER_BUILDKIT", None)
        else:
            os.environ["DOCKER_BUILDKIT"] = previous


@pytest.fixture(scope="module")
def images(engine: Engine, base_image: BaseImage) -> Iterator[AuditImages]:
    suffix = secrets.token_hex(4)
    healthy = f"imagekit-test/audit-healthy:{suffix}"
    defects = f"imagekit-test/audit-defects:{suffix}"
    try:
        _build(engine, "Dockerfile.healthy", healthy, {"BASE": base_image.local_tag})
        _build(engine, "Dockerfile.defects", defects, {"HEALTHY": healthy})
        yield AuditImages(healthy=healthy, defects=defects)
    finally:
        for tag in (defects, healthy):
            if engine.client.image.exists(tag):
                engine.client.image.remove(tag, force=True)


def _check(result: AuditResult, name: str) -> CheckResult:
    check = result.report.check(name)
    assert check is not None, f"no check {name}: {[c.name for c in result.report.checks]}"
    return check


def test_healthy_image_is_cpu_pass(
    engine: Engine, images: AuditImages, workspace: Workspace
) -> None:
    result = audit(workspace, AuditRequest(ref=images.healthy, offline=True), engine=engine)

    assert result.verdict.status == "CPU_PASS", result.verdict.sentence
    assert result.exit_code == 0
    assert result.scope == (
        "CPU-only checks, no weights loaded, no GPU test; the engine's image "
        f"{result.image.image_id if result.image else ''}, found locally under the tag "
        f"{images.healthy}: the registry was not asked what the tag serves"
    )
    record = _check(result, "record")
    assert record.status == "PASS"
    assert record.data["checked_distributions"] >= 2  # tamperpkg and fakeserve, via pip
    av = _check(result, "av-roundtrip")
    assert av.status == "PASS"
    assert "AV_ROUNDTRIP_PASS 8" in av.stdout
    # The base has Debian's numpy: frames go in as loaders make them, and the check says so.
    assert av.data["path"] == "numpy"
    assert "VideoFrame.from_ndarray" in av.proves
    assert "through numpy" in av.reason
    assert _check(result, "pip-check").stdout.strip() == "No broken requirements found."
    assert _check(result, "torch").status == "SKIPPED"  # absent and not required by generic
    # The container really was locked down as the probe saw it.
    assert result.report.environment["CUDA_VISIBLE_DEVICES"] == ""
    assert result.report.environment["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert result.report.environment["HF_HUB_OFFLINE"] == "1"
    assert result.vulns.status == "skipped"
    # Evidence: the whole report, the summary, the raw probe output; and the ledger.
    assert result.evidence_dir.is_relative_to(workspace.evidence_dir)
    whole = json.loads(result.report_path.read_text())
    assert whole["status"] == "CPU_PASS"
    assert "CPU-only checks" in result.summary_path.read_text()
    assert (result.evidence_dir / "probe-stdout.raw").stat().st_size > 0
    run = json.loads((result.evidence_dir / "probe-run.json").read_text())
    assert run["exit_code"] == 0 and run["stdout"]["cut_bytes"] == 0
    records = read_records(workspace.ledger_path)
    assert [(r.kind, r.status) for r in records] == [
        ("audit", "CPU_PASS"),
        ("vulnerability-scan", "skipped"),
    ]
    assert records[0].evidence is not None
    # The record keeps the key versions read (the lock's prepared_versions), absent as None.
    recorded = records[0].info.report.versions
    assert recorded == _check(result, "versions").data["versions"]
    assert recorded["av"] and recorded["numpy"] and recorded["torch"] is None


def test_gpu_cli_is_deferred_with_raw_failure_kept(
    engine: Engine, images: AuditImages, workspace: Workspace
) -> None:
    request = AuditRequest(
        ref=images.healthy, profile=str(FIXTURES / "profile-deferred.yaml"), offline=True
    )
    result = audit(workspace, request, engine=engine)

    assert result.verdict.status == "CPU_PASS_GPU_CLI_DEFERRED", result.verdict.sentence
    assert result.exit_code == 0
    cli = _check(result, "cli:serve-help")
    assert cli.status == "DEFERRED"
    raw = cli.data["raw_failure"]
    assert raw["exit_code"] != 0
    assert raw["command"] == ["fakeserve", "serve", "--help=all"]
    assert "Failed to infer device type" in raw["stderr"]
    assert "--tool-call-parser" in cli.stdout  # the fallback's help, which passed
    assert _check(result, "model-sources").status == "PASS"
    assert result.verdict.deferred == ("cli:serve-help",)


def test_each_planted_defect_is_reported_and_a_hung_check_times_out(
    images: AuditImages, workspace: Workspace
) -> None:
    """Through the CLI: --json gives one document, exit 1 for CPU_CHECK_INCOMPLETE."""
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "imagekit"),
            "audit",
            images.defects,
            "--profile",
            str(FIXTURES / "profile-defects.yaml"),
            "--offline",
            "--json",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.strip(), proc.stderr
    doc = json.loads(proc.stdout)
    checks = {c["name"]: c for c in doc["checks"]}
    status = {name: c["status"] for name, c in checks.items()}
    assert status == {
        "versions": "PASS",
        "pip-check": "FAIL",
        "find-spec": "FAIL",
        "record": "FAIL",
        "torch": "FAIL",
        "av-roundtrip": "FAIL",
        "model-sources": "SKIPPED",
        "cli:serve-help": "DEFERRED",
        "cli:bench-help": "TIMEOUT",
    }
    assert doc["status"] == "CPU_CHECK_INCOMPLETE"
    assert set(doc["failing_checks"]) == {
        "pip-check", "find-spec", "record", "torch", "av-roundtrip", "cli:bench-help",
    }  # fmt: skip
    assert "evidence:" in proc.stderr

    report = json.loads(Path(doc["evidence"]["report"]).read_text())
    whole = {c["name"]: c for c in report["checks"]}
    assert whole["pip-check"]["data"]["conflicts"] == [
        {
            "distribution": "imagekit-fixture-front",
            "version": "1.2.0",
            "requirement": "imagekit-fixture-back",
            "problem": "missing",
            "installed": None,
        }
    ]
    assert (
        "imagekit-fixture-front 1.2.0 requires imagekit-fixture-back, which is not installed."
        in whole["pip-check"]["stdout"]
    )
    modules = whole["find-spec"]["data"]["modules"]
    assert modules["fixture_front"]["found"] and not modules["fixture_back"]["found"]
    assert [e["path"] for e in whole["record"]["data"]["differ"]] == ["tamperpkg/core.py"]
    # No torch at all; a CPU-only torch failing sm_90 is
    # test_a_cpu_only_torch_is_refused_when_the_profile_requires_sm_90's.
    assert "torch is not installed but the profile requires it" in whole["torch"]["reason"]
    assert "not installed" in whole["av-roundtrip"]["reason"]
    # The hung check was killed at its own limit while the others finished on their own.
    assert 5 <= whole["cli:bench-help"]["duration_s"] < 30
    assert all(c["duration_s"] < 60 for n, c in whole.items() if n != "cli:bench-help")


@pytest.fixture(scope="module")
def cpu_torch_image(engine: Engine, images: AuditImages) -> Iterator[str]:
    """The healthy image with imagekit's STAND-IN for a CPU-only torch build installed."""
    tag = f"imagekit-test/audit-cpu-torch:{secrets.token_hex(4)}"
    try:
        _build(engine, "Dockerfile.cpu-torch", tag, {"HEALTHY": images.healthy})
        yield tag
    finally:
        if engine.client.image.exists(tag):
            engine.client.image.remove(tag, force=True)


def test_a_cpu_only_torch_is_refused_when_the_profile_requires_sm_90(
    engine: Engine, cpu_torch_image: str, workspace: Workspace
) -> None:
    """The "CPU-only build" refusal, in a real locked-down container.

    The torch there is a labelled stand-in (tests/fixtures/audit/pkgs/torch-cpu-standin): the
    package index of these machines has no CPU build for x86_64. The real CUDA build passing
    the same requirement is tests/integration/test_seeds.py's.
    """
    request = AuditRequest(
        ref=cpu_torch_image, profile=str(FIXTURES / "profile-cpu-torch.yaml"), offline=True
    )
    result = audit(workspace, request, engine=engine)

    assert result.verdict.failing == ("torch",), result.verdict.sentence
    assert result.exit_code == 1
    torch = _check(result, "torch")
    assert torch.status == "FAIL"
    assert torch.reason == (
        "torch 2.13.0+cpu.standin is a CPU-only build (torch.version.cuda is None): required "
        "arch(es) sm_90 cannot be present"
    )
    assert torch.data["cuda"] is None and torch.data["arch_list"] == []
    assert torch.data["arch_list_source"] == "torch.cuda.get_arch_list()"
    # Installed by pip like any distribution: the stand-in's own RECORD holds.
    assert _check(result, "record").status == "PASS"
    versions = _check(result, "versions").data["versions"]
    assert versions["torch"] == "2.13.0+cpu.standin"


def test_overlaid_file_is_named_as_expected_not_as_tampering(
    engine: Engine, images: AuditImages, workspace: Workspace
) -> None:
    request = AuditRequest(ref=images.defects, offline=True, expected_paths=(TAMPERED,))
    result = audit(workspace, request, engine=engine)

    record = _check(result, "record")
    assert record.status == "PASS", record.reason
    assert [e["path"] for e in record.data["expected_overlays"]] == ["tamperpkg/core.py"]
    assert "expected overlay" in record.reason


def _pushed_untagged(
    engine: Engine, image: str, registry: RunningRegistry, name: str
) -> tuple[str, str]:
    """Push ``image`` to imagekit-test/NAME under a fresh tag, then drop that tag from the
    engine: (the tag, the repository digest host/repo@sha256:... the push gave it)."""
    client = engine.client
    remote = f"{registry.host}/imagekit-test/{name}:{secrets.token_hex(4)}"
    client.image.tag(image, remote)
    client.image.push(remote, quiet=True)
    prefix = remote.rsplit(":", 1)[0] + "@"
    digest = next(d for d in client.image.inspect(remote).repo_digests if d.startswith(prefix))
    client.image.remove(remote)
    return remote, digest


def test_a_registry_tag_is_resolved_to_its_digest_audited_and_both_recorded(
    engine: Engine, images: AuditImages, registry: RunningRegistry, workspace: Workspace
) -> None:
    # Not in the engine any more: only the registry knows the tag.
    remote, digest = _pushed_untagged(engine, images.healthy, registry, "audit-tag")
    try:
        result = audit(workspace, AuditRequest(ref=remote, offline=True), engine=engine)
        assert result.image is not None and result.image.pulled
        assert result.image.requested == digest  # the digest was audited, not the tag
        assert result.image.resolved_tag == remote
        resolution = result.to_json()["image"]["tag_resolution"]
        assert resolution["sentence"] == (
            f"tag {remote} resolved to {digest.split('@')[1]} at {resolution['at']}"
        )
        audit_record = [r for r in read_records(workspace.ledger_path) if r.kind == "audit"][-1]
        assert audit_record.images["image"] == digest and audit_record.images["tag"] == remote
        assert audit_record.details["tag_resolution"]["digest"] == digest.split("@")[1]
    finally:
        subprocess.run([engine.client_path, "rmi", digest], check=False, capture_output=True)


def test_a_tag_the_engine_holds_is_recorded_by_its_image_id_not_as_a_bare_tag(
    engine: Engine, images: AuditImages, workspace: Workspace
) -> None:
    """A REPO:TAG the engine holds is audited as the engine holds it (the registry may serve
    another image under the tag now, and is not asked): the record named the bare tag as
    the image; it names the engine's image ID, the tag beside it, and says so."""
    tag = "127.0.0.1:9/imagekit-test/held-locally:v1"  # nothing answers there
    engine.client.image.tag(images.healthy, tag)
    try:
        result = audit(workspace, AuditRequest(ref=tag, offline=True), engine=engine)
    finally:
        engine.client.image.remove(tag)
    assert result.image is not None and not result.image.pulled
    record = [r for r in read_records(workspace.ledger_path) if r.kind == "audit"][-1]
    assert record.images == {"image": result.image.image_id, "tag": tag}
    assert record.scope.endswith(
        f"the engine's image {result.image.image_id}, found locally under the tag {tag}: the "
        "registry was not asked what the tag serves"
    )


def test_a_tag_whose_registry_does_not_answer_could_not_finish(
    engine: Engine, workspace: Workspace
) -> None:
    with pytest.raises(CouldNotFinish):
        audit(
            workspace,
            AuditRequest(ref="127.0.0.1:9/imagekit-test/absent:latest", offline=True),
            engine=engine,
        )


def test_a_plan_adds_its_modules_and_overlays(
    engine: Engine, base_image: BaseImage, workspace: Workspace
) -> None:
    """The demo plan audited against its own base: its overlay is not there yet, nor six."""
    request = AuditRequest(ref=base_image.local_tag, plan="demo", offline=True)
    result = audit(workspace, request, engine=engine)

    assert result.plan == "demo"
    assert result.evidence_dir.relative_to(workspace.evidence_dir).parts[0] == "demo"
    modules = _check(result, "find-spec").data["modules"]
    assert set(modules) == {"six", "av", "numpy"}
    assert not modules["six"]["found"]
    record = _check(result, "record")
    assert record.status == "FAIL"
    assert [e["path"] for e in record.data["overlays_not_applied"]] == ["av/about.py"]
    assert result.verdict.status == "CPU_CHECK_INCOMPLETE"


def test_a_registry_reference_is_pulled_by_digest(
    engine: Engine, images: AuditImages, registry: RunningRegistry, workspace: Workspace
) -> None:
    client = engine.client
    # The tag and its repo digest leave the engine.
    _, pinned = _pushed_untagged(engine, images.healthy, registry, "audit-pull")
    digest = pinned.split("@")[1]
    assert not client.image.exists(pinned)
    try:
        result = audit(workspace, AuditRequest(ref=pinned, offline=True), engine=engine)
        assert result.image is not None and result.image.pulled
        assert result.image.manifest_digest == digest
        assert result.evidence_dir.parent.name == digest.replace(":", "_")
        assert result.verdict.status == "CPU_PASS"
    finally:
        if client.image.exists(pinned):
            client.image.remove(pinned)


def test_an_image_without_python_is_a_verdict_naming_the_missing_interpreter(
    engine: Engine, tmp_path: Path, workspace: Workspace
) -> None:
    """No python3 in the image: a fact about the image, so a verdict (CPU_CHECK_INCOMPLETE,
    recorded, exit 1) whose one failed check quotes the engine's cause, never "could not
    finish" with Docker's last line."""
    rootfs = tmp_path / "rootfs.tar"
    payload = b"not an interpreter\n"
    with tarfile.open(rootfs, "w") as tar:
        info = tarfile.TarInfo("etc/motd")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    tag = f"imagekit-test/audit-nopython:{secrets.token_hex(4)}"
    engine.client.import_(rootfs, tag)
    try:
        result = audit(workspace, AuditRequest(ref=tag, offline=True), engine=engine)
        assert result.verdict.status == "CPU_CHECK_INCOMPLETE" and result.exit_code == 1
        assert result.verdict.failing == ("python3",)
        assert 'exec: "python3": executable file not found' in result.verdict.sentence
        assert f"`imagekit sbom {tag}`" in result.verdict.sentence
        assert "docker run --help" not in result.verdict.sentence
        records = read_records(workspace.ledger_path)
        assert [r.kind for r in records] == ["audit", "vulnerability-scan"]
        assert records[0].status == "CPU_CHECK_INCOMPLETE"
    finally:
        engine.client.image.remove(tag, force=True)


# ------------------------------------------------------------------ hostile interpreters


@pytest.fixture(scope="module")
def wrapped(engine: Engine, base_image: BaseImage) -> Iterator[dict[str, str]]:
    """The base image with python3 shadowed by each of tests/fixtures/audit/wrappers/."""
    suffix = secrets.token_hex(4)
    tags = {name: f"imagekit-test/audit-{name}:{suffix}" for name in ("hang", "flood", "exit1")}
    try:
        for name, tag in tags.items():
            _build(
                engine,
                "Dockerfile.python3-wrapper",
                tag,
                {"BASE": base_image.local_tag, "WRAPPER": name},
            )
        yield tags
    finally:
        for tag in tags.values():
            if engine.client.image.exists(tag):
                engine.client.image.remove(tag, force=True)


IMAGEKIT = str(Path(sys.executable).parent / "imagekit")


def _wait_for_container(engine: Engine, image: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not containers(engine, f"ancestor={image}"):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the audit container never started"
        time.sleep(0.2)


def _gone(engine: Engine, image: str, within: float = 30) -> bool:
    deadline = time.monotonic() + within
    while containers(engine, f"ancestor={image}"):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_a_python3_that_never_returns_times_out_and_its_container_is_removed(
    engine: Engine, wrapped: dict[str, str], workspace: Workspace
) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [IMAGEKIT, "audit", wrapped["hang"], "--offline", "--timeout", "5", "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert time.monotonic() - started < 60
    error = json.loads(done.stdout)["error"]
    assert error["status"] == "TIMEOUT" and error["timeout_s"] == 5
    assert "5 s" in error["message"] or "5s" in error["message"]
    assert _gone(engine, wrapped["hang"], within=5)
    assert not workspace.ledger_path.exists()  # no verdict: nothing recorded


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_audit_removes_its_container(
    engine: Engine, wrapped: dict[str, str], workspace: Workspace, signum: int, code: int
) -> None:
    # Any container found below must be this audit's: none of an earlier test may be left.
    left = containers(engine, f"ancestor={wrapped['hang']}")
    assert left == [], "a container of an earlier test is left"
    proc = subprocess.Popen(
        [IMAGEKIT, "audit", wrapped["hang"], "--offline", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for_container(engine, wrapped["hang"], proc)
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)  # Ctrl-C reaches the whole foreground group
        else:
            os.kill(proc.pid, signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, stderr
    document = json.loads(stdout)["interrupted"]
    assert document["signal"] == signal.Signals(signum).name
    assert document["exit_code"] == code
    assert _gone(engine, wrapped["hang"], within=10)
    assert not workspace.ledger_path.exists()


def test_a_flood_of_output_is_read_with_a_bound_and_kept_under_an_honest_name(
    engine: Engine, wrapped: dict[str, str], workspace: Workspace, tmp_path: Path
) -> None:
    out = tmp_path / "stdout.json"
    peak = tmp_path / "peak-kib"
    # The peak is read by a small parent of its own: a child forked from this (large) test
    # process would count the test process's resident pages as its own high-water mark.
    measure = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[2:], stdout=open(sys.argv[1], 'w'))\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.exit(done.returncode)\n"
    )
    with peak.open("w") as fh:
        done = subprocess.run(
            [sys.executable, "-c", measure, str(out), IMAGEKIT, "audit", wrapped["flood"],
             "--offline", "--json"],
            stdout=fh, stderr=subprocess.DEVNULL, timeout=600, check=False,
        )  # fmt: skip
    assert done.returncode == 0, out.read_text()[:2000]
    peak_mib = int(peak.read_text()) / 1024
    assert peak_mib < 250, f"peak RSS {peak_mib:.0f} MiB for 200 MiB of probe output"
    document = json.loads(out.read_text())
    assert document["status"] == "CPU_PASS"
    probe = document["probe"]
    assert probe["stdout_bytes"] > 200 * 1024 * 1024
    assert probe["stdout_cut_bytes"] > 0  # says how much was not kept
    folder = Path(document["evidence"]["dir"])
    names = sorted(p.name for p in folder.iterdir())
    assert "probe-output.json" not in names  # it was never JSON
    raw = [folder / name for name in names if name.startswith("probe-stdout")]
    assert raw and not any(p.suffix == ".json" for p in raw)
    assert sum(p.stat().st_size for p in raw) < 200 * 1024 * 1024  # bounded on disk too


def test_a_report_printed_before_python3_exits_1_decides_and_is_kept(
    engine: Engine, wrapped: dict[str, str], workspace: Workspace
) -> None:
    done = subprocess.run(
        [IMAGEKIT, "audit", wrapped["exit1"], "--offline", "--json"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["status"] == "CPU_PASS"
    assert document["probe"]["exit_code"] == 1
    assert document["probe"]["note"] == "python3 exited 1 after printing a report"
    assert "python3 exited 1 after printing a report" in done.stderr
    folder = Path(document["evidence"]["dir"])
    stderr_raw = (folder / "probe-stderr.raw").read_text()
    assert "Fatal Python error" in stderr_raw
    assert (folder / "probe-stdout.raw").stat().st_size > 1000
    human = subprocess.run(
        [IMAGEKIT, "audit", wrapped["exit1"], "--offline"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert human.returncode == 0
    assert "python3 exited 1 after printing a report" in human.stdout
    assert max(len(line) for line in human.stderr.splitlines() or [""]) < 400


def test_an_audit_onto_a_ledger_that_does_not_verify_keeps_its_verdict(
    base_image: BaseImage, workspace: Workspace
) -> None:
    workspace.ledger_path.write_bytes(b'{"seq": 1, "edited": "by hand"}\n')
    done = subprocess.run(
        [IMAGEKIT, "audit", base_image.local_tag, "--offline", "--json"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    assert document["status"] in ("CPU_PASS", "CPU_CHECK_INCOMPLETE")
    assert Path(document["evidence"]["report"]).is_file()
    assert "not a ledger record" in document["ledger_refused"]["message"]
    assert workspace.ledger_path.read_bytes() == b'{"seq": 1, "edited": "by hand"}\n'
