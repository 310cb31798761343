"""The plans of a workspace: each listed with its validation result, or one validated.

`imagekit plans list` and `plans validate` read every plan file through imagekit.plans.load;
a plan that does not validate is listed with its error, never skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagekit.errors import PlanError
from imagekit.plans.load import load_plan, plan_path


@dataclass(frozen=True)
class PlanSummary:
    name: str
    path: Path
    base: str
    steps: int
    audit_profile: str
    error: str | None
    hint: str | None = None  # what to do about the error, as the error says it


def list_plans(plans_dir: Path, dockerfiles_dir: Path) -> list[PlanSummary]:
    """Every *.yaml in the plans folder, with its validation result (errors are listed)."""
    out: list[PlanSummary] = []
    for path in sorted(plans_dir.glob("*.yaml")):
        try:
            loaded = load_plan(path, dockerfiles_dir=dockerfiles_dir)
        except PlanError as exc:
            out.append(PlanSummary(path.stem, path, "", 0, "", exc.message, exc.hint))
            continue
        plan = loaded.plan
        out.append(
            PlanSummary(
                plan.name, path, plan.base.reference, len(plan.steps), plan.audit_profile, None
            )
        )
    return out


def validate_plans(
    plans_dir: Path, dockerfiles_dir: Path, name: str | None, base_override: str | None = None
) -> list[PlanSummary]:
    """Validate one plan (raising its PlanError) or every plan (listing each one's error).

    ``base_override`` validates one plan as a build with --base would load it.
    """
    if base_override is not None and name is None:
        raise PlanError(
            "--base replaces one plan's base: name the plan",
            hint="imagekit plans validate NAME --base REPO@sha256:...",
        )
    if name is not None:
        loaded = load_plan(
            plan_path(plans_dir, name), dockerfiles_dir=dockerfiles_dir, base_override=base_override
        )
        plan = loaded.plan
        return [
            PlanSummary(
                plan.name,
                loaded.path,
                str(loaded.base),
                len(plan.steps),
                plan.audit_profile,
                None,
            )
        ]
    items = list_plans(plans_dir, dockerfiles_dir)
    if not items:
        raise PlanError(
            f"no plans (*.yaml) in {plans_dir}", hint="set IMAGEKIT_PLANS_DIR or run in the project"
        )
    return items
