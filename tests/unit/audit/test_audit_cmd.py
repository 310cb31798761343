"""`imagekit audit` parses only; bad usage is exit 2 before anything runs."""

from __future__ import annotations

from click.testing import CliRunner

from imagekit.cli import main


def test_ref_and_host_are_exclusive() -> None:
    runner = CliRunner()
    both = runner.invoke(main, ["audit", "some/image:1", "--host", "--json"])
    assert both.exit_code == 2
    neither = runner.invoke(main, ["audit"])
    assert neither.exit_code == 2


def test_help_lists_the_options() -> None:
    result = CliRunner().invoke(main, ["audit", "--help"])
    assert result.exit_code == 0
    for option in ("--profile", "--plan", "--json", "--offline", "--host"):
        assert option in result.output
