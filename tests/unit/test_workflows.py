"""The GitHub workflows pass actionlint, and actionlint is really able to say no here.

The binary comes from the PyPI wheel in the test extra (installed next to the interpreter), so
the check runs offline and at a pinned version. shellcheck, when on PATH, is used by actionlint
for the `run:` scripts as well.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"


def _actionlint() -> str:
    scripts = Path(sysconfig.get_path("scripts"))
    for candidate in (scripts / "actionlint", Path(sys.executable).parent / "actionlint"):
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("actionlint")
    if found is None:
        pytest.fail("actionlint is not installed: `pip install -e .[test]` ships it")
    return found


def _lint(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_actionlint(), "-no-color", "-oneline", *map(str, paths)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def test_workflows_exist() -> None:
    names = sorted(p.name for p in WORKFLOWS.glob("*.yml"))
    assert "ci.yml" in names
    assert "nightly.yml" in names


@pytest.mark.parametrize("name", ["ci.yml", "nightly.yml"])
def test_workflow_passes_actionlint(name: str) -> None:
    result = _lint(WORKFLOWS / name)
    # Any finding at all is a failure: actionlint prints one line per finding on stdout.
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_every_workflow_passes_actionlint() -> None:
    result = _lint(*sorted(WORKFLOWS.glob("*.y*ml")))
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_actionlint_rejects_a_broken_workflow(tmp_path: Path) -> None:
    """Proves the check above can fail: an unknown context and a bad cron are reported."""
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on:\n"
        "  schedule:\n"
        "    - cron: '61 * * * *'\n"
        "jobs:\n"
        "  x:\n"
        "    runs-on: ubuntu-24.04\n"
        "    steps:\n"
        "      - run: echo ${{ nosuchcontext.value }}\n"
    )
    result = _lint(broken)
    assert result.returncode != 0
    assert "cron" in result.stdout.lower()
    assert "nosuchcontext" in result.stdout


def test_nightly_writes_the_job_summary_and_keeps_evidence() -> None:
    text = (WORKFLOWS / "nightly.yml").read_text()
    assert "schedule:" in text and "workflow_dispatch:" in text
    assert "scripts/setup-host.sh" in text
    assert 'imagekit nightly "${args[@]}"' in text
    assert '--markdown "$GITHUB_STEP_SUMMARY"' in text
    assert "actions/upload-artifact@" in text and "evidence/" in text
    assert "if: always()" in text


def test_nightly_watches_and_keeps_the_proposed_changes() -> None:
    text = (WORKFLOWS / "nightly.yml").read_text()
    assert "args=(--proposals proposals)" in text
    assert "args+=(--watch-only)" in text and "watch_only:" in text
    upload = text[text.index("name: Upload the proposed plan changes") :]
    assert "actions/upload-artifact@" in upload and "path: proposals/" in upload
    assert "if: always()" in upload


def test_ci_runs_make_test() -> None:
    assert "make test" in (WORKFLOWS / "ci.yml").read_text()
