"""`imagekit doctor [NAME]`: the preflight, one line a check; exit 1 when any says no."""

from __future__ import annotations

import click

from imagekit.cli.contract import run, unless_ok
from imagekit.cli.options import json_option, registry_options
from imagekit.cli.output import echo_lines
from imagekit.flows.doctor import DoctorReport, run_doctor
from imagekit.workspace import Workspace


@click.command("doctor")
@click.argument("name", required=False)
@click.option("--base", "base_override", help="Use this pinned base instead of the plan's.")
@click.option("--registry", "registry", help="The registry the image will be pushed to.")
@click.option("--mirror", "mirror", help="The registry the image will be mirrored to.")
@registry_options
@json_option
def command(
    name: str | None,
    base_override: str | None,
    registry: str | None,
    mirror: str | None,
    as_json: bool,
) -> None:
    """Check the engine, BuildKit, disk, platform, registries and CA bundle before a build."""
    registries = [(role, host) for role, host in (("push", registry), ("mirror", mirror)) if host]

    def human(report: DoctorReport) -> None:
        echo_lines(report.lines())
        click.echo(
            "doctor: all checks passed"
            if report.ok
            else f"doctor: {len(report.failed)} check(s) said no"
        )

    run(
        lambda: run_doctor(
            Workspace.from_env(), name, registries=registries, base_override=base_override
        ),
        as_json=as_json,
        human=human,
        exit_code=unless_ok,
    )
