"""`imagekit sbom REF`: the image's CycloneDX 1.6 SBOM, read from its layers."""

from __future__ import annotations

from pathlib import Path

import click

from imagekit.cli.contract import run
from imagekit.cli.options import json_option, registry_options, sign_key_option
from imagekit.sbom import Sbom, sbom_of


@click.command("sbom")
@click.argument("reference")
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the CycloneDX JSON here (default: stdout, unless --json).",
)
@registry_options
@sign_key_option(
    "Sign the SBOM as an attestation beside the image (cosign --type cyclonedx).",
)
@json_option
def command(
    reference: str,
    output: Path | None,
    sign_key: Path | None,
    as_json: bool,
) -> None:
    """List REFERENCE's Debian packages and Python distributions (CycloneDX 1.6, each with
    its purl and the diffID of its layer) without running the image."""

    def human(result: Sbom) -> None:
        if output is None:
            click.echo(result.document.decode())
        else:
            click.echo(f"{len(result.components)} components: {output}")

    def action() -> Sbom:
        result = sbom_of(reference, sign_key=sign_key)
        for skipped in result.skipped:  # on stderr whatever the format: never left out silently
            click.echo(f"imagekit sbom: not listed: {skipped.describe()}", err=True)
        if output is not None:
            output.write_bytes(result.document)
        return result

    run(action, as_json=as_json, human=human)
