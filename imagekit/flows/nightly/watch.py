"""A night on a base tag that moved: the overlay guards held against the new base, the bases
compared, a candidate built on the new digest and judged, and the one-line plan change
proposed (and, when asked, written)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imagekit.audit.report import audit_rank
from imagekit.builders.bump import guard_base, propose
from imagekit.errors import CheckFailed, RegistryNotFound
from imagekit.evidence import write_bytes, write_json
from imagekit.flows.nightly.candidate import build_candidate, rejected
from imagekit.flows.nightly.night import Night
from imagekit.flows.nightly.result import (
    AUDIT_WORSE,
    BASE_MOVED,
    NO_BASELINE,
    OVERLAY_DRIFT,
    PREFLIGHT_NO,
    REJECTED,
    PlanNight,
    changes,
    content_detail,
)
from imagekit.image.remote import RegistryImage
from imagekit.layerdiff import ImageComparison, compare_images
from imagekit.plans.upstream import UpstreamTag


def moved(night: Night, upstream: UpstreamTag) -> PlanNight:
    """The tag moved: guard the new base, compare the bases, build and judge a candidate."""
    loaded, name, client, options = night.loaded, night.name, night.client, night.options
    new_base = upstream.new_base()
    assert upstream.served is not None  # noqa: S101 - moved
    night.say(upstream.detail)
    write_json(night.run_dir / "upstream.json", upstream.to_json())
    guarded = guard_base(client, loaded, new_base, log=night.say)
    write_json(night.run_dir / "guard.json", guarded.report().to_json())
    # What upstream changed: the pinned base against the new one, layer by layer.
    base_comparison: ImageComparison | None = None
    notes: list[str] = []
    try:
        base_comparison = compare_images(
            RegistryImage.open(client, str(loaded.base), loaded.platform),
            RegistryImage.open(client, str(new_base), loaded.platform),
        )
        write_json(night.run_dir / "base-comparison.json", base_comparison.to_json())
    except RegistryNotFound as exc:
        notes.append(
            f"the pinned base is no longer served, so the bases were not compared: {exc.message}"
        )
    base_changes = changes(base_comparison) if base_comparison else ()
    images = {"base": str(loaded.base), "upstream": str(new_base)}
    moved = (
        f"{upstream.tag_reference} moved from {upstream.pinned} to {upstream.served} "
        f"(resolved {upstream.resolved_at})"
    )
    common: dict[str, Any] = {
        "baseline": night.baseline,
        "upstream": upstream,
        "guard": guarded,
        "base_comparison": base_comparison,
        "base_changes": base_changes,
    }
    if guarded.drifted:
        first = guarded.drifted[0]
        result = PlanNight(
            name, OVERLAY_DRIFT, 1,
            f"{moved}; the new base breaks {len(guarded.drifted)} overlay guard(s), first "
            f"{first.marker()}; no candidate was built or pushed",
            notes=tuple(notes), **common,
        )  # fmt: skip
        return night.record(
            result,
            f"{moved}; the overlay guards were checked against the new base from its layers "
            "(no pull) and at least one no longer holds: no candidate was built",
            images,
        )
    proposal = propose(night.workspace, loaded, upstream.served)
    write_bytes(night.run_dir / "plan.diff", proposal.plan_diff.encode())
    if proposal.rendered:
        write_bytes(night.run_dir / "proposal.patch", proposal.patch.encode())
    notes.extend(proposal.notes)
    common["proposal"] = proposal
    baseline = night.baseline
    if baseline is None:
        result = PlanNight(
            name, NO_BASELINE, 1,
            f"{moved}; nothing accepted to compare a candidate with: run `imagekit pipeline "
            f"{name}` once to accept an image",
            notes=tuple(notes), **common,
        )  # fmt: skip
        return night.record(result, f"{moved}; no candidate was built (nothing accepted)", images)
    said_no = night.preflight(str(new_base))
    if said_no is not None:
        result = PlanNight(
            name, PREFLIGHT_NO, 1, f"{moved}; doctor said no: {said_no}", notes=tuple(notes),
            **common,
        )  # fmt: skip
        return night.record(result, f"{moved}; no candidate was built (preflight)", images)
    try:
        candidate = build_candidate(night, str(new_base))
    except CheckFailed as exc:
        why, image = rejected(exc)
        result = PlanNight(
            name, REJECTED, 1, f"{moved}; the candidate was rejected: {why}", image_id=image,
            notes=tuple(notes), **common,
        )  # fmt: skip
        return night.record(result, f"{moved}; the candidate build was rejected", images)
    comparison = candidate.comparison
    status, code = BASE_MOVED, 0
    detail = f"{moved}; candidate ready: {content_detail(comparison)} against the accepted image"
    if audit_rank(candidate.audit_status) > audit_rank(baseline.audit_status):
        status, code = AUDIT_WORSE, 1
        detail = (
            f"{moved}; the candidate's audit {candidate.audit_status} is worse than the "
            f"accepted {baseline.audit_status}"
        )
    proposal_file: Path | None = None
    written: tuple[Path, ...] = ()
    if status is BASE_MOVED:
        if options.proposals_dir is not None:
            options.proposals_dir.mkdir(parents=True, exist_ok=True)
            proposal_file = options.proposals_dir / f"{name}.diff"
            proposal_file.write_text(proposal.patch, encoding="utf-8")
        if options.write_plans:
            written = proposal.write(night.workspace)
    result = PlanNight(
        name, status, code, detail, image_id=candidate.image_id,
        audit_status=candidate.audit_status, comparison=comparison,
        changes=changes(comparison), candidate=candidate.pushed, builder=candidate.builder,
        proposal_file=proposal_file, written=written, notes=tuple(notes), **common,
    )  # fmt: skip
    return night.record(
        result,
        f"{moved}; a candidate built on the new digest ({candidate.builder} builder, overlay "
        f"guards checked against the new base) was audited ({candidate.audit_status}) and "
        f"compared with the accepted {baseline.reference} by layer contents (timestamps and "
        "bytecode caches set apart); proves nothing about GPU service",
        {
            **images,
            "image": candidate.image_id,
            "source": baseline.reference,
            "pushed": candidate.pushed,
        },
    )
