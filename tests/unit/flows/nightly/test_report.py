"""A night's report: its exit code is the worst plan's, and the job summary names what moved."""

from __future__ import annotations

from pathlib import Path

from imagekit.builders.bump import FileChange, Proposal
from imagekit.flows.nightly.report import NightlyResult
from imagekit.flows.nightly.result import (
    AUDIT_WORSE,
    BASE_CURRENT,
    BASE_MOVED,
    BASE_TAG_GONE,
    BASE_UNREACHABLE,
    CHANGED,
    EQUIVALENT,
    PlanNight,
)
from imagekit.plans.upstream import TagState, UpstreamTag
from imagekit.refs import Digest


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
    assert "| b | - | - | - | **changed** | - |" in text and "a \\| b" in text
    assert "## b: what changed" in text and "- python six 1.16.0 -> 1.17.0" in text
    failed = NightlyResult("t", (PlanNight("d", BASE_UNREACHABLE, 3, "gone"),)).markdown()
    assert "**Night FAILED (could not finish)** (exit 3)" in failed


PINNED, SERVED = Digest("sha256:" + "1" * 64), Digest("sha256:" + "2" * 64)


def _upstream(state: TagState, served: Digest | None) -> UpstreamTag:
    return UpstreamTag(
        "demo", "bookworm", "r/base", PINNED, state, "2026-12-03T03:23:01Z", served, None, "x"
    )


def test_markdown_has_the_watch_table_and_the_proposed_diff(tmp_path: Path) -> None:
    diff = "--- a/manifests/demo.yaml\n+++ b/manifests/demo.yaml\n@@ -1 +1 @@\n-a\n+b\n"
    proposal = Proposal(
        "demo", "r/base@" + PINNED, "r/base@" + SERVED,
        FileChange(tmp_path / "demo.yaml", "manifests/demo.yaml", b"a\n", b"b\n", diff), (),
    )  # fmt: skip
    moved = PlanNight(
        "demo", BASE_MOVED, 0, "moved", upstream=_upstream(TagState.MOVED, SERVED),
        base_changes=("python toml 0.10.1 -> 0.10.2",), proposal=proposal,
    )  # fmt: skip
    current = PlanNight("m3", BASE_CURRENT, 0, "same", upstream=_upstream(TagState.CURRENT, PINNED))
    gone = PlanNight("m4", BASE_TAG_GONE, 1, "404", upstream=_upstream(TagState.GONE, None))
    text = NightlyResult("t", (moved, current, gone)).markdown()
    assert "| plan | tag | pinned | upstream now | verdict | what changed inside |" in text
    short_pinned, short_served = PINNED[:19], SERVED[:19]
    assert (
        f"| demo | `bookworm` | `{short_pinned}` | `{short_served}` | **base-moved** | - |" in text
    )
    assert (
        f"| m3 | `bookworm` | `{short_pinned}` | `{short_pinned}` (same) | **base-current**" in text
    )
    assert "| m4 | `bookworm` | `" + short_pinned + "` | gone | **base-tag-gone**" in text
    assert "## demo: what upstream changed (pinned base -> new base)" in text
    assert "```diff\n--- a/manifests/demo.yaml" in text and "\n+b\n```" in text
    assert "**Night FAILED** (exit 1)" in text
