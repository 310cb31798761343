"""`imagekit mirror [--copy] [--verify-diffids] SRC DST`: parse, call imagekit.mirror, render.

Verification is what the command is for, so it always runs; ``--verify-diffids`` is
accepted because it is the documented spelling (`imagekit mirror --verify-diffids SRC DST`)
that scripts already use, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from imagekit import mirror
from imagekit.cli.contract import run
from imagekit.cli.options import DIR_PATH, json_option, registry_options, sign_key_option
from imagekit.cli.output import echo_err
from imagekit.kinds.mirror import MirrorVerdict as Verdict
from imagekit.layers.media import GiB, LayerLimits, MediaTypePolicy, MiB
from imagekit.mirror import MirrorOptions, MirrorReport, MirrorRequest
from imagekit.progress import plural
from imagekit.refs import parse_platform
from imagekit.workspace import Workspace

F = TypeVar("F", bound=Callable[..., Any])


def _human(report: MirrorReport) -> None:
    for role, resolved in (("SRC", report.source), ("DST", report.destination)):
        if resolved:
            index = f" index {resolved['index_digest']}" if resolved["index_digest"] else ""
            click.echo(
                f"{role} {resolved['reference']}{index} {resolved['platform']} manifest "
                f"{resolved['manifest_digest']} config {resolved['config_digest']}"
            )
    for layer in report.layers:
        state = "ok" if layer.match else ("ERROR" if layer.error else "MISMATCH")
        click.echo(
            f"  layer {layer.index:>2} {state:8} {layer.destination_digest[:19]} "
            f"diffID {layer.actual_diff_id or '-'}"
            + (f"  expected {layer.expected_diff_id}" if not layer.match else "")
        )
        for note in layer.notes:
            click.echo(f"           note: {note}")
        if layer.error:
            click.echo(f"           {layer.error}")
    carried = (report.copy or {}).get("attachments")
    if carried:
        said = ", ".join(f"{plural(n, kind[:-1], kind)}" for kind, n in sorted(carried.items()))
        click.echo(f"copied with it: {said}")
    for note in report.notes:
        click.echo(f"note: {note}")
    if report.verdict is Verdict.ERROR:
        # Not a verdict on the content: it could not finish, which is said where errors go.
        echo_err(f"error: {report.message}")
    else:
        click.echo(f"{report.verdict}: {report.message}")
    if report.evidence:
        click.echo(f"evidence: {report.evidence}")
    if report.attestation is not None:
        if report.attestation.get("attested"):
            click.echo(f"attested: {report.attestation['envelope_digest']} (binding DST to SRC)")
        else:
            click.echo(f"NOT ATTESTED: {report.attestation.get('problem')}")


def _size_option(name: str, default: int, text: str) -> Callable[[F], F]:
    """A layer limit: a whole number of the unit its help begins with, its default shown."""
    return click.option(
        name, type=click.IntRange(min=1), default=default, show_default=True, help=text
    )


@click.command("mirror")
@click.argument("source")
@click.argument("destination")
@click.option(
    "--verify-diffids",
    is_flag=True,
    help="Stream every DST layer and compare its diffID with SRC's. Always done; the flag "
    "is accepted as the documented spelling.",
)
@click.option("--copy", "do_copy", is_flag=True, help="Copy SRC to DST first, then verify.")
@click.option(
    "--platform",
    default=None,
    help="os/arch[/variant] to compare; without it, every platform of an index is verified.",
)
@click.option(
    "--allow-config-differences",
    is_flag=True,
    help="Exit 0 on config-differs (the verdict stays config-differs).",
)
@click.option(
    "--media-type-policy",
    type=click.Choice([p.value for p in MediaTypePolicy]),
    default=MediaTypePolicy.DETECT.value,
    show_default=True,
    help="When a layer's bytes are not what its media type says: decompress by the bytes "
    "and note it (detect), or refuse the layer (strict).",
)
@_size_option(
    "--max-layer-size",
    64,
    "GiB of uncompressed tar per layer before it is refused as a decompression bomb.",
)
@_size_option("--max-zstd-window", 128, "MiB of zstd window a layer may ask for.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Parallel layer downloads (default: one per core, at most 4).",
)
@registry_options
@click.option(
    "--docker-config",
    type=DIR_PATH,
    default=None,
    help="Directory of the docker config.json with credentials (default $DOCKER_CONFIG).",
)
@click.option("--no-record", is_flag=True, help="Do not append a ledger record.")
@sign_key_option(
    "On identical or content-identical, sign an attestation on DST binding its digest "
    "to SRC's (`imagekit verify DST` then accepts it on SRC's attestations).",
)
@json_option
def command(
    source: str,
    destination: str,
    verify_diffids: bool,
    do_copy: bool,
    platform: str | None,
    allow_config_differences: bool,
    media_type_policy: str,
    max_layer_size: int,
    max_zstd_window: int,
    workers: int | None,
    docker_config: Path | None,
    no_record: bool,
    sign_key: Path | None,
    as_json: bool,
) -> None:
    """Prove DST holds the same content as SRC, layer by layer by diffID."""

    def action() -> MirrorReport:
        options = MirrorOptions(
            platform=parse_platform(platform) if platform else None,
            copy=do_copy,
            allow_config_differences=allow_config_differences,
            limits=LayerLimits(
                max_uncompressed_bytes=max_layer_size * GiB,
                max_zstd_window=max_zstd_window * MiB,
            ),
            policy=MediaTypePolicy(media_type_policy),
            workers=workers,
            docker_config=docker_config,
            record=not no_record,
            sign_key=sign_key,
        )
        request = MirrorRequest(source, destination, options)
        return mirror.run(Workspace.from_env(), request, log=None if as_json else echo_err)

    def to_json(report: MirrorReport) -> dict[str, Any]:
        if report.evidence:
            echo_err(f"evidence: {report.evidence}")
        return report.to_json()

    run(
        action,
        as_json=as_json,
        human=_human,
        to_json=to_json,
        exit_code=lambda report: report.exit_code,
    )
