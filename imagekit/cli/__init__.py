"""The `imagekit` command: parses, calls one library function, renders. Nothing else.

Each command lives in its own module exposing ``command`` (a click command or group). The
modules are imported only when their command runs, and `imagekit --help` lists them from a
table of names and first sentences without importing any: a verification that takes ten
seconds should not also pay for importing the build, audit and ledger stacks at start-up.
"""

from __future__ import annotations

import difflib
import gc
import importlib
import sys
import threading
from collections.abc import Sequence
from typing import Any

import click

from imagekit.version import __version__

#: command name -> its module and the first sentence of its help, in the order `imagekit
#: --help` lists them. The list is printed from here, so listing the commands imports none of
#: their modules; tests/unit/cli/test_init.py holds each sentence to the command's own help.
_COMMANDS: dict[str, tuple[str, str]] = {
    "inspect": (
        "imagekit.cli.inspect_cmd",
        "Show what REFERENCE resolves to: index, platform, manifest, config and layers.",
    ),
    "plans": (
        "imagekit.cli.plans_cmd",
        "Build plans in manifests/: list, show, validate, schema, pin-overlay, bump.",
    ),
    "render": (
        "imagekit.cli.render_cmd",
        "Render dockerfiles/NAME/Dockerfile from manifests/NAME.yaml (every plan without NAME).",
    ),
    "build": (
        "imagekit.cli.build_cmd",
        "Build a plan; the log streams to stderr and into evidence/.",
    ),
    "audit": (
        "imagekit.cli.audit_cmd",
        "Run the CPU-only probe in REF (no network, no GPU) and report CPU_PASS, "
        "CPU_PASS_GPU_CLI_DEFERRED or CPU_CHECK_INCOMPLETE, and the vulnerabilities of its "
        "Python distributions (clean, findings, unknown, skipped).",
    ),
    "mirror": (
        "imagekit.cli.mirror_cmd",
        "Prove DST holds the same content as SRC, layer by layer by diffID.",
    ),
    "pull": (
        "imagekit.cli.pull_cmd",
        "Pull by digest, check the store's image ID against the registry, record what it holds.",
    ),
    "gpu-preflight": (
        "imagekit.cli.gpu_preflight_cmd",
        "Check the GPUs of the node that will serve REF, before any weights are loaded.",
    ),
    "ledger": (
        "imagekit.cli.ledger_cmd",
        "The append-only record of every build, audit, verification and final pull.",
    ),
    "doctor": (
        "imagekit.cli.doctor_cmd",
        "Check the engine, BuildKit, disk, platform, registries and CA bundle before a build.",
    ),
    "pipeline": (
        "imagekit.cli.pipeline_cmd",
        "doctor -> build -> audit -> push -> mirror -> final pull -> GPU preflight -> ledger, "
        "stopping at a no.",
    ),
    "nightly": (
        "imagekit.cli.nightly_cmd",
        "Watch each plan's base tag; build a candidate where it moved, rebuild where not.",
    ),
    "keys": (
        "imagekit.cli.keys_cmd",
        "Signing keys for attestations (ECDSA P-256, as cosign's).",
    ),
    "verify": (
        "imagekit.cli.verify_cmd",
        "Decide from the registry alone (no ledger, no engine) whether REFERENCE's digest holds "
        "signed attestations that meet the policy.",
    ),
    "sbom": (
        "imagekit.cli.sbom_cmd",
        "List REFERENCE's Debian packages and Python distributions (CycloneDX 1.6, each with its "
        "purl and the diffID of its layer) without running the image.",
    ),
}


def _wants_quiet(argv: Sequence[str]) -> bool:
    """Whether the group's own --quiet (-q) was given, before the command's name."""
    for option in argv:
        if option in ("-q", "--quiet"):
            return True
        if not option.startswith("-"):
            return False
    return False


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
        from imagekit.cli.progress import for_command
        from imagekit.interrupt import install_handlers, restore_handlers

        main_thread = threading.current_thread() is threading.main_thread()
        previous = install_handlers() if main_thread else {}
        try:
            try:
                with for_command(quiet=_wants_quiet(argv), as_json=_wants_json(argv)):
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
        return list(_COMMANDS)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """A misspelt command's name gets the nearest one (`imagekit inpsect` -> inspect)."""
        name = args[0] if args else ""
        if name and name not in _COMMANDS and not name.startswith("-"):
            close = difflib.get_close_matches(name, list(_COMMANDS), n=1)
            if close:
                ctx.fail(f"No such command {name!r}. Did you mean {close[0]!r}?")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands with their one-line helps, as click lists them, from ``_COMMANDS``:
        listing them imports no command's module (each would load its stage's stack)."""
        listed = _Listed(
            commands={
                name: click.Command(name, help=summary) for name, (_, summary) in _COMMANDS.items()
            }
        )
        listed.format_commands(ctx, formatter)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in _COMMANDS:
            return None
        module = _COMMANDS[cmd_name][0]
        command = importlib.import_module(module).command
        if _pausing_gc and not gc.isenabled():
            # What start-up created lives until exit; freezing it keeps the collector from
            # scanning it again during the command and once more at exit.
            gc.freeze()
            gc.enable()
        if not isinstance(command, click.Command):  # pragma: no cover - a wiring bug
            raise TypeError(f"{module}.command is not a click command")
        return command


class _Listed(click.Group):
    """Stand-ins of the commands, each with its help's first sentence, listed in their order."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


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
@click.option(
    "--quiet",
    "-q",
    is_flag=True,
    help="No progress on stderr (bars, retries, waits); results and errors are still said. "
    "IMAGEKIT_QUIET=1 does the same.",
)
def main(quiet: bool) -> None:
    """Build, audit, mirror and record the container images that serve large models."""
