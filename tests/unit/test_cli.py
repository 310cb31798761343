"""The command-line contract that scripts and CI depend on (DESIGN.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagekit import __version__
from imagekit.cli import _COMMAND_MODULES, main


@pytest.mark.parametrize("name", list(_COMMAND_MODULES))
def test_every_command_loads_and_offers_json(name: str) -> None:
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0, result.output
    command = main.get_command(None, name)  # type: ignore[arg-type]
    assert command is not None and command.name == name


def test_unknown_command_and_option_are_usage_errors() -> None:
    assert CliRunner().invoke(main, ["no-such-command"]).exit_code == 2
    assert CliRunner().invoke(main, ["inspect", "--no-such-option", "x"]).exit_code == 2


def test_bad_reference_is_one_json_document_and_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["inspect", "--json", "Example.com/UPPER:tag"])
    assert result.exit_code == 2
    document = json.loads(result.stdout)
    assert document["error"]["exit_code"] == 2
    assert "Traceback" not in result.output


def test_malformed_digest_never_reaches_a_registry() -> None:
    result = CliRunner().invoke(main, ["inspect", "--json", "127.0.0.1:1/x@sha256:../../x"])
    assert result.exit_code == 2
    assert "malformed digest" in json.loads(result.stdout)["error"]["message"]


def test_console_script_entry_resumes_the_collector_and_skips_httpx_cli() -> None:
    # entry() pauses the cyclic GC while a command loads; the command itself must run with
    # it on again, and httpx's own CLI (rich, pygments) must not have been imported.
    script = (
        "import gc, sys\n"
        "from imagekit.cli import entry\n"
        "sys.argv = ['imagekit', 'mirror', '--help']\n"
        "try:\n"
        "    entry()\n"
        "except SystemExit as exc:\n"
        "    print(exc.code, gc.isenabled(), sys.modules.get('httpx._main', 'absent'),\n"
        "          'rich.console' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert "Usage: imagekit mirror" in done.stdout
    assert done.stderr.split() == ["0", "True", "None", "False"], done.stderr


def test_python_dash_m_is_the_console_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "imagekit", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == f"imagekit, version {__version__}"
