"""nightly's rules: which record is the baseline, audit ranks, exit codes, the job summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.flows.nightly import (
    AUDIT_WORSE,
    BASE_UNREACHABLE,
    CHANGED,
    EQUIVALENT,
    NightlyResult,
    PlanNight,
    audit_rank,
    find_baseline,
)
from imagekit.ledger import append_record, read_records
from imagekit.workspace import Workspace

DIGEST = "sha256:" + "b" * 64


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "p"
    (root / "manifests").mkdir(parents=True)
    return Workspace.at(root)


def record(ws: Workspace, kind: str, status: str, plan: str = "demo", **images: str) -> None:
    append_record(ws, kind, plan=plan, images=images, status=status, scope="test")


def test_audit_rank_orders_statuses() -> None:
    assert audit_rank("CPU_PASS") < audit_rank("CPU_PASS_GPU_CLI_DEFERRED")
    assert audit_rank("CPU_PASS_GPU_CLI_DEFERRED") < audit_rank("CPU_CHECK_INCOMPLETE")
    assert audit_rank("CPU_CHECK_INCOMPLETE") < audit_rank("SOMETHING_ELSE")
    assert audit_rank("SOMETHING_ELSE") < audit_rank(None)


def test_baseline_prefers_the_verified_final_pull(ws: Workspace) -> None:
    record(ws, "audit", "CPU_PASS_GPU_CLI_DEFERRED", image="imagekit/demo:1")
    record(ws, "push", "pushed", image="imagekit/demo:1", pushed=f"r/imagekit/demo@{DIGEST}")
    record(ws, "final-pull", "verified", image=f"m/imagekit/demo@{DIGEST}")
    record(ws, "audit", "CPU_CHECK_INCOMPLETE", image="imagekit/demo:2")  # after: not its audit
    record(ws, "final-pull", "mismatch", image=f"m/imagekit/demo@{'sha256:' + 'c' * 64}")
    record(ws, "final-pull", "verified", plan="other", image=f"m/other@{DIGEST}")
    baseline = find_baseline(read_records(ws.ledger_path), "demo")
    assert baseline is not None
    assert baseline.reference == f"m/imagekit/demo@{DIGEST}"
    assert baseline.record_kind == "final-pull" and baseline.record_seq == 3
    assert baseline.audit_status == "CPU_PASS_GPU_CLI_DEFERRED"


def test_baseline_falls_back_to_the_last_push(ws: Workspace) -> None:
    record(ws, "push", "pushed", image="imagekit/demo:1", pushed=f"r/imagekit/demo@{DIGEST}")
    baseline = find_baseline(read_records(ws.ledger_path), "demo")
    assert baseline is not None and baseline.record_kind == "push"
    assert baseline.audit_status is None


def test_no_baseline(ws: Workspace) -> None:
    record(ws, "build", "built", image="imagekit/demo:1")
    assert find_baseline(read_records(ws.ledger_path), "demo") is None


def test_exit_code_is_the_worst_plan() -> None:
    ok = PlanNight("a", EQUIVALENT, 0, "fine")
    changed = PlanNight("b", CHANGED, 0, "moved", changes=("python six 1.16.0 -> 1.17.0",))
    worse = PlanNight("c", AUDIT_WORSE, 1, "audit worse")
    gone = PlanNight("d", BASE_UNREACHABLE, 3, "base gone")
    assert NightlyResult("t", (ok, changed)).exit_code == 0
    assert NightlyResult("t", (ok, worse)).exit_code == 1
    assert NightlyResult("t", (worse, gone)).exit_code == 3
    assert NightlyResult("t", ()).exit_code == 1  # nothing rebuilt is not a pass


def test_markdown_names_the_changes() -> None:
    changed = PlanNight("b", CHANGED, 0, "a | b", changes=("python six 1.16.0 -> 1.17.0",))
    text = NightlyResult("2026-12-02T03:23:00Z", (changed,)).markdown()
    assert text.startswith("# imagekit nightly (2026-12-02T03:23:00Z)")
    assert "**Night passed** (exit 0)" in text
    assert "| b | **changed** |" in text and "a \\| b" in text
    assert "## b: what changed" in text and "- python six 1.16.0 -> 1.17.0" in text
    failed = NightlyResult("t", (PlanNight("d", BASE_UNREACHABLE, 3, "gone"),)).markdown()
    assert "**Night FAILED (could not finish)** (exit 3)" in failed


def test_baseline_skips_records_without_a_pullable_reference(ws: Workspace) -> None:
    record(ws, "final-pull", "verified", image=f"m/imagekit/demo@{DIGEST}")
    # `ledger record-pod` style: a bare image ID, nothing a registry can serve
    record(ws, "final-pull", "verified", image="sha256:" + "d" * 64)
    baseline = find_baseline(read_records(ws.ledger_path), "demo")
    assert baseline is not None and baseline.reference == f"m/imagekit/demo@{DIGEST}"
