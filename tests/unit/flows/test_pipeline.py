"""The pipeline's chaining: first no stops the run, later stages are "not run", exit codes.

The stages themselves run for real in tests/integration/flows/test_pipeline.py; here each stage is
replaced by a function that returns a chosen outcome, to pin down the orchestration rules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from imagekit.builders.buildkit import BuildResult
from imagekit.errors import BuildRejected, ImagekitError, RegistryError, UsageError
from imagekit.flows import pipeline, pipeline_stages
from imagekit.flows.pipeline import (
    ERROR,
    FAILED,
    NOT_RUN,
    PASSED,
    SKIPPED,
    STAGES,
    PipelineOptions,
    StageOutcome,
    StageStatus,
    run_pipeline,
)
from imagekit.workspace import Workspace

_TWO = PipelineOptions(registry="127.0.0.1:1", mirror="127.0.0.1:2")


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "p"
    (root / "manifests").mkdir(parents=True)
    return Workspace.at(root)


@dataclass(frozen=True)
class _Said:
    """A stage result that says ``status`` (what the stage functions are replaced by)."""

    status: StageStatus
    evidence: Path | None = None
    ledger_seqs: tuple[int, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == PASSED

    @property
    def exit_code(self) -> int:
        return {PASSED: 0, FAILED: 1, ERROR: 3}[self.status]

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status}


def patch_stages(monkeypatch: pytest.MonkeyPatch, behaviour: dict[str, Any]) -> list[str]:
    called: list[str] = []

    def make(stage: str) -> Any:
        def run(run: Any, results: Any) -> pipeline.Step:
            called.append(stage)
            what = behaviour.get(stage, PASSED)
            if isinstance(what, BaseException):
                raise what
            return pipeline.Step(_Said(what), "detail", digest="sha256:" + "a" * 64)

        return run

    stages = tuple(pipeline.Stage(s.name, (), make(s.name)) for s in pipeline.PIPELINE)
    monkeypatch.setattr(pipeline, "PIPELINE", stages)
    return called


def test_all_stages_pass(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    called = patch_stages(monkeypatch, {})
    result = run_pipeline(ws, "demo", _TWO)
    assert called == list(STAGES)
    assert result.ok and result.exit_code == 0
    assert [s.status for s in result.stages] == [PASSED] * len(STAGES)
    assert all(s.seconds is not None for s in result.stages)
    saved = json.loads(result.evidence.read_text())
    assert saved["ok"] is True and len(saved["stages"]) == len(STAGES)
    table = result.table()
    assert table[0].split() == ["stage", "status", "digest", "time", "evidence"]
    assert len(table) == len(STAGES) + 1


def test_a_no_stops_the_run_and_the_rest_is_not_run(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    called = patch_stages(monkeypatch, {"audit": FAILED})
    result = run_pipeline(ws, "demo", _TWO)
    assert called == ["doctor", "build", "audit"]
    statuses = {s.stage: s.status for s in result.stages}
    assert statuses["audit"] == FAILED
    assert [statuses[s] for s in ("push", "mirror", "final-pull", "ledger")] == [NOT_RUN] * 4
    assert not result.ok and result.exit_code == 1
    assert result.final_reference is None
    assert all(s.digest is None for s in result.stages if s.status == NOT_RUN)


def test_a_rejected_build_exits_1(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    patch_stages(monkeypatch, {"build": BuildRejected("assertion failed: pip check")})
    result = run_pipeline(ws, "demo", _TWO)
    build = next(s for s in result.stages if s.stage == "build")
    assert build.status == FAILED and "pip check" in build.detail
    assert result.exit_code == 1
    assert result.error is not None and result.error["stage"] == "build"


def test_an_unreachable_registry_exits_3(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    patch_stages(monkeypatch, {"push": RegistryError("refused", registry="127.0.0.1:1")})
    result = run_pipeline(ws, "demo", _TWO)
    assert {s.stage: s.status for s in result.stages}["push"] == ERROR
    assert result.exit_code == 3


def test_an_import_error_inside_a_stage_is_a_crash_not_a_reinstall_hint(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stage's own ImportError (a bug, or an optional library missing) is not dressed up as
    "the stage is not available: reinstall imagekit": it propagates, and the CLI reports it as
    a crash with its own exit code (tests/unit/test_cli.py)."""
    patch_stages(monkeypatch, {"mirror": ModuleNotFoundError("No module named 'x.upload'")})
    with pytest.raises(ModuleNotFoundError, match="x.upload"):
        run_pipeline(ws, "demo", _TWO)


def _patch_platform_stages(monkeypatch: pytest.MonkeyPatch, behaviour: dict[str, Any]) -> list[str]:
    """A plan of linux/amd64 and linux/arm64, each of its stages a stand-in saying what
    ``behaviour`` gives for its name (passed unless told)."""
    called: list[str] = []

    def make(stage: str) -> Any:
        def run(run: Any, results: Any) -> pipeline.Step:
            called.append(stage)
            return pipeline.Step(_Said(behaviour.get(stage, PASSED)), "detail")

        return run

    two = ("linux/amd64", "linux/arm64")
    monkeypatch.setattr(pipeline, "_plan_platforms", lambda *_: two)
    stages = tuple(
        replace(
            s,
            index=make(s.name) if s.index is not None else None,
            each_platform=(lambda name: lambda p: make(f"{name} {p}"))(s.name)
            if s.each_platform is not None
            else None,
            when=None,
        )
        for s in pipeline.PIPELINE
    )
    monkeypatch.setattr(pipeline, "PIPELINE", stages)
    return called


def test_a_plan_of_several_platforms_audits_each_and_a_failed_one_stops_the_run(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    called = _patch_platform_stages(monkeypatch, {})
    result = run_pipeline(ws, "demo-two", _TWO)
    names = ["doctor", "build", "audit linux/amd64", "audit linux/arm64", "mirror",
             "final-pull", "gpu-preflight", "ledger"]  # fmt: skip
    assert called == names and [s.stage for s in result.stages] == names
    assert result.ok and "push" not in called

    called = _patch_platform_stages(monkeypatch, {"audit linux/arm64": FAILED})
    result = run_pipeline(ws, "demo-two", _TWO)
    statuses = {s.stage: s.status for s in result.stages}
    assert statuses["audit linux/amd64"] == PASSED
    assert statuses["audit linux/arm64"] == FAILED
    assert [statuses[s] for s in ("mirror", "final-pull", "ledger")] == [NOT_RUN] * 3
    assert not result.ok and result.exit_code == 1 and result.final_reference is None


def test_a_plan_of_several_platforms_refuses_a_key_that_cannot_sign_before_any_stage(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    called = _patch_platform_stages(monkeypatch, {})
    missing = tmp_path / "no-such.key"
    options = PipelineOptions(registry="127.0.0.1:1", mirror="127.0.0.1:2", sign_key=missing)
    with pytest.raises(ImagekitError) as caught:
        run_pipeline(ws, "demo-two", options)
    assert caught.value.exit_code == 2 and str(missing) in caught.value.message
    assert called == []


def test_registry_and_mirror_must_differ(ws: Workspace) -> None:
    with pytest.raises(UsageError):
        run_pipeline(ws, "demo", PipelineOptions(registry="127.0.0.1:1", mirror="127.0.0.1:1"))


def test_a_reported_error_exits_3(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    patch_stages(monkeypatch, {"mirror": ERROR})  # e.g. a mirror verdict of "error"
    result = run_pipeline(ws, "demo", _TWO)
    assert result.error is None and result.exit_code == 3


def _audit_with(
    monkeypatch: pytest.MonkeyPatch, ws: Workspace, exit_code: int, **context: Any
) -> tuple[list[Any], StageOutcome]:
    """The pipeline's audit stage over a stand-in audit that says ``exit_code``."""
    from types import SimpleNamespace

    from imagekit.audit import stage
    from imagekit.kinds.audit import AuditStatus

    seen: list[Any] = []

    def fake_audit(workspace: Workspace, request: stage.AuditRequest, **_: Any) -> Any:
        seen.append(request)
        verdict = SimpleNamespace(status=AuditStatus.CPU_PASS_GPU_CLI_DEFERRED)
        vulns = SimpleNamespace(findings=["one", "two"] if exit_code else [])
        return SimpleNamespace(
            verdict=verdict,
            vulns=vulns,
            exit_code=exit_code,
            ok=exit_code == 0,
            evidence=ws.root / "audit-report.json",
            ledger_seqs=(),
            to_json=dict,
        )

    run = pipeline.Run(
        workspace=ws,
        name="m3-vllm",
        options=PipelineOptions(registry="127.0.0.1:1", mirror="127.0.0.1:2", **context),
        push_repo="127.0.0.1:1/imagekit/m3-vllm",
        mirror_repo="127.0.0.1:2/imagekit/m3-vllm",
        echo=__import__("io").StringIO(),
    )
    built = BuildResult(
        plan="m3-vllm",
        plan_sha256="c" * 64,
        base="127.0.0.1:1/base@sha256:" + "d" * 64,
        builder="buildx",
        image_id="sha256:" + "b" * 64,
        tag="imagekit/m3-vllm:t",
        evidence_dir=ws.root,
        log=ws.root / "build.log",
        dockerfile_sha256="e" * 64,
    )
    audit = replace(pipeline_stages._audit, runner=fake_audit)
    return seen, pipeline._outcome("audit", audit(run, {"build": built}))


def test_the_audit_stage_uses_the_profile_given_instead_of_the_plans(
    monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    seen, outcome = _audit_with(monkeypatch, ws, 0, profile="replica.yaml")
    assert [(r.ref, r.plan, r.profile) for r in seen] == [
        ("imagekit/m3-vllm:t", "m3-vllm", "replica.yaml")
    ]
    assert outcome.status == PASSED and outcome.detail == "CPU_PASS_GPU_CLI_DEFERRED"


def test_the_audit_stage_passes_the_vulnerability_policy_and_fails_on_its_findings(
    monkeypatch: pytest.MonkeyPatch, ws: Workspace, tmp_path: Path
) -> None:
    """Before, the stage passed on the probe's status alone: an image with known
    vulnerabilities that `imagekit audit` exits 1 on was pushed by the pipeline."""
    from imagekit.audit.vulns import VulnPolicy

    policy = VulnPolicy(database=tmp_path / "all.zip", max_age_days=3, fail_on="fixable")
    seen, outcome = _audit_with(monkeypatch, ws, 1, vulns=policy)
    request = seen[0]
    assert (request.vulns.database, request.vulns.max_age_days, request.vulns.fail_on) == (
        tmp_path / "all.zip",
        3,
        "fixable",
    )
    assert outcome.status == FAILED
    assert outcome.detail == (
        "CPU_PASS_GPU_CLI_DEFERRED; 2 vulnerability findings (--fail-on fixable)"
    )


def test_a_new_stage_is_one_object_and_reads_only_what_it_needs(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stage added to PIPELINE runs in its place, is handed the results it names and no
    others, and stops the run like any other when its result is not ok."""
    patch_stages(monkeypatch, {})
    handed: list[list[str]] = []

    def attest(run: Any, results: Any) -> pipeline.Step:
        handed.append(sorted(results))
        return pipeline.Step(_Said(FAILED), "signature missing")

    stages = list(pipeline.PIPELINE)
    stages.insert(4, pipeline.Stage("attest", ("build", "push"), attest))
    monkeypatch.setattr(pipeline, "PIPELINE", tuple(stages))
    result = run_pipeline(ws, "demo", _TWO)
    assert handed == [["build", "push"]]
    statuses = [(s.stage, s.status) for s in result.stages]
    assert statuses == [
        ("doctor", PASSED),
        ("build", PASSED),
        ("audit", PASSED),
        ("push", PASSED),
        ("attest", FAILED),
        ("mirror", NOT_RUN),
        ("final-pull", NOT_RUN),
        ("gpu-preflight", NOT_RUN),
        ("ledger", NOT_RUN),
    ]
    assert result.exit_code == 1


def test_a_signing_key_that_cannot_sign_is_exit_2_before_any_stage(
    workspace: Workspace, tmp_path: Path
) -> None:
    """`pipeline --sign-key PUB` (and IMAGEKIT_SIGNING_KEY, the option every stage shares):
    a public key is refused naming the file before the doctor runs, so no stage records or
    pushes anything it could then not attest."""
    from click.testing import CliRunner

    from imagekit.attest.keys import generate_key_pair
    from imagekit.cli import main

    pair = generate_key_pair(tmp_path / "k")
    argv = ["pipeline", "demo", "--registry", "127.0.0.1:1", "--mirror", "127.0.0.1:2"]
    for given, env in (
        (["--sign-key", str(pair.public)], {}),
        ([], {"IMAGEKIT_SIGNING_KEY": str(pair.public)}),
    ):
        result = CliRunner().invoke(main, [*argv, *given], env=env)
        assert result.exit_code == 2, result.output
        assert "is a public key" in result.stderr and str(pair.public) in result.stderr
    assert list(workspace.evidence_dir.iterdir()) == []
    assert not workspace.ledger_path.exists()


def test_an_optional_stage_that_does_not_apply_is_skipped_saying_why_and_counts_as_ok(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    called = patch_stages(monkeypatch, {})
    stages = tuple(
        replace(s, when=lambda run: "no GPU visible on this host (nvidia-smi is not on PATH)")
        if s.name == "gpu-preflight"
        else s
        for s in pipeline.PIPELINE
    )
    monkeypatch.setattr(pipeline, "PIPELINE", stages)
    result = run_pipeline(ws, "demo", _TWO)
    assert "gpu-preflight" not in called and called[-1] == "ledger"
    skipped = next(s for s in result.stages if s.stage == "gpu-preflight")
    assert skipped.status == SKIPPED and "no GPU visible" in skipped.detail
    assert skipped.status != PASSED and result.ok and result.exit_code == 0
    assert any(line.split()[:2] == ["gpu-preflight", "skipped:"] for line in result.table())


def test_the_gpu_preflight_is_skipped_where_no_gpu_is_visible() -> None:
    from imagekit.gpu.launch import gpus_visible

    stage = next(s for s in pipeline.PIPELINE if s.name == "gpu-preflight")
    assert stage.when is not None
    # These machines have no GPU: the real check says so (a GPU host would say None).
    reason = gpus_visible()
    assert reason is not None and reason.startswith("no GPU visible on this host")
