"""The `imagekit` command: parses, calls one library function, renders. Nothing else.

Each command lives in its own module exposing ``command`` (a click command or group). The
modules are imported only when their command runs: a verification that takes ten seconds
should not also pay for importing the build, audit and ledger stacks at start-up.
"""

from __future__ import annotations

import gc
import importlib
import sys

import click

from imagekit import __version__

# command name -> module; in the order `imagekit --help` lists them.
_COMMAND_MODULES: dict[str, str] = {
    "inspect": "imagekit.cli.inspect_cmd",
    "plans": "imagekit.cli.plans_cmd",
    "render": "imagekit.cli.render_cmd",
    "build": "imagekit.cli.build_cmd",
    "audit": "imagekit.cli.audit_cmd",
    "mirror": "imagekit.cli.mirror_cmd",
    "pull": "imagekit.cli.pull_cmd",
    "ledger": "imagekit.cli.ledger_cmd",
    "doctor": "imagekit.cli.doctor_cmd",
    "pipeline": "imagekit.cli.pipeline_cmd",
    "nightly": "imagekit.cli.nightly_cmd",
}


class _LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMAND_MODULES)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = _COMMAND_MODULES.get(cmd_name)
        if module is None:
            return None
        command = importlib.import_module(module).command
        if _pausing_gc and not gc.isenabled():
            # What start-up created lives until exit; freezing it keeps the collector from
            # scanning it again during the command and once more at exit.
            gc.freeze()
            gc.enable()
        if not isinstance(command, click.Command):  # pragma: no cover - a wiring bug
            raise TypeError(f"{module}.command is not a click command")
        return command


_pausing_gc = False


def entry() -> None:
    """The `imagekit` console script (and `python -m imagekit`): :func:`main`, started fast.

    Loading a command's modules (httpx, pydantic and its schemas) creates a few hundred
    thousand objects that live until exit, and the cyclic garbage collector would scan them
    over and over while they are created and once more at exit: about 0.1 s of every
    command, measured by evidence/bench/. The collector is paused until the command's module
    is loaded, then those objects are frozen out of its view and it runs as usual.

    And httpx imports its own command-line client (click, rich, pygments: 70 ms) whenever
    those are installed, as they are here; it guards that import with ``except
    ImportError``, which the ``sys.modules`` entry below makes it take. We never call it.

    Only the console script does either; ``main`` called in-process (tests, CliRunner, other
    programs) leaves the collector and httpx alone.
    """
    global _pausing_gc
    _pausing_gc = True
    gc.disable()
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    main()


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="imagekit")
def main() -> None:
    """Build, audit, mirror and record the container images that serve large models."""
