"""`imagekit pipeline NAME --registry R --mirror M`: every stage for one plan, fail-closed."""

from __future__ import annotations

from pathlib import Path

import click

from imagekit.audit.vulns import VulnPolicy
from imagekit.cli.contract import run
from imagekit.cli.options import (
    json_option,
    parsed,
    registry_options,
    sign_key_option,
    vuln_options,
)
from imagekit.cli.output import echo_lines
from imagekit.flows.pipeline import PipelineOptions, PipelineResult, StageStatus, run_pipeline
from imagekit.workspace import Workspace


@click.command("pipeline")
@click.argument("name")
@click.option(
    "--registry",
    required=True,
    envvar="IMAGEKIT_REGISTRY",
    help="Where to push: a registry host (HOST:PORT) or a repository prefix (HOST/team).",
)
@click.option(
    "--mirror",
    required=True,
    envvar="IMAGEKIT_MIRROR",
    help="The second registry to copy to and verify by diffID (host or repository prefix).",
)
@click.option("--base", "base_override", help="Use this pinned base instead of the plan's.")
@click.option(
    "--profile",
    metavar="NAME|FILE",
    help="Audit with this profile instead of the plan's (the audit record names it).",
)
@vuln_options
@registry_options
@sign_key_option(
    "Attest every stage that proves something, beside the image in the registry: the "
    "build's provenance and the audit's verdict on the pushed digest, the mirror's binding, "
    "the final pull.",
)
@json_option
def command(
    name: str,
    registry: str,
    mirror: str,
    base_override: str | None,
    profile: str | None,
    vulns: VulnPolicy,
    sign_key: Path | None,
    as_json: bool,
) -> None:
    """doctor -> build -> audit -> push -> mirror -> final pull -> GPU preflight -> ledger,
    stopping at a no."""

    def human(result: PipelineResult) -> None:
        echo_lines(result.table())
        if result.ok:
            click.echo(f"pipeline {result.plan}: complete; final image {result.final_reference}")
        else:
            failed = next(
                s
                for s in result.stages
                if s.status not in (StageStatus.PASSED, StageStatus.SKIPPED, StageStatus.NOT_RUN)
            )
            click.echo(f"pipeline {result.plan}: stopped at {failed.stage} ({failed.status})")
        click.echo(f"summary: {result.evidence}")

    run(
        lambda: run_pipeline(
            Workspace.from_env(),
            name,
            parsed(PipelineOptions, vulns=vulns),
        ),
        as_json=as_json,
        human=human,
        exit_code=lambda result: result.exit_code,
    )
