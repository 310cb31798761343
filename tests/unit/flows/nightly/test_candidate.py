"""A night's candidate takes the builder `imagekit build` would, with the night's cache."""

from __future__ import annotations

import shutil

import pytest

from imagekit.flows.nightly.options import NightOptions
from imagekit.plans.load import load_named_plan
from imagekit.workspace import Workspace
from tests.unit.flows.nightly.support import DIGEST, REPO_ROOT


def _demo_plans(ws: Workspace) -> None:
    """The demo plan (a pip step: the engine's) and an overlay-only copy (the registry's)."""
    text = (REPO_ROOT / "manifests" / "demo.yaml").read_text()
    (ws.plans_dir / "demo.yaml").write_text(text)
    pip = "  - kind: pip_install\n    requirements:\n      - six==1.16.0\n"
    assert pip in text
    (ws.plans_dir / "overlays.yaml").write_text(
        text.replace("name: demo\n", "name: overlays\n").replace(pip, "")
    )
    for name in ("demo", "overlays"):
        shutil.copytree(REPO_ROOT / "dockerfiles" / "demo", ws.dockerfiles_dir / name)


@pytest.mark.parametrize(
    ("plan", "asked", "builder"),
    [
        ("demo", {}, "engine"),
        ("overlays", {}, "registry"),
        ("demo", {"buildkit": "tcp://127.0.0.1:1"}, "buildkit"),
        ("overlays", {"buildkit": "unix:///run/b.sock"}, "buildkit"),
        ("demo", {"buildx_builder": "farm"}, "buildx"),
    ],
)
def test_a_nights_candidate_takes_the_builder_imagekit_build_would(
    ws: Workspace, plan: str, asked: dict[str, str], builder: str
) -> None:
    """The night asks imagekit.builders.choice, with the push it will make: the same plan and
    options give the same builder as `imagekit build --push REPO`."""
    from imagekit.builders.choice import chosen_builder
    from imagekit.builders.options import BuildOptions
    from imagekit.flows.nightly.candidate import candidate_options

    _demo_plans(ws)
    loaded = load_named_plan(ws, plan)
    repo, base = "127.0.0.1:1/team/x", f"127.0.0.1:1/base@{DIGEST}"
    options = NightOptions(**asked)  # type: ignore[arg-type]
    chosen, build = candidate_options(loaded, options, repo, "nightly-1", base)
    as_build = BuildOptions(builder="auto", push=repo, **asked)  # type: ignore[arg-type]
    assert chosen == builder == chosen_builder(loaded.plan, as_build)
    assert build.base_override == base
    if builder == "engine":  # built under a local tag, pushed by the night unrecorded
        assert (build.push, build.tag, build.no_cache) == (None, "imagekit/demo:nightly-1", True)
    elif builder == "registry":  # pushed and recorded under the candidate tag
        assert (build.builder, build.push, build.tag) == ("registry", repo, "nightly-1")
    else:  # pushed by digest by BuildKit, without cache as a night rebuilds
        assert (build.push, build.no_cache, build.tag) == (repo, True, None)
        assert (build.buildkit, build.buildx_builder) == (
            asked.get("buildkit"),
            asked.get("buildx_builder"),
        )


def test_a_nights_registry_cache_is_used_and_said(ws: Workspace) -> None:
    from imagekit.flows.nightly.candidate import candidate_options

    _demo_plans(ws)
    loaded = load_named_plan(ws, "demo")
    cached = NightOptions(buildkit="tcp://127.0.0.1:1", cache_ref="127.0.0.1:1/cache:demo")
    _, build = candidate_options(loaded, cached, "127.0.0.1:1/x", "nightly-1", "b")
    assert build.cache_ref == "127.0.0.1:1/cache:demo" and not build.no_cache
    assert "registry cache 127.0.0.1:1/cache:demo" in cached.rebuild()
    assert "not run again" in cached.rebuild()
    assert NightOptions().rebuild() == "a rebuild without cache"
    assert NightOptions(buildx_builder="farm").rebuild() == (
        "a rebuild without cache on the buildx builder farm"
    )


@pytest.mark.parametrize(
    ("plan", "asked"),
    [("demo", {}), ("overlays", {}), ("demo", {"buildkit": "tcp://127.0.0.1:1"})],
    ids=["engine", "registry", "buildkit"],
)
def test_every_builder_of_a_night_marks_its_build_as_the_candidate(
    ws: Workspace, plan: str, asked: dict[str, str]
) -> None:
    """Whichever builder makes it, the candidate's build record says so (the lock never takes
    it for the plan's current image), and names the night's tag."""
    from imagekit.flows.nightly.candidate import candidate_options

    _demo_plans(ws)
    loaded = load_named_plan(ws, plan)
    options = NightOptions(**asked)  # type: ignore[arg-type]
    _, build = candidate_options(loaded, options, "127.0.0.1:1/x", "nightly-1", "b")
    assert build.candidate == "nightly-1"
