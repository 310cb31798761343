"""The GitHub workflows pass actionlint, and actionlint is really able to say no here; every
imagekit command a workflow runs exists, with every flag it passes.

The binary comes from the PyPI wheel in the test extra (installed next to the interpreter), so
the check runs offline and at a pinned version. shellcheck, when on PATH, is used by actionlint
for the `run:` scripts as well. The commands are checked against imagekit's own ``--help``:
what a workflow runs only on GitHub (a nightly on a schedule) must not find a flag missing
there first.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from imagekit.cli import main as imagekit_main

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
    assert 'args=(--plans "$PLAN" --proposals proposals)' in text
    assert "args+=(--watch-only)" in text and "watch_only:" in text
    upload = text[text.index("name: Upload the proposed plan changes") :]
    assert "actions/upload-artifact@" in upload and "path: proposals/" in upload
    assert "if: always()" in upload


def test_ci_runs_make_test() -> None:
    assert "make test" in (WORKFLOWS / "ci.yml").read_text()


# ---------------------------------------------------------------- imagekit commands and flags

_INVOCATION = re.compile(r"(?:^|[\s/])imagekit\s+(.*)")
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
_ARGS = re.compile(r"^\s*args\+?=\((.*)\)\s*$")


def _logical_lines(script: str) -> list[str]:
    """The script's lines with backslash continuations joined."""
    return script.replace("\\\n", " ").splitlines()


def _help(words: list[str]) -> str:
    result = CliRunner().invoke(imagekit_main, [*words, "--help"])
    assert result.exit_code == 0, f"imagekit {' '.join(words)} --help: {result.output}"
    return result.output


def imagekit_calls(script: str) -> list[tuple[list[str], set[str]]]:
    """Each imagekit command a ``run:`` script calls: its words (``ledger sync``) and the
    flags it is given, on its own line or through the script's ``args`` array (the workflows
    build imagekit's arguments there and nothing else's)."""
    lines = _logical_lines(script)
    array_flags = {
        flag for line in lines if (m := _ARGS.match(line)) for flag in _FLAG.findall(m.group(1))
    }
    calls = []
    for line in lines:
        match = _INVOCATION.search(line)
        if match is None or line.lstrip().startswith("#"):
            continue
        rest = match.group(1)
        words = [w for w in rest.split()[:2] if re.fullmatch(r"[a-z][a-z-]*", w)]
        if not words:
            continue
        command = words[:1]
        if len(words) > 1 and "Commands:" in _help(command):
            command = words[:2]
        flags = set(_FLAG.findall(rest))
        if '"${args[@]}"' in rest:
            flags |= array_flags
        calls.append((command, flags))
    return calls


def missing_flags(script: str) -> list[str]:
    """``imagekit CMD --FLAG`` for each flag a script passes that the command does not take."""
    missing = []
    for command, flags in imagekit_calls(script):
        text = _help(command)
        missing += [
            f"imagekit {' '.join(command)} {flag}"
            for flag in sorted(flags)
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text)
        ]
    return missing


def _run_scripts(name: str) -> dict[str, str]:
    document = yaml.safe_load((WORKFLOWS / name).read_text())
    return {
        f"{job}: {step.get('name', step['run'][:40])}": step["run"]
        for job, body in document["jobs"].items()
        for step in body["steps"]
        if "run" in step
    }


@pytest.mark.parametrize("name", ["ci.yml", "nightly.yml"])
def test_every_imagekit_command_a_workflow_runs_exists_with_its_flags(name: str) -> None:
    scripts = _run_scripts(name)
    missing = [f"{step}: {m}" for step, script in scripts.items() for m in missing_flags(script)]
    assert not missing, missing


def test_the_nightly_workflow_calls_what_its_matrix_needs() -> None:
    """The nights, the merge and the check are all there (a parse that found nothing would
    let the test above pass vacuously)."""
    calls = [
        (" ".join(words), flags)
        for script in _run_scripts("nightly.yml").values()
        for words, flags in imagekit_calls(script)
    ]
    found = dict(calls)
    assert {"plans list", "nightly", "ledger sync", "ledger verify"} <= set(found), calls
    night = {"--plans", "--buildkit", "--buildkit-ca", "--buildkit-cert", "--buildkit-key"}
    night |= {"--cache-ref", "--watch-only", "--proposals", "--markdown"}
    assert night <= found["nightly"]
    assert "--from" in found["ledger sync"]


def test_the_flag_check_says_no_to_what_imagekit_lacks() -> None:
    script = (
        "args=(--plans demo --no-such-flag)\n"
        'sudo --preserve-env=X .venv/bin/imagekit nightly "${args[@]}" \\\n'
        "  --markdown out.md\n"
        ".venv/bin/imagekit ledger sync --from a.jsonl --frm b.jsonl\n"
        "imagekit nosuch --json\n"
    )
    with pytest.raises(AssertionError, match="imagekit nosuch --help"):
        missing_flags(script)
    assert missing_flags(script.replace("imagekit nosuch --json\n", "")) == [
        "imagekit nightly --no-such-flag",
        "imagekit ledger sync --frm",
    ]


def test_the_nightly_fans_out_one_job_a_plan_and_proposes_the_merged_records() -> None:
    document = yaml.safe_load((WORKFLOWS / "nightly.yml").read_text())
    jobs = document["jobs"]
    assert jobs["night"]["strategy"]["matrix"]["plan"] == (
        "${{ fromJSON(needs.plans.outputs.plans) }}"
    )
    assert jobs["night"]["strategy"]["fail-fast"] is False
    assert jobs["records"]["needs"] == ["plans", "night"]
    assert jobs["records"]["if"].startswith("always()")
    assert jobs["records"]["permissions"] == {"contents": "write", "pull-requests": "write"}
    scripts = "\n".join(_run_scripts("nightly.yml").values())
    assert (
        'args+=(--buildkit "$BUILDKIT")' in scripts
        and "vars.IMAGEKIT_BUILDKIT" in (WORKFLOWS / "nightly.yml").read_text()
    )
    assert "gh pr create" in scripts and 'git push -q origin "$BRANCH"' in scripts
    uploads = [
        step["with"]
        for step in jobs["night"]["steps"]
        if str(step.get("uses", "")).startswith("actions/upload-artifact@")
    ]
    piece = next(u for u in uploads if u["name"].startswith("nightly-piece-"))
    assert "manifests/ledger.jsonl" in piece["path"] and "evidence/" in piece["path"]


@pytest.mark.parametrize("name", ["ci.yml", "nightly.yml"])
def test_every_run_script_is_bash_that_parses(name: str, tmp_path: Path) -> None:
    """GitHub runs each ``run:`` with bash; a syntax error would surface only there."""
    for step, script in _run_scripts(name).items():
        path = tmp_path / "step.sh"
        path.write_text(script)
        done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, f"{step}: {done.stderr}"
