"""The `imagekit` command: parses, calls one library function, renders. Nothing else.

Each command group lives in its own module exposing ``command`` (a click command or group);
they are added below in the order `imagekit --help` lists them.
"""

from __future__ import annotations

import importlib

import click

from imagekit import __version__

_COMMAND_MODULES: tuple[str, ...] = (
    # one line a command module; keep this list in the order of `imagekit --help`
    "imagekit.cli.inspect_cmd",
    "imagekit.cli.plans_cmd",
    "imagekit.cli.render_cmd",
    "imagekit.cli.build_cmd",
    "imagekit.cli.audit_cmd",
    "imagekit.cli.doctor_cmd",
    "imagekit.cli.pipeline_cmd",
    "imagekit.cli.nightly_cmd",
    "imagekit.cli.mirror_cmd",
    "imagekit.cli.pull_cmd",
    "imagekit.cli.ledger_cmd",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="imagekit")
def main() -> None:
    """Build, audit, mirror and record the container images that serve large models."""


for _name in _COMMAND_MODULES:
    main.add_command(importlib.import_module(_name).command)
