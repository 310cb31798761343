"""`imagekit nightly` on the demo plan: an unchanged plan, then a plan whose pin moved.

The accepted image comes from a real pipeline run (two real registries, the base fixture):
it is pushed to the registry that holds the base, where the engine mounts the base's layer
instead of compressing and uploading it again, and mirrored to a registry of its own.
A rebuild without cache of the unchanged plan must come out reproducible or equivalent, and
say which; after the demo plan's six pin changes, the night must name that change. A
candidate that its assertions reject, or whose build record the real ledger refuses (a torn
last line), fails the night as ``rejected``: never a pass, never an error.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from imagekit.flows.nightly.options import NightOptions
from imagekit.flows.nightly.report import NightlyResult
from imagekit.flows.nightly.result import CHANGED, EQUIVALENT, REJECTED, REPRODUCIBLE
from imagekit.flows.nightly.run import run_nightly
from imagekit.flows.pipeline import PipelineOptions, run_pipeline
from imagekit.ledger import read_records, verify
from imagekit.ledger.lockfile import render_lock
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.engine_refs import remember_images, removing
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
PIN, MOVED = "six==1.16.0", "six==1.17.0"


@dataclass(frozen=True)
class Accepted:
    workspace: Workspace
    base: str
    final_reference: str


def _workspace(root: Path) -> Workspace:
    (root / "manifests").mkdir(parents=True)
    (root / "evidence").mkdir()
    shutil.copy2(REPO_ROOT / "manifests" / "demo.yaml", root / "manifests" / "demo.yaml")
    shutil.copytree(REPO_ROOT / "dockerfiles", root / "dockerfiles")
    return Workspace.at(root)


@pytest.fixture(scope="module")
def accepted(
    engine: Engine,
    base_image: BaseImage,
    registry: RunningRegistry,
    make_registry: Callable[..., RunningRegistry],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Accepted]:
    """One complete pipeline of the demo plan: the image the nights compare with."""
    ws = _workspace(tmp_path_factory.mktemp("nightly") / "project")
    assert PIN in (ws.plans_dir / "demo.yaml").read_text()
    assert base_image.registry_host == registry.host  # the push mounts the base's layer
    options = PipelineOptions(
        registry=registry.host,
        mirror=make_registry("none").host,
        base_override=base_image.reference,
    )
    with removing(engine) as made:
        result = run_pipeline(ws, "demo", options)
        remember_images(result.to_json(), made)
        assert result.ok, [s.to_json() for s in result.stages]
        assert result.final_reference is not None
        yield Accepted(ws, base_image.reference, result.final_reference)


def test_unchanged_plan_is_reproducible_or_equivalent(accepted: Accepted) -> None:
    ws = accepted.workspace
    before, recorded = render_lock(ws)["images"]["demo"], len(read_records(ws.ledger_path))
    night = run_nightly(ws, ["demo"], NightOptions(base_override=accepted.base))
    assert night.exit_code == 0, night.to_json()
    plan = night.plans[0]
    # Which one it is depends on BuildKit's timestamps; the report must say which.
    assert plan.status in (REPRODUCIBLE, EQUIVALENT), plan.to_json()
    assert plan.baseline is not None
    assert plan.baseline.reference == accepted.final_reference
    assert plan.baseline.record_kind == "final-pull"
    assert plan.audit_status == plan.baseline.audit_status
    comparison = plan.comparison
    assert comparison is not None and str(comparison.verdict) == str(plan.status)
    if plan.status == EQUIVALENT:
        assert comparison.diff is not None
        assert not comparison.diff.packages and not comparison.diff.files
        assert comparison.shared_layers >= 1  # the pinned base is the same layer
    assert f"**{plan.status}**" in night.markdown()
    note = read_records(ws.ledger_path)[-1]
    assert note.kind == "note" and note.status == f"nightly-{plan.status}"
    assert plan.evidence is not None and plan.evidence.exists()
    assert verify(ws).ok
    # The night's build is its candidate's: the lock still names the accepted image.
    [build] = [r for r in read_records(ws.ledger_path)[recorded:] if r.kind == "build"]
    assert build.details["candidate"] is not None
    after = render_lock(ws)["images"]["demo"]
    assert after["prepared_image"] == before["prepared_image"]
    assert after["audit"] == before["audit"]


def _night_with_edit(accepted: Accepted, old: str, new: str) -> NightlyResult:
    """A night of the demo plan with ``old`` replaced by ``new`` in it, the plan restored."""
    plan_file = accepted.workspace.plans_dir / "demo.yaml"
    original = plan_file.read_text()
    assert old in original
    plan_file.write_text(original.replace(old, new))
    try:
        return run_nightly(accepted.workspace, ["demo"], NightOptions(base_override=accepted.base))
    finally:
        plan_file.write_text(original)


def test_changed_pin_is_named(accepted: Accepted) -> None:
    night = _night_with_edit(accepted, PIN, MOVED)
    plan = night.plans[0]
    assert plan.status == CHANGED, plan.to_json()
    assert night.exit_code == 0  # a change is reported loudly, not failed
    assert any(c.startswith("python six 1.16.0 -> 1.17.0") for c in plan.changes), plan.changes
    assert plan.comparison is not None and plan.comparison.diff is not None
    changed_files = {f.path for f in plan.comparison.diff.files}
    assert any("six" in path for path in changed_files)
    markdown = night.markdown()
    assert "## demo: what changed" in markdown and "python six 1.16.0 -> 1.17.0" in markdown


def _candidates(engine: Engine) -> set[str]:
    """The night's candidate tags of the demo plan that the engine holds."""
    out = subprocess.run(
        [engine.client_path, "images", "--format", "{{.Repository}}:{{.Tag}}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return {line for line in out.split() if ":nightly-" in line and "/demo:" in f"/{line}"}


def test_a_candidate_its_assertions_reject_fails_the_night_as_rejected(
    engine: Engine, accepted: Accepted
) -> None:
    ws = accepted.workspace
    before = len(read_records(ws.ledger_path))
    night = _night_with_edit(accepted, "find_spec: [six,", "find_spec: [imagekit_absent, six,")
    plan = night.plans[0]
    assert plan.status == REJECTED, plan.to_json()
    assert plan.exit_code == 1 and night.exit_code == 1
    assert "imagekit_absent" in plan.detail
    new = read_records(ws.ledger_path)[before:]
    assert [(r.kind, r.status) for r in new][:1] == [("rejected-build", "rejected")], new
    assert "**rejected**" in night.markdown() and "Night FAILED" in night.markdown()
    assert verify(ws).ok


def test_a_build_record_the_ledger_refuses_fails_the_night_as_rejected(
    engine: Engine, accepted: Accepted
) -> None:
    ws = accepted.workspace
    original = ws.ledger_path.read_bytes()
    torn = original + b'{"seq": 999, "kind": "bui'  # a last line cut short, no newline
    ws.ledger_path.write_bytes(torn)
    before = _candidates(engine)
    try:
        night = run_nightly(ws, ["demo"], NightOptions(base_override=accepted.base))
        after = ws.ledger_path.read_bytes()
    finally:
        ws.ledger_path.write_bytes(original)
    plan = night.plans[0]
    assert plan.status == REJECTED, plan.to_json()
    assert plan.exit_code == 1 and night.exit_code == 1
    assert "the ledger refused" in plan.detail and "torn" in plan.detail, plan.detail
    assert plan.image_id is not None  # the build itself finished; its record did not
    assert after == torn  # nothing was appended behind the torn line
    assert _candidates(engine) == before  # the unrecorded candidate left nothing behind
    assert "**rejected**" in night.markdown()


def test_unreachable_base_fails_the_night_with_3(
    engine: Engine, workspace: Workspace, docker_config: Path
) -> None:
    from tests.support.registries import free_port

    gone = f"127.0.0.1:{free_port()}/imagekit-test/base@sha256:{'e' * 64}"
    night = run_nightly(workspace, ["demo"], NightOptions(base_override=gone))
    plan = night.plans[0]
    assert plan.status == "base-unreachable", plan.to_json()
    assert plan.exit_code == 3 and night.exit_code == 3
    assert "cannot be reached" in plan.detail
    assert "FAILED (could not finish)" in night.markdown()
