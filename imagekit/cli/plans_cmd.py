"""`imagekit plans list|show|validate|schema|pin-overlay|bump`: parse, call the stage, render."""

from __future__ import annotations

import json
from typing import Any

import click

from imagekit.cli.contract import run
from imagekit.cli.options import json_option, registry_options
from imagekit.cli.output import dump_json
from imagekit.plans.catalogue import PlanSummary, list_plans, validate_plans
from imagekit.plans.load import load_named_plan
from imagekit.plans.model import LoadedPlan, plan_schema
from imagekit.workspace import Workspace


def _summary_json(item: PlanSummary) -> dict[str, Any]:
    return {
        "name": item.name,
        "path": str(item.path),
        "base": item.base,
        "steps": item.steps,
        "audit_profile": item.audit_profile,
        "valid": item.error is None,
        "error": item.error,
    }


def _plan_json(loaded: LoadedPlan) -> dict[str, Any]:
    return {
        "name": loaded.name,
        "path": str(loaded.path),
        "sha256": loaded.digest.hex,
        "base": str(loaded.base),
        "plan": loaded.plan.model_dump(mode="json"),
    }


@click.group("plans")
def command() -> None:
    """Build plans in manifests/: list, show, validate, schema, pin-overlay, bump."""


@command.command("list")
@json_option
def list_cmd(as_json: bool) -> None:
    """List the plans with their base and whether they validate."""
    ws = Workspace.from_env()

    def human(items: list[PlanSummary]) -> None:
        for item in items:
            state = "ok" if item.error is None else f"INVALID: {item.error}"
            click.echo(f"{item.name:<20} {item.steps:>2} steps  {item.base or '-'}  {state}")

    run(
        lambda: list_plans(ws.plans_dir, ws.dockerfiles_dir),
        as_json=as_json,
        human=human,
        to_json=lambda items: [_summary_json(i) for i in items],
    )


@command.command("show")
@click.argument("name")
@json_option
def show_cmd(name: str, as_json: bool) -> None:
    """Show one plan as parsed (with the sha256 of its file)."""
    ws = Workspace.from_env()
    run(
        lambda: load_named_plan(ws, name),
        as_json=as_json,
        human=lambda loaded: click.echo(json.dumps(_plan_json(loaded), indent=2)),
        to_json=_plan_json,
    )


@command.command("validate")
@click.argument("name", required=False)
@click.option(
    "--base",
    "base",
    help="Validate NAME as a build with this pinned base would load it (REPO@sha256:...).",
)
@json_option
def validate_cmd(name: str | None, base: str | None, as_json: bool) -> None:
    """Validate one plan, or every plan; exit 2 naming the file and key of each error."""
    ws = Workspace.from_env()

    def human(items: list[PlanSummary]) -> None:
        for item in items:
            if item.error is None:
                click.echo(f"{item.name}: ok" + (f" (base {item.base})" if base else ""))
            else:
                click.echo(f"error: {item.error}", err=True)
                if item.hint:
                    click.echo(f"hint: {item.hint}", err=True)

    run(
        lambda: validate_plans(ws.plans_dir, ws.dockerfiles_dir, name, base),
        as_json=as_json,
        human=human,
        to_json=lambda items: [_summary_json(i) for i in items],
        exit_code=lambda items: 2 if any(i.error for i in items) else 0,
    )


@command.command("schema")
@json_option
def schema_cmd(as_json: bool) -> None:
    """Print the JSON Schema of a plan file (always JSON; --json is accepted for scripts)."""
    run(plan_schema, as_json=as_json, human=dump_json, to_json=lambda schema: schema)


@command.command("pin-overlay")
@click.argument("name")
@click.option(
    "--base", "base", help="Use this pinned base instead of the plan's (REPO@sha256:...)."
)
@click.option("--dry-run", is_flag=True, help="Report what would change; write nothing.")
@registry_options
@json_option
def pin_overlay_cmd(name: str, base: str | None, dry_run: bool, as_json: bool) -> None:
    """Fill the overlays' expected sha256 from the files in the base image."""
    from imagekit.builders.pin import PinReport, pin_overlays  # the builders' stack: on use

    ws = Workspace.from_env()

    def human(report: PinReport) -> None:
        for item in report.overlays:
            click.echo(
                f"steps[{item.step}] {item.destination}: {item.status} "
                f"(plan {item.expected}, base {item.found})"
            )
        pending = any(item.status == "updated" for item in report.overlays)
        if report.rewritten:
            state = "rewritten"
        elif pending:
            state = "not written (--dry-run)"
        else:
            state = "unchanged"
        click.echo(f"{report.path}: {state}")

    run(
        lambda: pin_overlays(ws, name, base_override=base, write=not dry_run),
        as_json=as_json,
        human=human,
        to_json=lambda r: {
            "plan": r.plan,
            "path": str(r.path),
            "base": r.base,
            "rewritten": r.rewritten,
            "overlays": [item.__dict__ for item in r.overlays],
        },
    )


@command.command("bump")
@click.argument("name")
@click.option("--to", "to", help="Pin this digest (sha256:...) instead of what found_as serves.")
@click.option(
    "--base", "base", help="Ask this pinned base's repository instead of the plan's (REPO@...)."
)
@click.option("--dry-run", is_flag=True, help="Print the change; write nothing.")
@registry_options
@json_option
def bump_cmd(name: str, to: str | None, base: str | None, dry_run: bool, as_json: bool) -> None:
    """Move the plan's base to the digest its found_as tag serves now, if its overlays still fit.

    Every overlay guard is checked against the new base first (no pull); a drifted file
    refuses the bump (exit 1) with its path and both hashes. Otherwise only the digest in
    base.reference changes (comments and key order kept), and a committed render of the
    plan is rewritten with it.
    """
    from imagekit.builders.bump import (  # the guard's stack: on use
        BumpResult,
        BumpStatus,
        bump_plan,
    )

    ws = Workspace.from_env()

    def human(result: BumpResult) -> None:
        if result.status is BumpStatus.CURRENT:
            click.echo(f"{result.plan}: already pins what its base tag serves; nothing to change")
            return
        assert result.proposal is not None  # noqa: S101 - set for every bump
        click.echo(result.proposal.patch, nl=False)
        for note in result.proposal.notes:
            click.echo(f"note: {note}", err=True)
        if result.status is BumpStatus.PROPOSED:
            click.echo(f"{result.path}: not written (--dry-run)", err=True)
        else:
            click.echo("written: " + ", ".join(str(p) for p in result.written), err=True)

    run(
        lambda: bump_plan(ws, name, to=to, base_override=base, write=not dry_run),
        as_json=as_json,
        human=human,
    )
