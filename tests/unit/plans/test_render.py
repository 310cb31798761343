"""Render: byte-stable Dockerfiles that pin the base, guard overlays and keep secrets out."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from imagekit.cli.render_cmd import command as render_command
from imagekit.errors import PlanError
from imagekit.plans.load import load_plan
from imagekit.plans.model import Assertions, LoadedPlan
from imagekit.plans.render import (
    ASSERT_CHECKER,
    ASSERT_MOUNT,
    ASSERT_SPEC,
    ASSERT_SPEC_MOUNT,
    assertion_checker,
    render,
    render_overlay,
    render_plans,
    write_rendered,
)
from imagekit.workspace import Workspace

REPO = Path(__file__).resolve().parents[3]


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
    first = render(_demo())
    second = render(_demo())
    assert first.data == second.data
    assert first.files() == second.files()
    assert list(first.files()) == ["Dockerfile", ASSERT_SPEC]
    assert first.context_files() == second.context_files()
    assert render(_demo()).digest == render(_demo()).digest


def test_committed_dockerfiles_are_the_render_of_their_plans() -> None:
    for name in ("demo", "m3-cu13", "m3-vllm"):
        loaded = load_plan(
            REPO / "manifests" / f"{name}.yaml", dockerfiles_dir=REPO / "dockerfiles"
        )
        files = render(loaded).files()
        assert set(files) == {"Dockerfile", ASSERT_SPEC}  # all three plans assert something
        for file_name, data in files.items():
            committed = (REPO / "dockerfiles" / name / file_name).read_bytes()
            assert committed == data, f"run `imagekit render {name}` ({file_name})"
        # The checker is imagekit's own file, staged by every build: never committed per plan.
        assert not (REPO / "dockerfiles" / name / ASSERT_CHECKER).exists()


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


def test_assertions_are_the_last_step_through_bind_mounts_of_checker_and_checks() -> None:
    rendered = render(_demo())
    last = rendered.dockerfile.splitlines()[-1]
    assert last == (
        f"RUN --mount=type=bind,source={ASSERT_CHECKER},target={ASSERT_MOUNT} "
        f"--mount=type=bind,source={ASSERT_SPEC},target={ASSERT_SPEC_MOUNT} "
        f"python3 {ASSERT_MOUNT} {ASSERT_SPEC_MOUNT}"
    )
    assert "find_spec" not in rendered.dockerfile  # the checks are not inline
    spec = rendered.files()[ASSERT_SPEC].decode()
    assert '  "find_spec": [\n    "six",\n    "av",\n    "numpy"\n  ],' in spec
    assert '  "pip_check": true\n}\n' in spec
    # What a build stages: the committed files and imagekit's checker, the same for any plan.
    assert rendered.context_files() == {**rendered.files(), ASSERT_CHECKER: assertion_checker()}
    assert ASSERT_CHECKER not in rendered.files()
    m3 = load_plan(REPO / "manifests" / "m3-vllm.yaml", dockerfiles_dir=REPO / "dockerfiles")
    assert render(m3).context_files()[ASSERT_CHECKER] == assertion_checker()
    hashes = rendered.context_sha256()
    assert list(hashes) == ["Dockerfile", ASSERT_SPEC, ASSERT_CHECKER]
    assert hashes["Dockerfile"] == rendered.digest.hex


def test_no_assertions_no_checker_and_no_step() -> None:
    loaded = _demo()
    bare = replace(loaded, plan=loaded.plan.model_copy(update={"assertions": Assertions()}))
    rendered = render(bare)
    assert list(rendered.files()) == ["Dockerfile"]
    assert list(rendered.context_files()) == ["Dockerfile"]
    assert "--mount=type=bind" not in rendered.dockerfile


@pytest.mark.parametrize("name", ["Dockerfile", ASSERT_SPEC, ASSERT_CHECKER])
def test_an_overlay_may_not_be_a_rendered_or_staged_file(project: Workspace, name: str) -> None:
    path = project.plans_dir / "demo.yaml"
    (project.dockerfiles_dir / "demo" / name).write_text("print('mine')\n")
    path.write_text(path.read_text().replace("overlay/av_about.py", name))
    with pytest.raises(PlanError, match=name):
        load_plan(path, dockerfiles_dir=project.dockerfiles_dir)


def test_write_rendered_reports_changes(project: Workspace) -> None:
    loaded = load_plan(project.plans_dir / "demo.yaml", dockerfiles_dir=project.dockerfiles_dir)
    target = project.dockerfiles_dir / "demo" / "Dockerfile"
    checks = project.dockerfiles_dir / "demo" / ASSERT_SPEC
    target.unlink()
    assert write_rendered(loaded).changed
    assert not write_rendered(loaded).changed
    assert target.read_bytes() == render(loaded).data
    checks.write_bytes(checks.read_bytes() + b"\n")  # only the checks differ
    written = write_rendered(loaded)
    assert written.changed and written.not_rendered == ()
    assert checks.read_bytes() == render(loaded).files()[ASSERT_SPEC]
    # A plan that stops asserting anything leaves no checks behind, and says so.
    bare = replace(loaded, plan=loaded.plan.model_copy(update={"assertions": Assertions()}))
    removed = write_rendered(bare)
    assert removed.changed and removed.not_rendered == (ASSERT_SPEC,)
    assert not checks.exists()
    assert not write_rendered(bare).changed


def test_render_cli_check_finds_stale_files(project: Workspace) -> None:
    ok = CliRunner().invoke(render_command, ["--check", "--json"])
    assert ok.exit_code == 0, ok.output
    documents = {d["plan"]: d for d in json.loads(ok.stdout)}
    assert set(documents) == {"demo", "h3-spark", "m3-cu13", "m3-vllm"}
    # h3-spark's base digest is cut short: nothing is rendered for it, and that is said.
    assert documents["h3-spark"]["sha256"] is None
    assert "builds render it with --base" in documents["h3-spark"]["note"]
    assert not documents["h3-spark"]["changed"]
    for stale_file in ("Dockerfile", ASSERT_SPEC):
        target = project.dockerfiles_dir / "m3-cu13" / stale_file
        committed = target.read_bytes()
        target.write_bytes(committed + b"# stale\n")
        stale = CliRunner().invoke(render_command, ["--check"])
        assert stale.exit_code == 1, stale_file
        assert "STALE" in stale.stdout
        assert target.read_bytes() == committed + b"# stale\n"  # --check writes nothing
        fixed = CliRunner().invoke(render_command, ["m3-cu13"])
        assert fixed.exit_code == 0 and "written" in fixed.stdout
        assert target.read_bytes() == committed
    (project.dockerfiles_dir / "m3-vllm" / ASSERT_SPEC).unlink()
    assert CliRunner().invoke(render_command, ["--check"]).exit_code == 1
    assert CliRunner().invoke(render_command, []).exit_code == 0
    assert [r.changed for r in render_plans(project, None, check=True)] == [False] * 4


def test_a_checker_committed_by_an_earlier_imagekit_is_stale_and_removed(
    project: Workspace,
) -> None:
    """dockerfiles/NAME/imagekit-assert.py, as imagekit once rendered it: no render produces
    it any more (every build stages the package's checker), so `render --check` says it is
    stale and `render` removes it, naming it; nothing else in the folder changes."""
    folder = project.dockerfiles_dir / "demo"
    old = folder / ASSERT_CHECKER
    old.write_text("# The post-build assertions of the plan demo\nSPEC = {}\n")
    committed = {name: (folder / name).read_bytes() for name in ("Dockerfile", ASSERT_SPEC)}
    check = CliRunner().invoke(render_command, ["--check"])
    assert check.exit_code == 1, check.output
    assert f"{old}: STALE: the plan does not render it (`imagekit render` removes it)" in (
        check.stdout.splitlines()
    )
    assert old.exists()  # --check writes nothing
    as_json = CliRunner().invoke(render_command, ["--check", "--json"])
    assert as_json.exit_code == 1
    documents = {d["plan"]: d for d in json.loads(as_json.stdout)}
    assert documents["demo"]["changed"] and documents["demo"]["not_rendered"] == [str(old)]
    assert documents["m3-cu13"]["not_rendered"] == [] and not documents["m3-cu13"]["changed"]
    written = CliRunner().invoke(render_command, ["demo"])
    assert written.exit_code == 0, written.output
    assert f"{old}: removed: the plan does not render it" in written.stdout.splitlines()
    assert not old.exists()
    assert {name: (folder / name).read_bytes() for name in committed} == committed
    assert CliRunner().invoke(render_command, ["--check"]).exit_code == 0


def test_render_of_a_plan_with_a_cut_short_digest(project: Workspace) -> None:
    named = CliRunner().invoke(render_command, ["h3-spark"])
    assert named.exit_code == 2 and "base.reference" in named.stderr
    # A rendered file left in its folder is stale (no render can match it) and goes on write.
    left = project.dockerfiles_dir / "h3-spark" / "Dockerfile"
    left.write_text("FROM scratch\n")
    checker = project.dockerfiles_dir / "h3-spark" / ASSERT_CHECKER
    checker.write_text("SPEC = {}\n")
    stale = CliRunner().invoke(render_command, ["--check"])
    assert stale.exit_code == 1 and "STALE" in stale.stdout
    assert f"{checker}: STALE" in stale.stdout
    assert CliRunner().invoke(render_command, []).exit_code == 0
    assert not left.exists() and not checker.exists()
    # With a base, the build renders it in memory: FROM the override, the guard, ENTRYPOINT.
    base = "127.0.0.1:5113/imagekit-seeds/h3@sha256:" + "56" * 32
    loaded = load_plan(
        project.plans_dir / "h3-spark.yaml",
        dockerfiles_dir=project.dockerfiles_dir,
        base_override=base,
    )
    text = render(loaded).dockerfile
    assert f"FROM --platform=linux/arm64 {base}" in text
    assert "want=53e875307d962be3225ed71f64d554dafece5587b2b0ce4c5e942afa7000e1c5" in text
    assert 'ENTRYPOINT ["/usr/local/bin/start-minimax-h3"]' in text


def test_pip_uninstall_renders_a_guarded_uninstall(project: Workspace) -> None:
    path = project.plans_dir / "m3-cu13.yaml"
    data = yaml.safe_load(path.read_text())
    data["steps"].insert(0, {"kind": "pip_uninstall", "names": ["nixl"]})
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    text = render(load_plan(path, dockerfiles_dir=project.dockerfiles_dir)).dockerfile
    line = next(ln for ln in text.splitlines() if "pip uninstall" in ln)
    assert "python3 -m pip uninstall -y nixl" in line
    assert "IMAGEKIT_PACKAGES not-installed name=$p" in line


def test_render_cli_bad_plan_is_exit_2(project: Workspace) -> None:
    path = project.plans_dir / "m3-cu13.yaml"
    path.write_text(path.read_text().replace("nixl-cu12==1.2.0", "nixl-cu12>=1.2"))
    result = CliRunner().invoke(render_command, ["m3-cu13"])
    assert result.exit_code == 2
    assert "m3-cu13.yaml: steps[0].requirements" in result.stderr


def test_an_overlay_mode_and_owner_render_as_copy_flags() -> None:
    loaded = _demo()
    steps = list(loaded.plan.steps)
    overlay = steps[2]
    steps[2] = overlay.model_copy(update={"mode": "0750", "owner": "12:34"})
    changed = replace(loaded, plan=loaded.plan.model_copy(update={"steps": steps}))
    lines = render(changed).dockerfile.splitlines()
    assert "COPY --chmod=0750 --chown=12:34 overlay/imagekit-demo-hello " in "\n".join(lines) + " "
    # Without them the COPY line is the one committed for the demo.
    assert render(loaded).dockerfile == (REPO / "dockerfiles" / "demo" / "Dockerfile").read_text()


@pytest.mark.parametrize("absent", [True, False])
def test_the_engine_guard_refuses_a_destination_a_link_carries_into_proc(
    tmp_path: Path, absent: bool
) -> None:
    """The guard step runs the way RUN runs it (``sh -c``), here on a folder whose ``bin`` is
    a link to /proc/self: COPY would follow it and write under /proc, so the step stops the
    build with IMAGEKIT_OVERLAY_BLOCKED naming where the path resolves; a plain folder
    passes on to the usual check."""
    from imagekit.plans.steps import Overlay

    root = tmp_path / "img"
    (root / "usr").mkdir(parents=True)
    (root / "usr" / "bin").symlink_to("/proc/self")
    (root / "opt").mkdir()
    for where, blocked in ((root / "usr" / "bin" / "new.sh", True), (root / "opt" / "x", False)):
        replaces = {"absent": True} if absent else {"sha256": "0" * 64}
        step = Overlay.model_validate(
            {"kind": "overlay", "source": "x", "destination": str(where), "replaces": replaces}
        )
        lines = render_overlay(step)
        assert lines[0].startswith("RUN ") and lines[1].startswith("COPY ")
        done = subprocess.run(
            ["/bin/sh", "-c", lines[0].removeprefix("RUN ")],  # noqa: S603
            capture_output=True,
            text=True,
            check=False,
        )
        if blocked:
            assert done.returncode == 1
            assert f"IMAGEKIT_OVERLAY_BLOCKED path={where} resolves=/proc/" in done.stderr
        else:
            assert "IMAGEKIT_OVERLAY_BLOCKED" not in done.stderr
            assert (done.returncode == 0) is absent, done.stderr  # absent passes, sha drifts


def test_a_plan_of_several_platforms_renders_the_target_platform(tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "manifests" / "demo.yaml").read_text())
    data["base"].pop("platform")
    data["base"]["platforms"] = ["linux/amd64", "linux/arm64"]
    (tmp_path / "demo.yaml").write_bytes(yaml.safe_dump(data, sort_keys=False).encode())
    loaded = load_plan(tmp_path / "demo.yaml", dockerfiles_dir=REPO / "dockerfiles")
    multi = render(loaded).dockerfile.splitlines()
    single = render(_demo()).dockerfile.splitlines()
    changed = [(a, b) for a, b in zip(single, multi, strict=True) if a != b]
    # Only the FROM line (and the plan's hash, which is of other bytes) differ.
    assert [b for a, b in changed if a.startswith("FROM ")] == [
        f"FROM --platform=$TARGETPLATFORM {loaded.base}"
    ]
    assert all(
        a.startswith(("FROM ", "# plan sha256", "      io.imagekit.plan-sha256"))
        for a, _ in changed
    )
