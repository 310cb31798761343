"""Render: byte-stable Dockerfiles that pin the base, guard overlays and keep secrets out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagekit.cli.render_cmd import command as render_command
from imagekit.plan import LoadedPlan, load_plan
from imagekit.render import render, render_plans, write_rendered
from imagekit.workspace import Workspace

REPO = Path(__file__).resolve().parents[2]


def _demo(base_override: str | None = None) -> LoadedPlan:
    return load_plan(
        REPO / "manifests" / "demo.yaml",
        dockerfiles_dir=REPO / "dockerfiles",
        base_override=base_override,
    )


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    shutil.copytree(
        REPO / "manifests", tmp_path / "manifests", ignore=shutil.ignore_patterns("*.jsonl")
    )
    shutil.copytree(REPO / "dockerfiles", tmp_path / "dockerfiles")
    monkeypatch.setenv("IMAGEKIT_ROOT", str(tmp_path))
    for var in ("IMAGEKIT_PLANS_DIR", "IMAGEKIT_DOCKERFILES_DIR", "IMAGEKIT_EVIDENCE_DIR"):
        monkeypatch.delenv(var, raising=False)
    return Workspace.from_env(tmp_path)


def test_render_is_byte_stable() -> None:
    first = render(_demo()).data
    second = render(_demo()).data
    assert first == second
    assert render(_demo()).digest == render(_demo()).digest


def test_committed_dockerfiles_are_the_render_of_their_plans() -> None:
    for name in ("demo", "m3-cu13", "m3-vllm"):
        loaded = load_plan(
            REPO / "manifests" / f"{name}.yaml", dockerfiles_dir=REPO / "dockerfiles"
        )
        committed = (REPO / "dockerfiles" / name / "Dockerfile").read_bytes()
        assert committed == render(loaded).data, f"run `imagekit render {name}`"


def test_from_carries_the_digest_and_labels_name_base_and_plan() -> None:
    loaded = _demo()
    text = render(loaded).dockerfile
    lines = text.splitlines()
    assert not any(line.startswith("# syntax") for line in lines)
    from_lines = [line for line in lines if line.startswith("FROM ")]
    assert from_lines == [f"FROM --platform=linux/amd64 {loaded.base}"]
    assert "@sha256:" in from_lines[0]
    assert f'org.opencontainers.image.base.digest="{loaded.base.digest}"' in text
    assert 'org.opencontainers.image.base.name="127.0.0.1:5000/imagekit-test/base:bookworm"' in text
    assert 'io.imagekit.plan="demo"' in text
    assert f'io.imagekit.plan-sha256="{loaded.digest.hex}"' in text


def test_base_override_changes_from_and_base_labels_only() -> None:
    other = "127.0.0.1:5999/elsewhere/base@sha256:" + "0f" * 32
    plain = render(_demo()).dockerfile.splitlines()
    moved = render(_demo(other)).dockerfile.splitlines()
    changed = [(a, b) for a, b in zip(plain, moved, strict=True) if a != b]
    assert [b for _, b in changed][0] == f"FROM --platform=linux/amd64 {other}"
    assert all("base" in b for _, b in changed)


def test_overlay_guard_precedes_each_copy() -> None:
    lines = render(_demo()).dockerfile.splitlines()
    copies = [i for i, line in enumerate(lines) if line.startswith("COPY ")]
    assert len(copies) == 2
    for index in copies:
        guard = lines[index - 1]
        destination = lines[index].split()[-1]
        assert guard.startswith("RUN ") and f"p={destination};" in guard
        assert "IMAGEKIT_OVERLAY_DRIFT" in guard
    assert (
        "want=75e5d191c344a5bdf61c1ee3e720661cb2d0c38e8d3bfb90b587b8107303c92e"
        in lines[copies[0] - 1]
    )
    assert "expected=absent actual=present" in lines[copies[1] - 1]


def test_pip_steps_use_secret_mounts_and_no_build_arg() -> None:
    text = render(_demo()).dockerfile
    pip = [line for line in text.splitlines() if "pip install" in line]
    assert len(pip) == 1
    assert pip[0].startswith("RUN --mount=type=secret,id=pip_index --mount=type=secret,id=pip_ca ")
    assert "PIP_BREAK_SYSTEM_PACKAGES=1" in pip[0] and "six==1.16.0" in pip[0]
    # Nothing that would land in the image config: no ARG (history), no ENV of pip settings.
    assert "ARG " not in text
    assert not any(line.startswith("ENV ") and "PIP" in line for line in text.splitlines())


def test_remove_packages_is_exact_and_never_autoremove() -> None:
    loaded = load_plan(REPO / "manifests" / "m3-vllm.yaml", dockerfiles_dir=REPO / "dockerfiles")
    text = render(loaded).dockerfile
    line = next(line for line in text.splitlines() if "apt-get remove -y" in line)
    assert "autoremove" not in text
    assert line.rstrip().endswith(
        "apt-get remove -y python3-gi python3-software-properties software-properties-common"
    )
    assert "dpkg-query" in line and "apt-get -s remove" in line


def test_assertions_are_the_last_step_and_carry_the_plan_checks() -> None:
    lines = render(_demo()).dockerfile.splitlines()
    last = lines[-1]
    assert last.startswith("RUN [")
    argv = json.loads(last[len("RUN ") :])
    assert argv[:2] == ["python3", "-c"]
    program = argv[2]
    assert "'find_spec': ['six', 'av', 'numpy']" in program
    assert "'pip_check': True" in program
    compile(program, "<assertions>", "exec")


def test_write_rendered_reports_changes(project: Workspace) -> None:
    loaded = load_plan(project.plans_dir / "demo.yaml", dockerfiles_dir=project.dockerfiles_dir)
    target = project.dockerfiles_dir / "demo" / "Dockerfile"
    target.unlink()
    assert write_rendered(loaded).changed
    assert not write_rendered(loaded).changed
    assert target.read_bytes() == render(loaded).data


def test_render_cli_check_finds_stale_files(project: Workspace) -> None:
    ok = CliRunner().invoke(render_command, ["--check", "--json"])
    assert ok.exit_code == 0, ok.output
    assert {d["plan"] for d in json.loads(ok.stdout)} == {"demo", "m3-cu13", "m3-vllm"}
    target = project.dockerfiles_dir / "m3-cu13" / "Dockerfile"
    target.write_text(target.read_text() + "RUN true\n")
    stale = CliRunner().invoke(render_command, ["--check"])
    assert stale.exit_code == 1
    assert "STALE" in stale.stdout
    fixed = CliRunner().invoke(render_command, ["m3-cu13"])
    assert fixed.exit_code == 0 and "written" in fixed.stdout
    assert [r.changed for r in render_plans(project, None, check=True)] == [False] * 3


def test_render_cli_bad_plan_is_exit_2(project: Workspace) -> None:
    path = project.plans_dir / "m3-cu13.yaml"
    path.write_text(path.read_text().replace("nixl-cu12==1.2.0", "nixl-cu12>=1.2"))
    result = CliRunner().invoke(render_command, ["m3-cu13"])
    assert result.exit_code == 2
    assert "m3-cu13.yaml: steps[0].requirements" in result.stderr
