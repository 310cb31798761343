"""`imagekit audit` parses only; bad usage is exit 2 before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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
    for option in (
        "--profile", "--plan", "--json", "--offline", "--host", "--vuln-db", "--vuln-db-max-age",
        "--fail-on", "IMAGEKIT_VULN_DB",
    ):  # fmt: skip
        assert option in result.output


def test_a_vuln_db_that_is_not_an_osv_export_is_exit_2_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No engine is asked: the database is read first (the reference does not exist)."""
    monkeypatch.setenv("IMAGEKIT_ROOT", str(tmp_path))
    bogus = tmp_path / "all.zip"
    bogus.write_text("<html>proxy login</html>")
    runner = CliRunner()
    given = runner.invoke(main, ["audit", "nowhere/image:1", "--vuln-db", str(bogus), "--json"])
    assert given.exit_code == 2
    assert f"error: {bogus}: not a zip file" in given.stderr
    error = json.loads(given.stdout)["error"]
    assert (error["type"], error["path"]) == ("VulnDatabaseError", str(bogus))

    monkeypatch.setenv("IMAGEKIT_VULN_DB", str(tmp_path / "absent"))
    from_env = runner.invoke(main, ["audit", "nowhere/image:1"])
    assert from_env.exit_code == 2
    assert f"{tmp_path / 'absent'}: no such file or folder" in from_env.stderr
    assert not (tmp_path / "manifests" / "ledger.jsonl").exists()


def test_policy_options_are_checked_by_the_parser() -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["audit", "x:1", "--fail-on", "sometimes"]).exit_code == 2
    assert runner.invoke(main, ["audit", "x:1", "--vuln-db-max-age", "-1"]).exit_code == 2
