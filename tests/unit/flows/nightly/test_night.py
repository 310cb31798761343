"""One plan's night: its note record is typed, and a note the ledger refuses is never a pass."""

from __future__ import annotations

import io
import shutil

import pytest

from imagekit.errors import UsageError
from imagekit.flows.nightly.night import Night
from imagekit.flows.nightly.options import NightOptions
from imagekit.flows.nightly.result import (
    OVERLAY_DRIFT,
    REJECTED,
    REPRODUCIBLE,
    PlanNight,
)
from imagekit.ledger import NightlyDetails, append_record, read_records
from imagekit.plans.load import load_plan, plan_path
from imagekit.registry.client import RegistryClient
from imagekit.workspace import Workspace
from tests.unit.flows.nightly.support import REPO_ROOT, record


def test_a_nights_note_has_typed_details(ws: Workspace) -> None:
    details = NightlyDetails(verdict="base-moved", plan_diff="-a\n+b\n")
    append_record(
        ws, "note", plan="demo", images={}, status="nightly-base-moved", scope="t",
        details=details,
    )  # fmt: skip
    info = read_records(ws.ledger_path)[-1].info
    assert isinstance(info, NightlyDetails) and info.plan_diff == "-a\n+b\n"
    with pytest.raises(UsageError, match="NightlyDetails"):
        append_record(
            ws, "note", plan="demo", images={}, status="nightly-base-moved", scope="t",
            details={"verdict": "base-moved", "candidat": "typo"},
        )  # fmt: skip
    # other notes keep free details
    append_record(ws, "note", plan=None, images={}, status="hello", scope="t", details={"x": 1})


def test_a_night_whose_note_the_ledger_refuses_is_never_a_pass(ws: Workspace) -> None:
    shutil.copy2(REPO_ROOT / "manifests" / "demo.yaml", ws.plans_dir / "demo.yaml")
    shutil.copytree(REPO_ROOT / "dockerfiles" / "demo", ws.dockerfiles_dir / "demo")
    record(ws, "build", "built")
    torn = ws.ledger_path.read_bytes() + b'{"seq": 2, "kind": "no'  # cut short, no newline
    ws.ledger_path.write_bytes(torn)
    loaded = load_plan(plan_path(ws.plans_dir, "demo"), dockerfiles_dir=ws.dockerfiles_dir)
    with RegistryClient() as client:
        nights = [Night(ws, loaded, NightOptions(), client, io.StringIO()) for _ in range(2)]
        passed = nights[0].record(
            PlanNight("demo", REPRODUCIBLE, 0, "all 3 diffIDs equal"), "t", {}
        )
        failed = nights[1].record(PlanNight("demo", OVERLAY_DRIFT, 1, "a guard broke"), "t", {})
    assert (passed.status, passed.exit_code) == (REJECTED, 1)
    assert passed.detail.startswith("all 3 diffIDs equal; the ledger refused the night's note: ")
    assert "torn" in passed.detail
    assert passed.evidence is not None and passed.evidence.exists()  # the verdict's evidence
    assert (failed.status, failed.exit_code) == (OVERLAY_DRIFT, 1)  # already failing: kept
    assert "the ledger refused the night's note" in failed.detail
    assert ws.ledger_path.read_bytes() == torn  # nothing appended behind the torn line
