"""The command-line contract that scripts and CI depend on (DESIGN.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

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
