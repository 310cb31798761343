"""The `imagekit` group: its command list is each command's own help, read without importing
any command, and a command loads only the stack it runs."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from imagekit.cli import _COMMANDS, main


@pytest.mark.parametrize("name", list(_COMMANDS))
def test_the_listed_help_is_the_commands_own_at_every_width(name: str) -> None:
    module, summary = _COMMANDS[name]
    command = importlib.import_module(module).command
    assert isinstance(command, click.Command) and not command.hidden
    listed = click.Command(name, help=summary)
    for limit in range(1, 400):
        assert listed.get_short_help_str(limit) == command.get_short_help_str(limit), limit


@pytest.mark.parametrize("width", [40, 80, 120, 200])
def test_the_command_list_reads_as_click_would_print_it_from_the_commands(width: int) -> None:
    ctx = click.Context(main, info_name="imagekit", terminal_width=width, max_content_width=width)
    from_table, from_commands = ctx.make_formatter(), ctx.make_formatter()
    main.format_commands(ctx, from_table)
    click.Group.format_commands(main, ctx, from_commands)  # imports every command
    assert from_table.getvalue() == from_commands.getvalue()
    assert from_table.getvalue().count("\n") == len(_COMMANDS) + 1  # the heading, a row each


def _modules_after(*argv: str) -> set[str]:
    """The modules a fresh `imagekit ARGV` process has imported when it exits."""
    script = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
        "from imagekit.cli import entry\n"
        f"sys.argv = ['imagekit', *{list(argv)!r}]\n"
        "entry()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stderr.splitlines()[-1]))


def test_listing_the_commands_imports_none_of_them() -> None:
    loaded = _modules_after("--help")
    commands = {m for m in loaded if m.startswith("imagekit.cli.") and m.endswith("_cmd")}
    assert commands == set()
    assert not loaded & {"httpx", "pydantic", "yaml", "python_on_whales", "imagekit.ledger"}


@pytest.mark.parametrize(
    "argv",
    [
        ("verify", "--help"),
        ("inspect", "--help"),
        ("plans", "--help"),
        ("plans", "list", "--help"),
        ("plans", "pin-overlay", "--help"),
        ("ledger", "show", "--help"),
    ],
    ids=" ".join,
)
def test_a_command_that_builds_nothing_loads_no_build_stack(argv: tuple[str, ...]) -> None:
    loaded = _modules_after(*argv)
    build = sorted(
        m for m in loaded if m == "imagekit.builders" or m.startswith("imagekit.builders.")
    )
    assert build == []
    assert "python_on_whales" not in loaded  # the engine's client: the builders and the audit


@pytest.mark.parametrize("argv", [("ledger", "show"), ("ledger", "show", "--json")], ids=" ".join)
def test_reading_the_ledger_loads_no_registry_client(argv: tuple[str, ...], tmp_path: Path) -> None:
    """The ledger's records use the registry's manifest models, not its client: importing
    those must not load the HTTP client and httpx (imagekit.registry hands its names out
    lazily, imagekit.lazy)."""
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_bytes(b"")
    loaded = _modules_after(*argv, "--ledger", str(ledger))
    assert "imagekit.ledger" in loaded  # it did read the ledger
    assert not loaded & {"httpx", "imagekit.registry.client", "imagekit.registry.transport"}


def test_the_registry_face_hands_out_every_name_it_lists() -> None:
    import imagekit.registry as registry

    names: list[str] = vars(registry)["__all__"]  # the stub, for type checkers, has none
    assert "RegistryClient" in names and "Descriptor" in names
    for name in names:
        assert getattr(registry, name) is not None
    assert "RegistryClient" in dir(registry)
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        getattr(registry, "Nope")  # noqa: B009 - the lookup is the test


@pytest.mark.parametrize(("typed", "meant"), [("inpsect", "inspect"), ("mirorr", "mirror")])
def test_a_misspelt_command_gets_the_nearest_one(typed: str, meant: str) -> None:
    from click.testing import CliRunner

    result = CliRunner().invoke(main, [typed, "REF"])
    assert result.exit_code == 2
    assert f"No such command {typed!r}. Did you mean {meant!r}?" in result.stderr
    as_json = CliRunner().invoke(main, [typed, "REF", "--json"])
    document = json.loads(as_json.stdout)
    assert as_json.exit_code == 2 and meant in document["error"]["message"]


def test_quiet_is_the_groups_own_option_and_silences_progress(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from imagekit.cli import _wants_quiet

    assert _wants_quiet(["--quiet", "ledger", "show"]) and _wants_quiet(["-q", "inspect", "x"])
    assert not _wants_quiet(["ledger", "show", "--quiet"])  # a command's own words
    env = {"IMAGEKIT_LEDGER": str(tmp_path / "ledger.jsonl")}
    result = CliRunner().invoke(main, ["--quiet", "ledger", "show"], env=env)
    assert result.exit_code == 2 and "no ledger at" in result.stderr  # parsed, then ran
    assert "--quiet" in CliRunner().invoke(main, ["--help"]).stdout
