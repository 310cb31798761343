"""The plan edit of `plans bump`: one line changes, every other byte stays, the render follows.

The guard half of a bump needs a registry and runs in tests/integration/flows/
test_nightly_watch.py; here the text edit and the proposal, on a copy of the demo plan.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from imagekit.builders.bump import _target_digest, propose, rebased_text
from imagekit.errors import PlanError, UsageError
from imagekit.plans.load import load_plan, parse_plan
from imagekit.plans.model import LoadedPlan
from imagekit.plans.render import render_plans
from imagekit.refs import Digest
from imagekit.workspace import Workspace

ROOT = Path(__file__).resolve().parents[3]
NEW = Digest("sha256:" + "a" * 64)
OLD_HEX = "52f6e63cdccafc5631f9415e9d779bd9546a50b263c76fe417ac474c068f6fb6"


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "project"
    (root / "manifests").mkdir(parents=True)
    shutil.copy2(ROOT / "manifests" / "demo.yaml", root / "manifests" / "demo.yaml")
    shutil.copytree(ROOT / "dockerfiles" / "demo", root / "dockerfiles" / "demo")
    return Workspace.at(root)


def _load(ws: Workspace, name: str = "demo") -> LoadedPlan:
    return load_plan(ws.plans_dir / f"{name}.yaml", dockerfiles_dir=ws.dockerfiles_dir)


def test_the_plan_diff_is_one_line_and_every_other_byte_stays(ws: Workspace) -> None:
    loaded = _load(ws)
    proposal = propose(ws, loaded, NEW)
    before = loaded.raw.decode()
    after = proposal.plan_file.after.decode()
    assert after == before.replace(OLD_HEX, NEW.hex)  # comments, quotes, flow lists kept
    diff = proposal.plan_diff.splitlines()
    assert diff[:2] == ["--- a/manifests/demo.yaml", "+++ b/manifests/demo.yaml"]
    changed = [line for line in diff[2:] if line[:1] in ("+", "-")]
    assert changed == [
        f"-  reference: 127.0.0.1:5000/imagekit-test/base@sha256:{OLD_HEX}",
        f"+  reference: 127.0.0.1:5000/imagekit-test/base@{NEW}",
    ]
    assert proposal.new_reference == f"127.0.0.1:5000/imagekit-test/base@{NEW}"
    assert not proposal.notes


def test_the_committed_render_is_part_of_the_proposal_and_written_with_it(
    ws: Workspace,
) -> None:
    loaded = _load(ws)
    proposal = propose(ws, loaded, NEW)
    assert [f.shown_as for f in proposal.rendered] == ["dockerfiles/demo/Dockerfile"]
    assert f"+FROM --platform=linux/amd64 127.0.0.1:5000/imagekit-test/base@{NEW}" in (
        proposal.patch
    )
    assert proposal.patch.startswith(proposal.plan_diff)
    written = proposal.write(ws)
    assert written == (loaded.path, loaded.overlay_dir / "Dockerfile")
    assert _load(ws).plan.base.reference == proposal.new_reference
    assert [r.changed for r in render_plans(ws, "demo", check=True)] == [False]


def test_a_file_the_render_no_longer_produces_goes_in_the_proposal_and_on_write(
    ws: Workspace, tmp_path: Path
) -> None:
    """A checker committed by an earlier imagekit (imagekit-assert.py beside the Dockerfile):
    the proposal removes it in its patch (which `git apply` takes) and its write removes it."""
    stale = ws.dockerfiles_dir / "demo" / "imagekit-assert.py"
    stale.write_text("SPEC = {}\n")
    loaded = _load(ws)
    proposal = propose(ws, loaded, NEW)
    assert [(f.shown_as, f.removed) for f in proposal.rendered] == [
        ("dockerfiles/demo/Dockerfile", False),
        ("dockerfiles/demo/imagekit-assert.py", True),
    ]
    assert proposal.rendered[1].diff == (
        "--- a/dockerfiles/demo/imagekit-assert.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-SPEC = {}\n"
    )
    copy = tmp_path / "copy"
    shutil.copytree(ws.root, copy)
    subprocess.run(["git", "init", "-q", str(copy)], check=True)
    applied = subprocess.run(
        ["git", "apply", "-"], cwd=copy, input=proposal.patch, text=True, capture_output=True
    )
    assert applied.returncode == 0, applied.stderr
    assert not (copy / "dockerfiles" / "demo" / "imagekit-assert.py").exists()
    proposal.write(ws)
    assert not stale.exists()
    assert [(r.changed, r.not_rendered) for r in render_plans(ws, "demo", check=True)] == [
        (False, ())
    ]
    assert (copy / "dockerfiles" / "demo" / "Dockerfile").read_bytes() == (
        ws.dockerfiles_dir / "demo" / "Dockerfile"
    ).read_bytes()


def test_quotes_flow_mappings_and_line_ends_are_kept(tmp_path: Path) -> None:
    ref = f"r.example/x/y@sha256:{OLD_HEX}"
    for text in (
        f'name: q\n# a comment\nbase:\n  reference: "{ref}"  # pinned\n',
        f"name: q\nbase:\n  reference: '{ref}'\n",
        f"name: q\nbase: {{reference: {ref}, platform: linux/amd64}}\n",
        f"name: q\r\nbase:\r\n  reference:\r\n    {ref}\r\n",
    ):
        loaded = parse_plan(text.encode(), tmp_path / "q.yaml", dockerfiles_dir=tmp_path)
        after, new = rebased_text(loaded, NEW)
        assert after.decode() == text.replace(OLD_HEX, NEW.hex)
        assert new == f"r.example/x/y@{NEW}"


def test_a_reference_written_over_several_lines_is_refused(tmp_path: Path) -> None:
    text = f"name: q\nbase:\n  reference: >-\n    r.example/x/y@sha256:{OLD_HEX}\n"
    loaded = parse_plan(text.encode(), tmp_path / "q.yaml", dockerfiles_dir=tmp_path)
    with pytest.raises(PlanError, match="one line"):
        rebased_text(loaded, NEW)


def test_to_takes_a_digest_or_a_reference_of_the_same_repository(ws: Workspace) -> None:
    loaded = _load(ws)
    assert _target_digest(loaded, str(NEW)) == NEW
    assert _target_digest(loaded, f"127.0.0.1:5000/imagekit-test/base@{NEW}") == NEW
    with pytest.raises(UsageError, match="not a digest of"):
        _target_digest(loaded, f"127.0.0.1:5000/other/repo@{NEW}")
    with pytest.raises(UsageError):
        _target_digest(loaded, "latest")


def test_a_plan_file_that_is_a_link_is_written_through_to_its_target_and_says_so(
    ws: Workspace,
) -> None:
    """manifests/NAME.yaml may be a link into a shared checkout: the bump edits the file the
    link names and keeps the link (replacing it with a copy would silently fork the plan)."""
    shared = ws.root.parent / "shared-plans"
    shared.mkdir()
    plan = ws.plans_dir / "demo.yaml"
    target = shared / "demo.yaml"
    shutil.move(plan, target)
    plan.symlink_to(target)
    loaded = _load(ws)
    proposal = propose(ws, loaded, NEW)
    assert any(
        note == f"manifests/demo.yaml is a symbolic link to {target}: the change is written "
        "through to that file, and the link is kept"
        for note in proposal.notes
    ), proposal.notes
    written = proposal.write(ws)
    assert plan.is_symlink() and plan.resolve() == target
    assert written[0] == target
    assert _load(ws).plan.base.reference == proposal.new_reference
    assert target.read_bytes() == proposal.plan_file.after
