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
            else:
                click.echo(f"{r.path}: {state} ({r.digest})")
            for name in r.not_rendered:
                if check:
                    said = "STALE: the plan does not render it (`imagekit render` removes it)"
                else:
                    said = "removed: the plan does not render it"
                click.echo(f"{r.path.parent / name}: {said}")

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
                "not_rendered": [str(r.path.parent / name) for name in r.not_rendered],
            }
            for r in results
        ],
        exit_code=lambda results: 1 if check and any(r.changed for r in results) else 0,
    )
