"""What a night says of one plan: its verdict, the images compared, its evidence, and the words
a comparison is told in (``changes``, ``content_detail``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from imagekit.builders.bump import GuardedBase, Proposal
from imagekit.layerdiff import ComparisonVerdict, ImageComparison
from imagekit.ledger.accepted import AcceptedImage
from imagekit.plans.upstream import UpstreamTag


class NightVerdict(StrEnum):
    """What a night says of one plan: the comparison's verdict, the watch's, or why none."""

    REPRODUCIBLE = ComparisonVerdict.REPRODUCIBLE.value
    EQUIVALENT = ComparisonVerdict.EQUIVALENT.value
    CHANGED = ComparisonVerdict.CHANGED.value
    AUDIT_WORSE = "audit-worse"
    REJECTED = "rejected"
    NO_BASELINE = "no-baseline"
    BASE_UNREACHABLE = "base-unreachable"
    ERROR = "error"
    PREFLIGHT_NO = "preflight-no"
    BASE_MOVED = "base-moved"
    OVERLAY_DRIFT = "overlay-drift"
    BASE_TAG_GONE = "base-tag-gone"
    BASE_CURRENT = "base-current"
    NOT_WATCHED = "not-watched"


# The members under short names, for the code below and the tests.
(
    REPRODUCIBLE,
    EQUIVALENT,
    CHANGED,
    AUDIT_WORSE,
    REJECTED,
    NO_BASELINE,
    BASE_UNREACHABLE,
    ERROR,
    PREFLIGHT_NO,
    BASE_MOVED,
    OVERLAY_DRIFT,
    BASE_TAG_GONE,
    BASE_CURRENT,
    NOT_WATCHED,
) = NightVerdict


def short(digest: str | None) -> str:
    return f"{digest[:19]}" if digest else "-"


@dataclass(frozen=True)
class PlanNight:
    plan: str
    status: NightVerdict
    exit_code: int
    detail: str
    baseline: AcceptedImage | None = None
    image_id: str | None = None
    audit_status: str | None = None
    comparison: ImageComparison | None = None
    evidence: Path | None = None
    changes: tuple[str, ...] = ()
    upstream: UpstreamTag | None = None
    candidate: str | None = None
    builder: str | None = None
    guard: GuardedBase | None = None
    base_comparison: ImageComparison | None = None
    base_changes: tuple[str, ...] = ()
    proposal: Proposal | None = None
    proposal_file: Path | None = None
    written: tuple[Path, ...] = ()
    notes: tuple[str, ...] = ()

    def inside(self) -> str:
        """What changed inside, in one cell: drifted files, else the named changes."""
        if self.guard is not None and self.guard.drifted:
            return "; ".join(
                f"{c.destination}: {short(c.expected)} in the plan, {short(c.found)} upstream"
                for c in self.guard.drifted
            )
        if self.comparison is None:
            return "-"
        diff = self.comparison.diff
        if diff is None:
            return f"nothing: {_all_equal(len(self.comparison.diff_ids_after))}"
        parts = [p.describe() for p in diff.packages[:3]]
        if len(diff.packages) > 3:
            parts.append(f"{len(diff.packages) - 3} more packages")
        parts.append(f"{len(diff.files)} files changed")
        parts.append(
            f"set apart: {diff.bytecode_changed} bytecode, {diff.timestamp_only} timestamp-only"
        )
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "status": self.status,
            "exit_code": self.exit_code,
            "detail": self.detail,
            "baseline": None
            if self.baseline is None
            else {
                "reference": self.baseline.reference,
                "record_seq": self.baseline.record_seq,
                "record_kind": self.baseline.record_kind,
                "audit_status": self.baseline.audit_status,
            },
            "image_id": self.image_id,
            "audit_status": self.audit_status,
            "changes": list(self.changes),
            "comparison": self.comparison.to_json() if self.comparison else None,
            "evidence": str(self.evidence) if self.evidence else None,
            "upstream": self.upstream.to_json() if self.upstream else None,
            "candidate": self.candidate,
            "builder": self.builder,
            "guard": self.guard.report().to_json() if self.guard else None,
            "base_comparison": self.base_comparison.to_json() if self.base_comparison else None,
            "base_changes": list(self.base_changes),
            "proposal": self.proposal.to_json() if self.proposal else None,
            "proposal_file": str(self.proposal_file) if self.proposal_file else None,
            "written": [str(p) for p in self.written],
            "inside": self.inside(),
            "notes": list(self.notes),
        }


def changes(comparison: ImageComparison) -> tuple[str, ...]:
    diff = comparison.diff
    if diff is None:
        return ()
    lines = [p.describe() for p in diff.packages]
    for change in diff.files[:50]:
        owner = f" [{change.distribution}]" if change.distribution else ""
        fields = f" ({', '.join(change.fields)})" if change.fields else ""
        lines.append(f"file {change.change}: /{change.path}{fields}{owner}")
    if len(diff.files) > 50:
        lines.append(f"... and {len(diff.files) - 50} more files (see the evidence)")
    return tuple(lines)


def content_detail(comparison: ImageComparison) -> str:
    if comparison.diff is None:
        return _all_equal(len(comparison.diff_ids_after))
    d = comparison.diff
    return (
        f"{comparison.shared_layers} layers shared; {len(d.packages)} package changes, "
        f"{len(d.files)} file changes; set apart: {d.bytecode_changed} bytecode, "
        f"{d.timestamp_only} timestamp-only"
    )


def _all_equal(count: int) -> str:
    """``all 3 diffIDs equal``; ``its one diffID equal`` for an image of one layer."""
    return "its one diffID equal" if count == 1 else f"all {count} diffIDs equal"
