"""`imagekit render [NAME] [--check]`: parse, call imagekit.plans.render, print what was written."""

from __future__ import annotations

import click

from imagekit.cli.contract import run
from imagekit.cli.options import json_option
from imagekit.plans.render import RenderResult, render_plans
from imagekit.workspace import Workspace


@click.command("render")
@click.argument("name", required=False)
@click.option(
    "--check",
    is_flag=True,
    help="Write nothing; exit 1 when a committed Dockerfile differs from its plan's render.",
)
@json_option
def command(name: str | None, check: bool, as_json: bool) -> None:
    """Render dockerfiles/NAME/Dockerfile from manifests/NAME.yaml (every plan without NAME)."""
    ws = Workspace.from_env()

    def human(results: list[RenderResult]) -> None:
        for r in results:
            if check:
                state = "STALE" if r.changed else "up to date"
            else:
                state = "written" if r.changed else "unchanged"
            if r.digest is None:
                state = f"{r.note}" + ("; rendered files left there are STALE" if r.changed else "")
                click.echo(f"{r.path}: {state}")
                continue
            click.echo(f"{r.path}: {state} ({r.digest})")

    run(
        lambda: render_plans(ws, name, check=check),
        as_json=as_json,
        human=human,
        to_json=lambda results: [
            {
                "plan": r.plan,
                "path": str(r.path),
                "sha256": r.digest.hex if r.digest else None,
                "changed": r.changed,
                "note": r.note,
            }
            for r in results
        ],
        exit_code=lambda results: 1 if check and any(r.changed for r in results) else 0,
    )
