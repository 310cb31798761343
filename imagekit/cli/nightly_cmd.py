"""`imagekit nightly [--plans P,...] [--markdown FILE]`: rebuild, audit and compare each plan."""

from __future__ import annotations

from pathlib import Path

import click

from imagekit.cli._common import json_option, run
from imagekit.flows.nightly import NightlyResult, run_nightly
from imagekit.workspace import Workspace


@click.command("nightly")
@click.option("--plans", help="Comma-separated plan names (default: every plan).")
@click.option(
    "--base", "base_override", help="Use this pinned base instead of the plan's (one plan only)."
)
@click.option(
    "--markdown",
    "markdown",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append a job summary in markdown to FILE (e.g. $GITHUB_STEP_SUMMARY).",
)
@click.option(
    "--registry",
    "candidate_registry",
    help="Push rebuilt candidates here (host or prefix; default: beside the accepted image).",
)
@click.option("--keep-images", is_flag=True, help="Keep the rebuilt images in the engine.")
@json_option
def command(
    plans: str | None,
    base_override: str | None,
    markdown: Path | None,
    candidate_registry: str | None,
    keep_images: bool,
    as_json: bool,
) -> None:
    """Rebuild every plan without cache and compare with its last accepted image."""
    names = [p.strip() for p in plans.split(",") if p.strip()] if plans else None

    def action() -> NightlyResult:
        result = run_nightly(
            Workspace.from_env(),
            names,
            base_override=base_override,
            keep_images=keep_images,
            candidate_registry=candidate_registry,
        )
        if markdown is not None:
            with markdown.open("a", encoding="utf-8") as fh:
                fh.write(result.markdown())
        return result

    def human(result: NightlyResult) -> None:
        for line in result.lines():
            click.echo(line)

    run(
        action,
        as_json=as_json,
        human=human,
        to_json=NightlyResult.to_json,
        exit_code=lambda result: result.exit_code,
    )
