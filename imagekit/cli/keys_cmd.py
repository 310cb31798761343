"""`imagekit keys generate PREFIX`: a signing key pair for attestations."""

from __future__ import annotations

from pathlib import Path

import click

from imagekit.attest.keys import KeyPairFiles, generate_key_pair
from imagekit.cli.contract import run
from imagekit.cli.options import json_option


def _human(pair: KeyPairFiles) -> None:
    click.echo(
        f"private key: {pair.private} ({'encrypted' if pair.encrypted else 'NOT encrypted'})"
    )
    click.echo(f"public key:  {pair.public}")
    click.echo(f"key id:      {pair.key_id}")
    if pair.ignored_by is not None:
        click.echo(f"ignored:     {pair.private.name} added to {pair.ignored_by} (never committed)")
    if not pair.encrypted:
        click.echo("note: set IMAGEKIT_KEY_PASSWORD to encrypt the private key")


@click.group("keys")
def command() -> None:
    """Signing keys for attestations (ECDSA P-256, as cosign's)."""


@command.command("generate")
@click.argument("prefix", type=click.Path(path_type=Path, dir_okay=False))
@json_option
def generate(prefix: Path, as_json: bool) -> None:
    """Write PREFIX.key (PKCS#8 PEM, encrypted with IMAGEKIT_KEY_PASSWORD when set) and
    PREFIX.pub. Never overwrites a key. Inside a git work tree, the private key is named in
    the .gitignore beside it, so it is never committed."""
    run(lambda: generate_key_pair(prefix), as_json=as_json, human=_human)
