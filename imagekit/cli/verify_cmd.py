"""`imagekit verify REF --key PUB`: does the registry hold signed proof that REF passes?"""

from __future__ import annotations

from pathlib import Path

import click

from imagekit.cli.contract import run, unless_ok
from imagekit.cli.options import FILE_PATH, json_option, registry_options, trusted_key_option
from imagekit.gate.verify import GateResult, verify_image


def _human(result: GateResult) -> None:
    click.echo(f"{result.reference}: {'ACCEPTED' if result.ok else 'REFUSED'}")
    click.echo(f"  digest: {result.digest}")
    click.echo(f"  policy: {result.policy}")
    click.echo(f"  scope: {result.scope}")
    for requirement in result.requirements:
        mark = "HOLDS" if requirement.held else "FAILS"
        click.echo(f"  {mark:<6} {requirement.name}: {requirement.why}")
    for skipped in result.skipped:
        click.echo(f"  SKIPPED {skipped.layer}: {skipped.reason}")


@click.command("verify")
@click.argument("reference")
@trusted_key_option(
    "A public key (PEM, ECDSA P-256) whose signatures are trusted for every requirement "
    "the policy names no keys for. Repeatable."
)
@click.option(
    "--policy",
    "policy_path",
    type=FILE_PATH,
    metavar="FILE",
    help="A policy YAML (imagekit/attest/schemas/policy-v1.schema.json), which may name the "
    "keys trusted for each requirement; default: an audit attestation with CPU_PASS or "
    "CPU_PASS_GPU_CLI_DEFERRED, at most 30 days old.",
)
@registry_options
@json_option
def command(
    reference: str,
    key_paths: tuple[Path, ...],
    policy_path: Path | None,
    as_json: bool,
) -> None:
    """Decide from the registry alone (no ledger, no engine) whether REFERENCE's digest holds
    signed attestations that meet the policy. Exit 0 it does, 1 a requirement fails (each
    named), 2 bad input (a key or policy that cannot be used), 3 the registry did not
    answer."""
    run(
        lambda: verify_image(reference, key_paths, policy_path),
        as_json=as_json,
        human=_human,
        exit_code=unless_ok,
    )
