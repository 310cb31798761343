"""`imagekit nightly [--plans P,...] [--watch-only] [--proposals DIR] [--write] [--markdown FILE]
[--buildkit ADDR | --buildx-builder NAME] [--cache-ref REF]`: watch each plan's base tag,
rebuild, audit and compare."""

from __future__ import annotations

from pathlib import Path

import click

from imagekit.cli.contract import run
from imagekit.cli.options import (
    DIR_PATH,
    FILE_PATH,
    builder_options,
    json_option,
    parsed,
    registry_options,
)
from imagekit.cli.output import echo_lines
from imagekit.flows.nightly.options import NightOptions
from imagekit.flows.nightly.report import NightlyResult
from imagekit.flows.nightly.run import run_nightly
from imagekit.workspace import Workspace


@click.command("nightly")
@click.option("--plans", help="Comma-separated plan names (default: every plan).")
@click.option(
    "--base", "base_override", help="Use this pinned base instead of the plan's (one plan only)."
)
@click.option(
    "--markdown",
    "markdown",
    type=FILE_PATH,
    help="Append a job summary in markdown to FILE (e.g. $GITHUB_STEP_SUMMARY).",
)
@click.option(
    "--registry",
    "candidate_registry",
    help="Push rebuilt candidates here (host or prefix; default: beside the accepted image).",
)
@click.option("--keep-images", is_flag=True, help="Keep the rebuilt images in the engine.")
@click.option(
    "--watch-only",
    is_flag=True,
    help="Only ask each plan's base tag (HEAD); rebuild nothing whose tag did not move.",
)
@click.option(
    "--proposals",
    "proposals_dir",
    type=DIR_PATH,
    help="Write each ready candidate's plan change to DIR/NAME.diff (for a CI artifact).",
)
@click.option(
    "--write",
    "write_plans",
    is_flag=True,
    help="Apply the plan change of each ready candidate to manifests/NAME.yaml.",
)
@builder_options
@registry_options
@json_option
def command(
    plans: str | None,
    base_override: str | None,
    markdown: Path | None,
    candidate_registry: str | None,
    keep_images: bool,
    watch_only: bool,
    proposals_dir: Path | None,
    write_plans: bool,
    as_json: bool,
) -> None:
    """Watch each plan's base tag; build a candidate where it moved, rebuild where not.

    A moved tag gets a candidate on the new digest (overlay guards checked first, audited,
    compared with the accepted image and the old base) and a proposed one-line plan diff.
    With --buildkit or --buildx-builder the candidates are built there, as `imagekit build`
    builds them, and pushed by digest; the engine only audits them.
    """
    names = [p.strip() for p in plans.split(",") if p.strip()] if plans is not None else None

    def action() -> NightlyResult:
        result = run_nightly(Workspace.from_env(), names, parsed(NightOptions))
        if markdown is not None:
            with markdown.open("a", encoding="utf-8") as fh:
                fh.write(result.markdown())
        return result

    run(
        action,
        as_json=as_json,
        human=lambda result: echo_lines(result.lines()),
        exit_code=lambda result: result.exit_code,
    )
