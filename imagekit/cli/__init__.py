"""The `imagekit` command: parses, calls one library function, renders. Nothing else.

Each command lives in its own module exposing ``command`` (a click command or group). The
modules are imported only when their command runs: a verification that takes ten seconds
should not also pay for importing the build, audit and ledger stacks at start-up.
"""

from __future__ import annotations

import gc
import importlib
import sys
import threading
from collections.abc import Sequence
from typing import Any

import click

from imagekit.version import __version__

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
    "keys": "imagekit.cli.keys_cmd",
    "verify": "imagekit.cli.verify_cmd",
    "sbom": "imagekit.cli.sbom_cmd",
}


def _wants_json(argv: Sequence[str]) -> bool:
    """Whether --json was given (before any ``--``): then every exit prints one document."""
    options = list(argv)
    if "--" in options:
        options = options[: options.index("--")]
    return "--json" in options


class _LazyGroup(click.Group):
    """A group whose subcommands are imported on first use.

    Its ``main`` holds the contract for what click itself decides: a usage error (unknown
    option, missing argument, a value out of range) is exit 2 and, under --json, exactly one
    JSON document on stdout; an interrupt is 130 or 143, never click's "Aborted!" with exit
    1. SIGINT and SIGTERM are turned into imagekit.interrupt.Interrupted for the whole
    command, so every cleanup on the way out runs.
    """

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        if not standalone_mode:
            return super().main(argv, prog_name, complete_var, False, **extra)
        from imagekit.interrupt import install_handlers, restore_handlers

        main_thread = threading.current_thread() is threading.main_thread()
        previous = install_handlers() if main_thread else {}
        try:
            try:
                code = super().main(argv, prog_name, complete_var, False, **extra)
            except click.ClickException as exc:
                from imagekit.cli.contract import usage_error

                usage_error(exc, as_json=_wants_json(argv))
            except click.exceptions.Abort as exc:
                from imagekit.cli.contract import report_interrupt
                from imagekit.interrupt import Interrupted, interrupted

                cause = exc.__cause__
                if not isinstance(cause, KeyboardInterrupt):
                    cause = Interrupted()
                report_interrupt(interrupted(cause), as_json=_wants_json(argv))
            sys.exit(code if isinstance(code, int) else 0)
        finally:
            restore_handlers(previous)

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
