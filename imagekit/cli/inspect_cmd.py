"""`imagekit inspect REF`: parse options, call imagekit.inspect, render."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from imagekit.cli.contract import run
from imagekit.cli.options import json_option, registry_options
from imagekit.inspect import inspect_image
from imagekit.progress import human_bytes
from imagekit.registry import ResolvedImage


def _human(image: ResolvedImage) -> None:
    # Digests are never cut short: the tables take the width their content needs (they do
    # not expand), even when that is wider than the terminal.
    console = Console(width=1000)
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    facts.add_row("source", str(image.reference))
    if image.index_digest is not None:
        facts.add_row("index", f"{image.index_digest}  ({image.index_media_type})")
        for entry in image.index_manifests:
            facts.add_row("  in the index", f"{entry.platform or '-'}  {entry.digest}")
    facts.add_row("platform", str(image.platform) if image.platform else "-")
    facts.add_row("manifest", f"{image.manifest_digest}  ({image.manifest_media_type})")
    facts.add_row("config", f"{image.config_digest}  ({image.manifest.config.mediaType})")
    facts.add_row(
        "layers",
        f"{len(image.layers)}, {image.compressed_layer_bytes} bytes compressed "
        f"({human_bytes(image.compressed_layer_bytes)})",
    )
    console.print(facts)
    layers = Table(show_edge=False)
    for header in ("#", "media type", "size", "digest", "diff_id"):
        layers.add_column(header, justify="right" if header in ("#", "size") else "left")
    for number, (layer, diff_id) in enumerate(zip(image.layers, image.diff_ids, strict=True)):
        layers.add_row(
            str(number), layer.media_type, str(layer.size), str(layer.digest), str(diff_id)
        )
    console.print(layers)


@click.command("inspect")
@click.argument("reference")
@click.option(
    "--platform",
    metavar="OS/ARCH[/VARIANT]",
    help="Platform to pick from an index (default linux/amd64).",
)
@registry_options
@json_option
def command(reference: str, platform: str | None, as_json: bool) -> None:
    """Show what REFERENCE resolves to: index, platform, manifest, config and layers."""
    run(
        lambda: inspect_image(reference, platform=platform),
        as_json=as_json,
        human=_human,
    )
