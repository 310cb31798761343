"""A night on the pinned base: rebuilt without cache, audited, compared with the accepted
image; a change is reported, an audit worse than the accepted one fails."""

from __future__ import annotations

from imagekit.audit.report import audit_rank
from imagekit.errors import CheckFailed, ImagekitError
from imagekit.flows.nightly.candidate import build_candidate, rejected
from imagekit.flows.nightly.night import Night
from imagekit.flows.nightly.result import (
    AUDIT_WORSE,
    BASE_UNREACHABLE,
    NO_BASELINE,
    PREFLIGHT_NO,
    REJECTED,
    REPRODUCIBLE,
    NightVerdict,
    PlanNight,
    changes,
    content_detail,
)
from imagekit.plans.upstream import UpstreamTag


def rebuild(night: Night, upstream: UpstreamTag | None) -> PlanNight:
    """Today's night: rebuild from the pinned base and compare with the accepted image."""
    loaded, name, client = night.loaded, night.name, night.client
    try:
        client.resolve(loaded.base, loaded.platform)
    except CheckFailed as exc:
        return PlanNight(
            name, BASE_UNREACHABLE, 1, f"the pinned base fails: {exc.message}", upstream=upstream
        )
    except ImagekitError as exc:
        return PlanNight(
            name,
            BASE_UNREACHABLE,
            3,
            f"the pinned base {loaded.base} cannot be reached: {exc.message}",
            upstream=upstream,
        )
    baseline = night.baseline
    if baseline is None:
        return PlanNight(
            name,
            NO_BASELINE,
            1,
            f"nothing accepted to compare with: run `imagekit pipeline {name}` once to accept "
            "an image",
            upstream=upstream,
        )
    said_no = night.preflight(str(loaded.base))
    if said_no is not None:
        return PlanNight(
            name, PREFLIGHT_NO, 1, f"doctor said no: {said_no}", baseline=baseline,
            upstream=upstream,
        )  # fmt: skip
    try:
        candidate = build_candidate(night, str(loaded.base))
    except CheckFailed as exc:
        why, image = rejected(exc)
        return PlanNight(
            name, REJECTED, 1, why, baseline=baseline, image_id=image, upstream=upstream
        )
    comparison = candidate.comparison
    verdict = NightVerdict(comparison.verdict)
    status, code, detail = verdict, 0, content_detail(comparison)
    if audit_rank(candidate.audit_status) > audit_rank(baseline.audit_status):
        status, code = AUDIT_WORSE, 1
        detail = (
            f"audit {candidate.audit_status} is worse than the accepted "
            f"{baseline.audit_status}; content {verdict}"
        )
    result = PlanNight(
        name, status, code, detail, baseline=baseline, image_id=candidate.image_id,
        audit_status=candidate.audit_status, comparison=comparison,
        changes=changes(comparison), upstream=upstream, candidate=candidate.pushed,
        builder=candidate.builder,
    )  # fmt: skip
    how = "same diffIDs" if verdict is REPRODUCIBLE else "layer contents"
    return night.record(
        result,
        f"{night.options.rebuild()} on the pinned base compared with the accepted "
        f"{baseline.reference}: {verdict} ({how}; timestamps and bytecode caches set apart); "
        "proves nothing about GPU service",
        {
            "image": candidate.image_id,
            "base": str(loaded.base),
            "source": baseline.reference,
            "pushed": candidate.pushed,
        },
    )
