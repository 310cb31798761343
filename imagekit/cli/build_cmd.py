"""`imagekit build NAME`: parse options, call imagekit.build.build_plan, render its result."""

from __future__ import annotations

from pathlib import Path

import click

from imagekit.build import BuildOptions, BuildResult, build_plan
from imagekit.cli._common import json_option, run
from imagekit.workspace import Workspace


def _human(result: BuildResult) -> None:
    click.echo(f"built {result.plan}: {result.image_id} tagged {result.tag}")
    click.echo(f"log: {result.log}")
    if result.pushed:
        click.echo(f"pushed: {result.pushed}")


@click.command("build")
@click.argument("name")
@click.option("--tag", help="Tag for the image (default imagekit/NAME:<time>-<id>).")
@click.option("--push", "push", metavar="REPO", help="Push to REPO and report the digest.")
@click.option("--no-cache", is_flag=True, help="Build without BuildKit's cache.")
@click.option("--base", help="Build on this pinned base instead of the plan's (REPO@sha256:...).")
@click.option(
    "--index-url",
    envvar="PIP_INDEX_URL",
    help="Package index for pip steps [env PIP_INDEX_URL]; passed as a build secret.",
)
@click.option(
    "--ca-bundle",
    type=click.Path(path_type=Path),
    envvar="IMAGEKIT_PIP_CA",
    help="CA bundle pip trusts inside the build [env IMAGEKIT_PIP_CA; default: the host's].",
)
@json_option
def command(
    name: str,
    tag: str | None,
    push: str | None,
    no_cache: bool,
    base: str | None,
    index_url: str | None,
    ca_bundle: Path | None,
    as_json: bool,
) -> None:
    """Build a plan on the local engine; the log streams to stderr and into evidence/."""
    options = BuildOptions(
        tag=tag,
        push=push,
        no_cache=no_cache,
        index_url=index_url,
        ca_bundle=ca_bundle,
        base_override=base,
    )
    run(
        lambda: build_plan(Workspace.from_env(), name, options),
        as_json=as_json,
        human=_human,
        to_json=BuildResult.to_json,
    )
