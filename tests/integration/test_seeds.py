"""The field reports' facts, reproduced on the replica bases (tests/support/replicas.py).

Each replica is built from real packages (cached by its inputs) and pushed to this session's
registry; the plans m3-cu13, m3-vllm and h3-spark then run over them with ``--base`` through
the same stages `make seeds` chains. Every assertion here is a sentence of a report: the two
pip check lines, nixl's entry point, pygobject without pycairo, no PyAV, the CUDA 13 torch
whose compiled arch list holds sm_90 (read in a zero-GPU container), the rejected first
attempt that removed nixl, the deferred GPU CLI with its raw failure kept (both vLLM commands
read with --help=all, the benchmark client's flags required: a client lacking two is
incomplete, naming them), AV_ROUNDTRIP_PASS 8 with PyAV 16.1.0 through numpy, the image
lock's versions, m3-vllm built on a BuildKit daemon with no engine and audited the same,
the arm64 index and the cut-short digest. Images the tests pull or build are removed at the
end.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from imagekit.audit.profiles import load_profile
from imagekit.audit.report import CheckResult
from imagekit.audit.stage import AuditRequest, AuditResult, audit
from imagekit.builders import remote
from imagekit.builders.buildkit import build_plan
from imagekit.builders.options import BuildOptions
from imagekit.cli.audit_cmd import command as audit_command
from imagekit.cli.build_cmd import command as build_command
from imagekit.cli.plans_cmd import command as plans_command
from imagekit.errors import BuildRejected, EngineUnavailable
from imagekit.ledger import read_records
from imagekit.ledger.lockfile import write_lock
from imagekit.refs import parse_platform, parse_reference
from imagekit.registry import RegistryClient
from imagekit.runtime.engine import Engine, connect
from imagekit.workspace import Workspace
from tests.support import replicas
from tests.support.buildkitd import start_buildkitd
from tests.support.demo_variants import index_url
from tests.support.engine_refs import pipeline_into_fresh_registries, removing
from tests.support.registries import RunningRegistry, free_port

# The first test that asks for a replica pays, on a fresh machine, the build of all three
# (measured 10 min side by side on the shared 2-core machine at load 12: the CUDA torch's
# 2.7 GB of wheels and 5.5 GB root filesystem, the arm64 one under qemu) and the engine's
# first pull of the 3.1 GB CUDA base: more than the suite's 900 s per test (it timed out
# there once). A warm run's slowest test takes about 150 s.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]

PROFILES = Path(__file__).resolve().parents[1] / "support" / "replica_profiles"
REPO = Path(__file__).resolve().parents[2]
PIP_LINES = [
    "nixl 1.2.0 requires nixl-cu12, which is not installed.",
    "moviepy 2.2.1 has requirement pillow<12.0,>=9.2.0, but you have pillow 12.2.0.",
]
PYGOBJECT = re.compile(r"^pygobject \S+ requires pycairo, which is not installed\.$", re.M)
H3_ORIGINAL = "53e875307d962be3225ed71f64d554dafece5587b2b0ce4c5e942afa7000e1c5"
# The arches torch 2.11.0+cu130 was compiled for, as the H200 host audit read them from the
# same release (evidence/host-audit/h200-2026-12-02/): sm_90 for the report's H20 and the
# H200, sm_100 for Blackwell.
TORCH_ARCHES = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


def _assert_cuda_torch(check: CheckResult) -> None:
    """The replica's real CUDA 13 torch, read in a container with no GPU, passes sm_90."""
    assert check.status == "PASS", check.reason
    assert check.data["version"] == "2.11.0+cu130" and check.data["cuda"] == "13.0"
    assert check.data["arch_list"] == TORCH_ARCHES
    # From the build's arch flags: torch.cuda.get_arch_list() is [] without a device.
    assert check.data["arch_list_source"] == "torch._C._cuda_getArchFlags()"
    assert check.reason == (
        f"torch 2.11.0+cu130, CUDA 13.0, arches {' '.join(TORCH_ARCHES)}; required sm_90 present"
    )


def _check(result: AuditResult, name: str) -> CheckResult:
    check = result.report.check(name)
    assert check is not None, f"no check {name}: {[c.name for c in result.report.checks]}"
    return check


def _run(engine: Engine, image: str, *argv: str, platform: str | None = None) -> str:
    extra = ["--platform", platform] if platform else []
    done = subprocess.run(
        [engine.client_path, "run", "--rm", "--network", "none", *extra, "--entrypoint",
         argv[0], image, *argv[1:]],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    return done.stdout


def _remove(engine: Engine, image: str) -> None:
    subprocess.run([engine.client_path, "rmi", "-f", image], check=False, capture_output=True)


# --------------------------------------------------------------------------- m3-cu13


def test_sglang_replica_base_has_the_reports_two_pip_check_lines_and_a_cuda_13_torch(
    engine: Engine, seed_replica: Callable[[str], replicas.PublishedReplica], workspace: Workspace
) -> None:
    base = seed_replica("sglang-cu13")
    request = AuditRequest(
        ref=base.reference, profile=str(PROFILES / "sglang-replica.yaml"), offline=True
    )
    result = audit(workspace, request, engine=engine)

    assert result.verdict.status == "CPU_CHECK_INCOMPLETE"
    assert result.verdict.failing == ("pip-check",), result.verdict.sentence
    pip = _check(result, "pip-check")
    # Verbatim, exactly these two lines: every other requirement in the image is satisfied.
    assert pip.stdout.splitlines() == PIP_LINES
    raw = (result.evidence_dir / "probe-stdout.raw").read_text()
    assert all(json.dumps(line)[1:-1] in raw for line in PIP_LINES)  # kept raw, before parsing
    assert [(c["distribution"], c["problem"]) for c in pip.data["conflicts"]] == [
        ("nixl", "missing"),
        ("moviepy", "version-conflict"),
    ]
    _assert_cuda_torch(_check(result, "torch"))
    assert result.report.environment["CUDA_VISIBLE_DEVICES"] == ""  # no GPU was offered
    versions = _check(result, "versions").data["versions"]
    assert versions["nixl"] == versions["nixl-cu13"] == "1.2.0"
    assert versions["nixl-cu12"] is None and versions["pillow"] == "12.2.0"
    assert _check(result, "find-spec").status == "PASS"
    assert _check(result, "record").status == "PASS"
    # nixl is not an empty meta package: it ships Python entry points of its own.
    assert result.image is not None
    files = _run(
        engine, result.image.image_id, "python3", "-c",
        "import importlib.metadata as m; print('\\n'.join(str(f) for f in m.files('nixl')))",
    ).split()  # fmt: skip
    assert {"nixl/__init__.py", "nixl/_api.py", "nixl/logging.py"} <= set(files)


def test_m3_cu13_closes_pip_check_keeps_nixl_and_names_the_nixl_ep_clash(
    engine: Engine, seed_replica: Callable[[str], replicas.PublishedReplica], workspace: Workspace
) -> None:
    base = seed_replica("sglang-cu13")
    # No cache: the assertion step must run (and print) in this build, not be a cached layer.
    options = BuildOptions(base_override=base.reference, no_cache=True)
    built = build_plan(workspace, "m3-cu13", options)
    try:
        log = built.log.read_text()
        assert "No broken requirements found." in log
        assert "IMAGEKIT_ASSERT_PASS find_spec nixl" in log
        request = AuditRequest(
            ref=built.tag,
            plan="m3-cu13",
            profile=str(PROFILES / "sglang-replica.yaml"),
            offline=True,
        )
        result = audit(workspace, request, engine=engine)
        assert _check(result, "pip-check").status == "PASS"
        assert _check(result, "find-spec").data["modules"]["nixl"]["found"]
        versions = _check(result, "versions").data["versions"]
        assert versions["nixl-cu12"] == "1.2.0" and versions["pillow"] == "11.3.0"
        # Every check passes but the RECORD check: the report's fix installs nixl-cu12 beside
        # nixl-cu13, and both wheels ship nixl_ep and the same scripts, so nixl-cu12
        # overwrote files nixl-cu13 had installed.
        assert result.verdict.failing == ("record",), result.verdict.sentence
        _assert_cuda_torch(_check(result, "torch"))
        differ = _check(result, "record").data["differ"]
        assert {e["distribution"] for e in differ} == {"nixl-cu13"}
        assert "nixl_ep/nixl_ep_cpp.cpython-311-x86_64-linux-gnu.so" in {e["path"] for e in differ}
    finally:
        _remove(engine, built.tag)


def test_the_rejected_first_attempt_removing_nixl_passes_pip_check_and_fails_find_spec(
    engine: Engine, seed_replica: Callable[[str], replicas.PublishedReplica], workspace: Workspace
) -> None:
    """The report's first attempt: uninstall nixl. pip check passes; find_spec('nixl') does not."""
    base = seed_replica("sglang-cu13")
    plan = yaml.safe_load((workspace.plans_dir / "m3-cu13.yaml").read_text())
    plan["name"] = "m3-cu13-remove-nixl"
    plan["description"] = "the report's rejected first attempt: nixl removed instead"
    plan["steps"] = [
        {"kind": "pip_uninstall", "names": ["nixl"]},
        {"kind": "pip_install", "requirements": ["pillow==11.3.0"]},
    ]
    (workspace.plans_dir / "m3-cu13-remove-nixl.yaml").write_text(yaml.safe_dump(plan))
    (workspace.dockerfiles_dir / "m3-cu13-remove-nixl").mkdir()
    with pytest.raises(BuildRejected) as info:
        build_plan(workspace, "m3-cu13-remove-nixl", BuildOptions(base_override=base.reference))
    assert "find_spec nixl" in info.value.message
    records = read_records(workspace.ledger_path)
    rejected = [r for r in records if r.kind == "rejected-build"]
    assert [(r.plan, r.status) for r in rejected] == [("m3-cu13-remove-nixl", "rejected")]
    assert rejected[0].evidence is not None
    log = (workspace.root / rejected[0].evidence.path).read_text()
    assert "No broken requirements found." in log  # pip check passed after the removal
    assert "IMAGEKIT_ASSERT_PASS pip_check" in log
    assert "IMAGEKIT_ASSERT_FAIL find_spec nixl" in log
    assert not [r for r in records if r.kind == "build" and r.plan == "m3-cu13-remove-nixl"]


# --------------------------------------------------------------------------- m3-vllm

LOCK_VERSIONS = (
    "vllm", "torch", "transformers", "flashinfer-python", "av", "decord", "nixl", "nixl-cu12",
    "nixl-cu13", "cuda-python", "cuda-bindings", "cuda-pathfinder", "numpy", "pillow",
    "setuptools",
)  # fmt: skip
BENCH_FLAGS = (
    "--random-input-len", "--random-output-len", "--num-prompts", "--num-warmups",
    "--save-detailed", "--request-id-prefix", "--ignore-eos", "--metric-percentiles",
    "--metadata",
)  # fmt: skip


def _older_bench_client(engine: Engine, image: str, tmp_path: Path, made: list[str]) -> str:
    """``image`` with the stand-in reinstalled by pip from a variant wheel whose benchmark
    client lacks --num-warmups and --request-id-prefix (offline, --network host)."""
    context = tmp_path / "older-bench"
    replicas.vllm_standin_variant(context, ("--num-warmups", "--request-id-prefix"))
    (context / "Dockerfile").write_text(
        f"FROM {image}\n"
        "COPY vllm-*.whl /tmp/\n"
        "RUN python3 -m pip install --no-index --no-deps --force-reinstall --no-cache-dir "
        "--break-system-packages --disable-pip-version-check --root-user-action=ignore "
        "/tmp/vllm-*.whl && rm /tmp/vllm-*.whl\n"
    )
    tag = f"imagekit-test/m3-vllm-older-bench:{os.getpid()}"
    made.append(tag)
    subprocess.run(
        [engine.client_path, "build", "--network", "host", "-t", tag, str(context)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return tag


def test_m3_vllm_on_its_replica_ends_deferred_with_the_raw_failure_and_pyav_16_1_0(
    engine: Engine,
    seed_replica: Callable[[str], replicas.PublishedReplica],
    workspace: Workspace,
    make_registry: Callable[..., RunningRegistry],
    tmp_path: Path,
) -> None:
    base = seed_replica("vllm")
    profile = str(PROFILES / "vllm-replica.yaml")
    found = audit(workspace, AuditRequest(ref=base.reference, profile=profile, offline=True))
    assert found.verdict.status == "CPU_CHECK_INCOMPLETE"
    assert set(found.verdict.failing) == {"pip-check", "av-roundtrip"}, found.verdict.sentence
    assert PYGOBJECT.search(_check(found, "pip-check").stdout)
    raw = (found.evidence_dir / "probe-stdout.raw").read_text()
    assert "requires pycairo, which is not installed." in raw
    assert "not installed" in _check(found, "av-roundtrip").reason  # no PyAV
    versions = _check(found, "versions").data["versions"]
    assert set(LOCK_VERSIONS) <= set(versions)  # every one named, absent ones as None
    assert versions["av"] is None and versions["decord"] is None and versions["torch"] is None
    assert versions["vllm"] == "0.0.0+imagekit.standin" and versions["numpy"] == "2.4.6"
    for name in ("cli:serve-help", "cli:bench-serve-help"):
        cli = _check(found, name)
        assert cli.status == "DEFERRED", cli.reason
        assert cli.data["help_read"] == "--help=all"
        assert (
            cli.data["flags"]
            == [p.flags for p in load_profile(profile).cli if f"cli:{p.name}" == name][0]
        )

    with removing(engine, force=True) as made:
        result = pipeline_into_fresh_registries(
            workspace, "m3-vllm", base.reference, make_registry, made, profile=profile
        )
        stages = {s.stage: s for s in result.stages}
        assert result.ok, [(s.stage, s.status, s.detail) for s in result.stages]
        assert stages["audit"].detail == "CPU_PASS_GPU_CLI_DEFERRED"
        report = json.loads((workspace.root / str(stages["audit"].evidence)).read_text())
        checks = {c["name"]: c for c in report["checks"]}
        assert checks["pip-check"]["reason"] == "No broken requirements found."
        av = checks["av-roundtrip"]
        assert "AV_ROUNDTRIP_PASS 8 (PyAV 16.1.0," in av["reason"]
        # Through numpy, as video loaders hand frames over, and the check says so.
        assert "through numpy 2.4.6" in av["reason"]
        assert "VideoFrame.from_ndarray" in av["proves"]
        assert av["data"]["path"] == "numpy" and av["data"]["frames"] == 8
        bench = checks["cli:bench-serve-help"]
        assert bench["status"] == "DEFERRED"
        assert all(flag in bench["reason"] for flag in BENCH_FLAGS), bench["reason"]
        serve = checks["cli:serve-help"]
        assert serve["status"] == "DEFERRED"
        assert "Failed to infer device type" in serve["data"]["raw_failure"]["stderr"]
        assert report["deferred_checks"] == ["cli:serve-help", "cli:bench-serve-help"]
        log = (workspace.root / str(stages["build"].evidence)).read_text()
        assert (
            "apt-get remove -y python3-gi python3-software-properties "
            "software-properties-common" in log
        )
        # No global autoremove is run (apt's own hint to run one may be in its output).
        assert (
            "autoremove" not in (workspace.dockerfiles_dir / "m3-vllm" / "Dockerfile").read_text()
        )
        assert not re.search(r"^#\d+ \[[^\]]*\] RUN .*autoremove", log, re.M)
        assert stages["final-pull"].detail.startswith("verified")
        kinds = [r.kind for r in read_records(workspace.ledger_path)]
        assert kinds[-4:] == ["vulnerability-scan", "push", "mirror-verify", "final-pull"]
        # `ledger lock` gives the prepared image's versions from the audit record alone.
        lock = write_lock(workspace, None).document["images"]["m3-vllm"]
        prepared = lock["prepared_versions"]
        assert prepared == dict(sorted(checks["versions"]["data"]["versions"].items()))
        assert prepared["av"] == "16.1.0" and prepared["numpy"] == "2.4.6"
        assert prepared["decord"] is None and set(LOCK_VERSIONS) <= set(prepared)

        # The same image with an older benchmark client, lacking two of the flags the
        # field's benchmark passes: no longer deferred, incomplete, the two flags named.
        variant = _older_bench_client(engine, stages["build"].data["tag"], tmp_path, made)
        older = audit(workspace, AuditRequest(ref=variant, profile=profile, offline=True))
        assert older.verdict.status == "CPU_CHECK_INCOMPLETE"
        assert older.verdict.failing == ("cli:bench-serve-help",), older.verdict.sentence
        reason = _check(older, "cli:bench-serve-help").reason
        assert reason.endswith("help does not list --num-warmups, --request-id-prefix"), reason
        assert "--num-warmups, --request-id-prefix" in older.verdict.sentence
        assert _check(older, "cli:serve-help").status == "DEFERRED"
        assert _check(older, "record").status == "PASS"  # a proper install, not a patch


def test_m3_vllm_builds_on_a_buildkit_daemon_with_no_engine_and_audits_as_the_engine_build(
    engine: Engine,
    seed_replica: Callable[[str], replicas.PublishedReplica],
    registry: RunningRegistry,
    workspace: Workspace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`imagekit build m3-vllm --buildkit`: the daemon pulls the replica, removes the three
    system packages, installs PyAV from the package index (its URL and the host CA bundle as
    BuildKit secrets, as on the engine path) and pushes by digest; the engine is unreachable
    while the daemon builds and holds no image of the build afterwards. The assertions then
    run in the pushed image, and the audit of that digest ends as the engine-built image's."""
    base = seed_replica("vllm")
    daemon = start_buildkitd(tmp_path / "bkd", [base.registry_host, registry.host])
    repo = f"{registry.host}/imagekit/m3-vllm"
    daemon_build: dict[str, Any] = {}
    real_run = remote.run_on_daemon

    def engine_off_while_building(*args: Any, **kwargs: Any) -> dict[str, Any]:
        # The way the remote tests prove no engine is on the build path: a docker client
        # that does not exist, so any engine call the build made would have failed it.
        with monkeypatch.context() as off:
            off.setenv("IMAGEKIT_DOCKER_CLIENT", "/nonexistent/docker")
            connect.cache_clear()
            with pytest.raises(EngineUnavailable):
                connect()
            started = time.monotonic()
            try:
                metadata = real_run(*args, **kwargs)
            finally:
                daemon_build["seconds"] = time.monotonic() - started
                connect.cache_clear()
        # BuildKit pushed it and the assertions have not pulled it yet: no engine holds it.
        config = str(metadata["containerimage.config.digest"])
        held = subprocess.run(
            [engine.client_path, "image", "inspect", config], capture_output=True, check=False
        )
        daemon_build["engine_held"] = held.returncode == 0
        return metadata

    monkeypatch.setattr(remote, "run_on_daemon", engine_off_while_building)
    with removing(engine, force=True) as made:
        try:
            started = time.monotonic()
            built = CliRunner().invoke(
                build_command,
                ["m3-vllm", "--base", base.reference, "--buildkit", daemon.address,
                 "--push", repo, "--index-url", index_url(), "--json"],
            )  # fmt: skip
            whole = time.monotonic() - started
        finally:
            daemon.stop()
        assert built.exit_code == 0, built.stderr[-3000:]
        doc = json.loads(built.stdout)
        made.append(doc["pushed"])  # the assertions (and the audit) pulled it by digest
        assert doc["builder"] == "buildkit" and doc["buildkit"] == daemon.address
        assert re.fullmatch(rf"{re.escape(repo)}@sha256:[0-9a-f]{{64}}", doc["pushed"])
        assert daemon_build["engine_held"] is False
        # The same question finds it once the assertions pulled it: the check above can fail.
        pulled = subprocess.run(
            [engine.client_path, "image", "inspect", doc["image_id"]], capture_output=True
        )
        assert pulled.returncode == 0, pulled.stderr
        log = Path(doc["log"]).read_text()
        assert f"with the BuildKit daemon at {daemon.address}" in log
        assert (
            "apt-get remove -y python3-gi python3-software-properties "
            "software-properties-common" in log
        )
        assert re.search(r"^#\d+ .*Successfully installed av-16\.1\.0$", log, re.M), log[-3000:]
        assert "IMAGEKIT_ASSERTIONS_PASSED" in log  # in the build, on the daemon
        # Once more in the pushed image, through the engine, natively.
        assert doc["assertions"]["status"] == "passed"
        assert doc["assertions"]["execution"] == "native"
        assert doc["assertions"]["passed"] == ["pip_check: exit 0"]
        [build] = read_records(workspace.ledger_path)
        assert (build.kind, build.status) == ("build", "built")
        assert build.details["builder"] == "buildkit"
        assert f"on the BuildKit daemon at {daemon.address}" in build.scope
        assert build.details["manifest_digest"] == doc["manifest_digest"]
        assert build.details["assertions"]["status"] == "passed"
        assert build.images == {"image": doc["pushed"], "base": base.reference}

        # The audit reads the image from the registry by digest: the engine-built image's end.
        audited = CliRunner().invoke(
            audit_command,
            [doc["pushed"], "--profile", str(PROFILES / "vllm-replica.yaml"), "--offline",
             "--json"],
        )  # fmt: skip
        assert audited.exit_code == 0, audited.stderr[-3000:]
        report = json.loads(audited.stdout)
        assert report["status"] == "CPU_PASS_GPU_CLI_DEFERRED", report["status_sentence"]
        assert report["deferred_checks"] == ["cli:serve-help", "cli:bench-serve-help"]
        assert report["image"]["manifest_digest"] == doc["manifest_digest"]
        records = read_records(workspace.ledger_path)
        [audit_record] = [r for r in records if r.kind == "audit"]
        assert audit_record.status == "CPU_PASS_GPU_CLI_DEFERRED"
        assert audit_record.details["image_id"] == doc["image_id"]
        print(
            f"m3-vllm on the BuildKit daemon: {daemon_build['seconds']:.1f} s on the daemon, "
            f"{whole:.1f} s with the assertions in the pushed image; audit {report['status']}"
        )


# --------------------------------------------------------------------------- h3-spark


def test_h3_replica_is_an_arm64_index_holding_the_original_module(
    engine: Engine, seed_replica: Callable[[str], replicas.PublishedReplica], workspace: Workspace
) -> None:
    base = seed_replica("h3")
    ref = parse_reference(base.reference)
    with RegistryClient() as client:
        body, media_type, _ = client.get_manifest(ref, ref.identifier)
        resolved = client.resolve(ref, parse_platform("linux/arm64"))
    index = json.loads(body)
    assert media_type == "application/vnd.oci.image.index.v1+json"
    platforms = [(m["platform"]["os"], m["platform"]["architecture"]) for m in index["manifests"]]
    assert platforms == [("linux", "arm64"), ("unknown", "unknown")]
    assert index["manifests"][1]["annotations"]["vnd.docker.reference.type"] == (
        "attestation-manifest"
    )
    assert resolved.config.architecture == "arm64" and resolved.config.os == "linux"

    request = AuditRequest(
        ref=base.reference,
        profile=str(PROFILES / "h3-replica.yaml"),
        platform="linux/arm64",
        offline=True,
    )
    result = audit(workspace, request, engine=engine)
    assert result.verdict.status == "CPU_PASS", result.verdict.sentence
    assert result.report.platform.machine == "aarch64"  # ran under qemu
    assert _check(result, "record").status == "PASS"
    sources = _check(result, "model-sources").data["sources"][0]["matches"]
    assert sources == [replicas.H3_MODULE]
    assert result.image is not None
    out = _run(
        engine, result.image.image_id, "sha256sum", replicas.H3_MODULE, platform="linux/arm64"
    )
    assert out.split()[0] == H3_ORIGINAL  # the digest the plan's guard expects

    bare = CliRunner().invoke(plans_command, ["validate", "h3-spark"])
    assert bare.exit_code == 2
    assert "h3-spark.yaml: base.reference" in bare.stderr and "--base" in bare.stderr
    based = CliRunner().invoke(plans_command, ["validate", "h3-spark", "--base", base.reference])
    assert based.exit_code == 0, based.output


def test_the_h3_overlays_are_ours_and_their_original_matches_the_wheel() -> None:
    plan = yaml.safe_load((REPO / "manifests" / "h3-spark.yaml").read_text())
    folder = REPO / "dockerfiles" / "h3-spark"
    patched = (folder / "patches" / "minimax_h3_transformer.py").read_bytes()
    assert hashlib.sha256(patched).hexdigest() != H3_ORIGINAL  # it really is a patch
    assert plan["steps"][0]["replaces"]["sha256"] == H3_ORIGINAL
    assert os.access(folder / "start-fp8.sh", os.X_OK)


# --------------------------------------------------------------------------- bad input


def test_a_replica_that_cannot_reach_the_package_index_exits_3_naming_the_package(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(
        IMAGEKIT_CACHE_DIR=str(tmp_path / "cache"),
        PIP_CONFIG_FILE=os.devnull,  # no find-links, no extra indexes: only the one below
        PIP_INDEX_URL=f"http://127.0.0.1:{free_port()}/simple",
        PIP_RETRIES="0",
        PIP_TIMEOUT="3",
    )
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.replicas", "build", "sglang-cu13"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert (
        "replica sglang-cu13: could not download torch==2.11.0 from the package index" in (lines[0])
    )
    assert not list((tmp_path / "cache" / "replicas").glob("*.wheels"))  # nothing half-made
