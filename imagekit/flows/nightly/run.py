"""`imagekit nightly`'s one entry: each plan's night, watched where its base has a tag, rebuilt
where nothing moved; a failing plan does not stop the others."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import TextIO

from imagekit import progress
from imagekit.errors import CheckFailed, ImagekitError, UsageError
from imagekit.flows.nightly.candidate import check_builder
from imagekit.flows.nightly.night import Night
from imagekit.flows.nightly.options import NightOptions
from imagekit.flows.nightly.rebuild import rebuild
from imagekit.flows.nightly.report import NightlyResult
from imagekit.flows.nightly.result import (
    BASE_CURRENT,
    BASE_TAG_GONE,
    BASE_UNREACHABLE,
    ERROR,
    NOT_WATCHED,
    REJECTED,
    PlanNight,
)
from imagekit.flows.nightly.watch import moved
from imagekit.plans.catalogue import list_plans
from imagekit.plans.load import load_named_plan
from imagekit.plans.upstream import TagState, watch_tag
from imagekit.registry.client import RegistryClient
from imagekit.workspace import Workspace


def _night_for_plan(
    workspace: Workspace,
    name: str,
    options: NightOptions,
    client: RegistryClient,
    echo: TextIO,
) -> PlanNight:
    """One plan's night: without a tag to watch it is rebuilt (or, watching only, not
    watched); a tag that moved is a candidate's night (imagekit.flows.nightly.watch), one
    gone is said, one that serves the pin is rebuilt unless the night only watches."""
    loaded = load_named_plan(workspace, name, base_override=options.base_override)
    tag = loaded.plan.base.found_as
    if tag is None:
        if options.watch_only:
            return PlanNight(
                name,
                NOT_WATCHED,
                0,
                "no base.found_as: there is no tag to watch; the plan is rebuilt only "
                "without --watch-only",
            )
        return rebuild(Night(workspace, loaded, options, client, echo), None)
    try:
        with progress.current().waiting(f"{name}: asking what {loaded.base.name}:{tag} serves"):
            upstream = watch_tag(client, loaded)
    except CheckFailed as exc:
        return PlanNight(name, BASE_UNREACHABLE, 1, f"the base tag {tag} fails: {exc.message}")
    except ImagekitError as exc:
        return PlanNight(
            name,
            BASE_UNREACHABLE,
            3,
            f"the base tag {loaded.base.name}:{tag} cannot be reached: {exc.message}",
        )
    night = Night(workspace, loaded, options, client, echo)
    if upstream.state is TagState.MOVED:
        return moved(night, upstream)
    if upstream.state is TagState.GONE:
        result = PlanNight(
            name,
            BASE_TAG_GONE,
            1,
            f"{upstream.detail}; the plan still pins {upstream.pinned}, which nothing upstream "
            "names any more",
            baseline=night.baseline,
            upstream=upstream,
        )
        return night.record(
            result,
            f"{upstream.tag_reference} was asked at {upstream.resolved_at} and is gone",
            {"base": str(loaded.base)},
        )
    if options.watch_only:
        result = PlanNight(
            name,
            BASE_CURRENT,
            0,
            f"{upstream.detail} (resolved {upstream.resolved_at}); nothing was built",
            baseline=night.baseline,
            upstream=upstream,
        )
        return night.record(
            result,
            f"{upstream.tag_reference} was asked at {upstream.resolved_at} and serves the "
            "pinned digest; nothing was built (--watch-only)",
            {"base": str(loaded.base)},
        )
    return rebuild(night, upstream)


def run_nightly(
    workspace: Workspace,
    plans: list[str] | None = None,
    options: NightOptions | None = None,
    *,
    echo: TextIO | None = None,
    client: RegistryClient | None = None,
) -> NightlyResult:
    """Watch, rebuild, audit and compare each plan; a failing plan does not stop the others."""
    echo = echo or sys.stderr
    options = options or NightOptions()
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if plans is None:
        summaries = list_plans(workspace.plans_dir, workspace.dockerfiles_dir)
        names = [s.name for s in summaries]
    elif not plans:
        # An unset variable in a script (`--plans "$PLANS"`) must not become every plan.
        raise UsageError(
            "--plans names no plan (it is empty, or only commas and spaces)",
            hint="name the plans (--plans demo,vllm), or leave --plans out for every plan",
        )
    else:
        names = plans
    if options.base_override is not None and len(names) != 1:
        raise UsageError(
            "--base replaces one plan's base: name exactly one plan with --plans",
            hint="e.g. imagekit nightly --plans demo --base REGISTRY/REPO@sha256:...",
        )
    check_builder(options)
    own = client is None
    client = client or RegistryClient()
    results: list[PlanNight] = []
    try:
        for name in names:
            echo.write(f"nightly: {name} ...\n")
            try:
                night = _night_for_plan(workspace, name, options, client, echo)
            except ImagekitError as exc:
                status = REJECTED if isinstance(exc, CheckFailed) else ERROR
                night = PlanNight(name, status, exc.exit_code, exc.message.splitlines()[0])
            echo.write(f"nightly: {name} {night.status}: {night.detail}\n")
            results.append(night)
    finally:
        if own:
            client.close()
    return NightlyResult(started, tuple(results))
