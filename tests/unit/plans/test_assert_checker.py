"""The assertion checker, the file itself (imagekit/plans/assert_checker.py), run as a build
runs it: ``python3 imagekit-assert.py imagekit-assert.json``, here with the host's python and
spec files written by the render (imagekit.plans.render.assertion_spec)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import venv
from importlib import resources
from pathlib import Path

import pytest

from imagekit.plans.model import Assertions
from imagekit.plans.render import (
    ASSERT_FAIL_MARKER,
    ASSERT_PASS_MARKER,
    ASSERTIONS_PASSED_MARKER,
    CheckerOutput,
    assertion_checker,
    assertion_spec,
)
from tests.support.pythons import old_pythons

CHECKER = Path(str(resources.files("imagekit.plans").joinpath("assert_checker.py")))
PACKAGE = CHECKER.parents[1]


def _check(
    tmp_path: Path,
    spec: dict[str, object],
    *,
    python: str = sys.executable,
    path: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """The checker run on the render's JSON of ``spec``; ``path`` goes on PYTHONPATH."""
    spec_file = tmp_path / "imagekit-assert.json"
    spec_file.write_bytes(assertion_spec(Assertions.model_validate(spec)))
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return subprocess.run(
        [python, str(CHECKER), str(spec_file)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env=env,
    )


def test_every_check_passes_in_order_and_the_verdict_closes(tmp_path: Path) -> None:
    ok = _check(
        tmp_path,
        {
            "pip_check": True,
            "find_spec": ["json", "email.mime"],
            "imports": ["json"],
            "commands": [{"argv": ["true"]}, {"argv": ["sh", "-c", "exit 4"], "exit_code": 4}],
        },
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines() == [
        "No broken requirements found.",  # pip's own output, passed through
        "IMAGEKIT_ASSERT_PASS pip_check: exit 0",
        "IMAGEKIT_ASSERT_PASS find_spec json",
        "IMAGEKIT_ASSERT_PASS find_spec email.mime",
        "IMAGEKIT_ASSERT_PASS import json",
        'IMAGEKIT_ASSERT_PASS command ["true"]: exit 0, expected 0',
        'IMAGEKIT_ASSERT_PASS command ["sh", "-c", "exit 4"]: exit 4, expected 4',
        "IMAGEKIT_ASSERTIONS_PASSED",
    ]
    assert ok.stderr == ""
    # what the builders read back from it
    read = CheckerOutput.read(ok.stdout)
    assert read.finished and read.failed == () and len(read.passed) == 6
    assert ok.stdout.splitlines()[-1] == ASSERTIONS_PASSED_MARKER


def test_a_failure_hides_no_other_check_and_exits_1(tmp_path: Path) -> None:
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "imagekit_raises.py").write_text("raise RuntimeError('boom at import')\n")
    (modules / "imagekit_exits.py").write_text("import sys\nsys.exit(3)\n")
    bad = _check(
        tmp_path,
        {
            "find_spec": ["imagekit_no_such_module", "imagekit_no_such.sub", "json"],
            "imports": ["imagekit_raises", "imagekit_exits", "json"],
            "commands": [
                {"argv": ["sh", "-c", "exit 3"], "exit_code": 0},
                {"argv": ["imagekit-no-such-command"]},
                {"argv": ["true"]},
            ],
        },
        path=modules,
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    lines = bad.stdout.splitlines()
    no_command = next(line for line in lines if "imagekit-no-such-command" in line)
    assert lines == [
        "IMAGEKIT_ASSERT_FAIL find_spec imagekit_no_such_module: find_spec returned None",
        "IMAGEKIT_ASSERT_FAIL find_spec imagekit_no_such.sub: "
        "ModuleNotFoundError: No module named 'imagekit_no_such'",
        "IMAGEKIT_ASSERT_PASS find_spec json",
        "IMAGEKIT_ASSERT_FAIL import imagekit_raises: RuntimeError: boom at import",
        "IMAGEKIT_ASSERT_FAIL import imagekit_exits: SystemExit: 3",
        "IMAGEKIT_ASSERT_PASS import json",
        'IMAGEKIT_ASSERT_FAIL command ["sh", "-c", "exit 3"]: exit 3, expected 0',
        no_command,
        'IMAGEKIT_ASSERT_PASS command ["true"]: exit 0, expected 0',
        "IMAGEKIT_ASSERTIONS_REJECTED 6 failed: find_spec imagekit_no_such_module; "
        "find_spec imagekit_no_such.sub; import imagekit_raises; import imagekit_exits; "
        'command ["sh", "-c", "exit 3"]; command ["imagekit-no-such-command"]',
    ]
    assert no_command.startswith(
        'IMAGEKIT_ASSERT_FAIL command ["imagekit-no-such-command"]: FileNotFoundError: '
    )
    read = CheckerOutput.read(bad.stdout)
    assert not read.finished and len(read.failed) == 6 and len(read.passed) == 3
    assert read.failed[0] == "find_spec imagekit_no_such_module: find_spec returned None"
    assert lines[0].startswith(f"{ASSERT_FAIL_MARKER} ") and lines[2].startswith(ASSERT_PASS_MARKER)


def test_pip_check_fails_where_pip_cannot_run(tmp_path: Path) -> None:
    """An interpreter without pip: ``pip check`` cannot say yes, so the check fails."""
    bare = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False).create(bare)
    result = _check(tmp_path, {"pip_check": True}, python=str(bare / "bin" / "python"))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[-2:] == [
        "IMAGEKIT_ASSERT_FAIL pip_check: exit 1",
        "IMAGEKIT_ASSERTIONS_REJECTED 1 failed: pip_check",
    ]
    assert any("No module named pip" in line for line in lines[:-2])  # pip's error, kept


def test_quotes_and_non_ascii_reach_the_command_exactly(tmp_path: Path) -> None:
    argv = ["sh", "-c", """test "$0" = 'a"b\\c é'""", """a"b\\c é"""]
    result = _check(tmp_path, {"commands": [{"argv": argv}]})
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"IMAGEKIT_ASSERT_PASS command {json.dumps(argv)}" in result.stdout


def test_without_a_spec_file_nothing_passes(tmp_path: Path) -> None:
    usage = subprocess.run(
        [sys.executable, str(CHECKER)], capture_output=True, text=True, check=False, timeout=60
    )
    assert usage.returncode == 2
    assert usage.stdout == "" and "usage: python3 imagekit-assert.py SPEC.json" in usage.stderr
    missing = subprocess.run(
        [sys.executable, str(CHECKER), str(tmp_path / "absent.json")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert missing.returncode == 1 and "FileNotFoundError" in missing.stderr
    assert not CheckerOutput.read(missing.stdout).finished


def test_the_checker_keeps_to_python_3_8_and_the_standard_library() -> None:
    source = CHECKER.read_text()
    tree = ast.parse(source, feature_version=(3, 8))
    assert not re.search(r"\.removeprefix\(|\.removesuffix\(|^\s*match .*:$", source, re.M)
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported == {"__future__", "importlib", "json", "subprocess", "sys", "typing"}


def test_imagekit_reads_the_checker_and_never_imports_it() -> None:
    assert assertion_checker() == CHECKER.read_bytes()
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            if "imagekit.plans.assert_checker" in names:
                importers.append(path.relative_to(PACKAGE.parent).as_posix())
    assert importers == []


@pytest.mark.parametrize("assertions", [Assertions(), Assertions(pip_check=True)])
def test_the_spec_is_sorted_indented_json_with_a_newline(assertions: Assertions) -> None:
    data = assertion_spec(assertions)
    assert data.endswith(b"}\n") and not data.endswith(b"\n\n")
    document = json.loads(data)
    assert list(document) == sorted(document) == ["commands", "find_spec", "imports", "pip_check"]
    assert data == (json.dumps(document, sort_keys=True, indent=2) + "\n").encode()


@pytest.mark.parametrize("python", old_pythons() or [None])
def test_an_old_interpreter_gives_the_same_lines(tmp_path: Path, python: str | None) -> None:
    """Images ship old interpreters: under a real Python 3.8 or 3.9 the checker says exactly
    what it says under this one, passes and failures alike (pip is left out: each
    interpreter's pip speaks for itself)."""
    if python is None:
        pytest.skip("no Python 3.8 or 3.9 on this machine to run the checker with")
    spec: dict[str, object] = {
        "find_spec": ["json", "imagekit_no_such_module"],
        "imports": ["email.mime", "imagekit_no_such_module"],
        "commands": [{"argv": ["sh", "-c", "exit 2"], "exit_code": 2}, {"argv": ["false"]}],
    }
    here = _check(tmp_path, spec)
    old = _check(tmp_path, spec, python=python)
    assert (old.returncode, here.returncode) == (1, 1), old.stderr
    assert old.stdout.splitlines() == here.stdout.splitlines()
    assert old.stdout.splitlines()[-1].startswith("IMAGEKIT_ASSERTIONS_REJECTED 3 failed: ")
