"""imagekit/build/record.py: a night's candidate says so in its own build record."""

from __future__ import annotations

from pathlib import Path

from imagekit.build.record import record_build
from imagekit.ledger import BuildDetails, read_records
from imagekit.ledger.accepted import is_candidate_build
from imagekit.plans.load import load_named_plan
from imagekit.workspace import Workspace

DIGEST = "sha256:" + "e" * 64
TAG = "nightly-20261203T032300Z-ab12cd"


def test_a_build_recorded_for_a_nights_candidate_is_marked_and_no_other(
    workspace: Workspace, tmp_path: Path
) -> None:
    """Pushed by digest (as a BuildKit daemon pushes), the image names no candidate tag: only
    the mark ``record_build`` is given tells the night's build from an accepted one."""
    loaded = load_named_plan(workspace, "demo")
    image = f"127.0.0.1:1/team/demo@{DIGEST}"
    log = tmp_path / "build.log"
    log.write_text("built\n")

    for candidate in (None, TAG, None, None):
        record_build(
            workspace, loaded, image, scope="test", evidence=log,
            details=BuildDetails(image_id=DIGEST, builder="buildkit"), candidate=candidate,
        )  # fmt: skip
    records = read_records(workspace.ledger_path)
    assert [r.info.candidate for r in records] == [None, TAG, None, None]
    assert [is_candidate_build(r) for r in records] == [False, True, False, False]
