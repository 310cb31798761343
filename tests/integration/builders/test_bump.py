"""`imagekit plans bump` on a plan of several platforms, against a real registry.

The plan pins an index; its one overlay must fit the image of each platform
(tests/support/two_platforms.py).
"""

from __future__ import annotations

import secrets

import pytest

from imagekit.workspace import Workspace
from tests.support.images import Writer
from tests.support.registries import RunningRegistry
from tests.support.two_platforms import (
    DESTINATION,
    ORIGINAL,
    UPSTREAM_CHANGED,
    image,
    index,
    pinned_plan,
    plans_json,
    sha256,
)

pytestmark = pytest.mark.integration


def _bump(ws: Workspace, *args: str) -> tuple[int, dict[str, object]]:
    return plans_json(ws, "bump", *args)


def test_a_two_platform_plan_is_bumped_when_each_platforms_overlay_still_fits(
    registry: RunningRegistry, workspace: Workspace
) -> None:
    repo = f"bump/two-{secrets.token_hex(3)}"
    with Writer(registry.host) as writer:
        plan = pinned_plan(writer, workspace, repo, "two")
        v1, pinned, path, before = plan.images, plan.reference, plan.path, plan.text
        # The tag moves for a platform the plan does not build: nothing to change.
        extra = image(writer, repo, "ppc64le", ORIGINAL)
        moved_elsewhere = writer.index(
            repo, "latest", [(v1["amd64"], "linux/amd64"), (v1["arm64"], "linux/arm64"),
                             (extra, "linux/ppc64le")],
        )  # fmt: skip
        assert moved_elsewhere != pinned
        code, current = _bump(workspace, "two")
        assert code == 0, current
        assert current["status"] == "current"
        upstream = current["upstream"]
        assert isinstance(upstream, dict) and upstream["state"] == "current"
        assert "moved for other platforms only" in str(upstream["detail"])
        assert path.read_text() == before
        # Now arm64's image changes (its overlaid file does not): bumped, each platform guarded.
        v2 = {"amd64": v1["amd64"], "arm64": image(writer, repo, "arm64", ORIGINAL, b"fix")}
        moved = index(writer, repo, v2)
    code, bumped = _bump(workspace, "two")
    assert code == 0, bumped
    assert bumped["status"] == "bumped"
    assert bumped["guard"] is None  # several platforms: one guard each
    guards = bumped["guards"]
    assert isinstance(guards, dict) and sorted(guards) == ["linux/amd64", "linux/arm64"]
    for report in guards.values():
        [check] = report["checks"]
        assert check["destination"] == DESTINATION and check["verdict"] == "ok", check
        assert check["found"] == f"sha256:{sha256(ORIGINAL)}"
    upstream = bumped["upstream"]
    assert isinstance(upstream, dict)
    assert f"linux/arm64: {v1['arm64'].digest} -> {v2['arm64'].digest}" in str(upstream["detail"])
    assert "linux/amd64:" not in str(upstream["detail"])  # amd64 did not move
    new_digest = moved.rsplit("@", 1)[1]
    old_digest = pinned.rsplit("@", 1)[1]
    assert path.read_text() == before.replace(old_digest, new_digest)
    code, again = _bump(workspace, "two")
    assert code == 0 and again["status"] == "current"


def test_a_two_platform_bump_is_refused_naming_the_platform_whose_file_drifted(
    registry: RunningRegistry, workspace: Workspace
) -> None:
    repo = f"bump/drift-{secrets.token_hex(3)}"
    with Writer(registry.host) as writer:
        plan = pinned_plan(writer, workspace, repo, "drift")
        v1, path, before = plan.images, plan.path, plan.text
        changed = image(writer, repo, "arm64", UPSTREAM_CHANGED)
        index(writer, repo, {"amd64": v1["amd64"], "arm64": changed})
    code, refused = _bump(workspace, "drift")
    assert code == 1, refused
    error = refused["error"]
    assert isinstance(error, dict)
    assert error["type"] == "BaseDrift"
    [drifted] = error["drifted"]
    assert drifted["platform"] == "linux/arm64" and drifted["path"] == DESTINATION
    assert drifted["found"] == f"sha256:{sha256(UPSTREAM_CHANGED)}"
    assert "for linux/arm64" in str(error["message"])
    assert path.read_text() == before  # nothing written
