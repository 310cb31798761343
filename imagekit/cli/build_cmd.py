"""`imagekit build NAME`: parse options, run imagekit.builders.choice (its `run`), render it."""

from __future__ import annotations

from pathlib import Path

import click

from imagekit.builders import choice
from imagekit.builders.assemble import AssembleResult
from imagekit.builders.buildkit import BuildResult
from imagekit.builders.choice import BUILDERS, BuildRequest
from imagekit.builders.options import BuildOptions
from imagekit.builders.platforms import PlatformsResult
from imagekit.builders.remote import RemoteResult
from imagekit.cli.contract import run
from imagekit.cli.options import (
    ANY_PATH,
    builder_options,
    json_option,
    parsed,
    registry_options,
    sign_key_option,
)
from imagekit.workspace import Workspace


def _human(result: object) -> None:
    if isinstance(result, AssembleResult):
        click.echo(f"built {result.plan} through the registry: {result.pushed}")
        click.echo(f"tag: {result.tag}")
        click.echo(f"config (image ID): {result.config_digest}")
        if result.index_digest:
            click.echo(f"index: {result.index_digest}")
        for check in result.guard:
            click.echo(f"guard: {check.marker()} ({check.verdict})")
        click.echo(f"assertions: {result.assertions.status}: {result.assertions.scope}")
        click.echo(f"log: {result.log}")
        return
    if isinstance(result, PlatformsResult):
        where = f" on {result.address}" if result.address else ""
        click.echo(f"built {result.plan}{where}: one index {result.pushed}")
        for image in result.images:
            click.echo(f"{image.platform}: {image.manifest_digest}")
            click.echo(f"  assertions: {image.assertions.status}: {image.assertions.scope}")
        click.echo(f"log: {result.log}")
        return
    if isinstance(result, RemoteResult):
        click.echo(f"built {result.plan} on {result.address}: {result.pushed}")
        click.echo(f"config (image ID): {result.config_digest}")
        click.echo(f"assertions: {result.assertions.status}: {result.assertions.scope}")
        click.echo(f"log: {result.log}")
        return
    assert isinstance(result, BuildResult)  # noqa: S101 - build_image returns one of the four
    click.echo(f"built {result.plan}: {result.image_id} tagged {result.tag}")
    click.echo(f"log: {result.log}")
    if result.pushed:
        click.echo(f"pushed: {result.pushed}")


@click.command("build")
@click.argument("name")
@click.option(
    "--builder",
    type=click.Choice(BUILDERS),
    default="auto",
    show_default=True,
    help="registry: assemble through the registry API (no engine, no base pull); engine: "
    "BuildKit; auto: registry when every step is overlay/env/labels/entrypoint/cmd and "
    "--push is given.",
)
@click.option("--tag", help="Tag for the image (default imagekit/NAME:<time>-<id>).")
@click.option("--push", "push", metavar="REPO", help="Push to REPO and report the digest.")
@click.option("--index", is_flag=True, help="Registry builder: tag an index holding the image.")
@click.option(
    "--no-assertions",
    is_flag=True,
    help="Registry builder: accept the image without running the plan's assertions (said so).",
)
@click.option("--no-cache", is_flag=True, help="Build without BuildKit's cache.")
@click.option(
    "--base",
    "base_override",
    help="Build on this pinned base instead of the plan's (REPO@sha256:...).",
)
@click.option(
    "--index-url",
    envvar="PIP_INDEX_URL",
    help="Package index for pip steps [env PIP_INDEX_URL]; passed as a build secret.",
)
@click.option(
    "--ca-bundle",
    type=ANY_PATH,
    envvar="IMAGEKIT_PIP_CA",
    help="CA bundle pip trusts inside the build [env IMAGEKIT_PIP_CA; default: the host's].",
)
@registry_options
@sign_key_option(
    "With --push (engine builder): sign SLSA v1 provenance and store it beside the pushed image.",
)
@builder_options
@json_option
def command(
    name: str,
    builder: str,
    tag: str | None,
    push: str | None,
    index: bool,
    no_assertions: bool,
    no_cache: bool,
    base_override: str | None,
    index_url: str | None,
    ca_bundle: Path | None,
    sign_key: Path | None,
    as_json: bool,
) -> None:
    """Build a plan; the log streams to stderr and into evidence/."""
    run(
        lambda: choice.run(
            Workspace.from_env(),
            BuildRequest(name, parsed(BuildOptions, assertions=not no_assertions)),
        ),
        as_json=as_json,
        human=_human,
    )
