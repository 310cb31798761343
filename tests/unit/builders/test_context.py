"""What every builder of the rendered Dockerfile stages: pip's CA bundle, and a context of
the rendered files and the overlays only."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from imagekit.builders.context import ca_bundle, stage_context
from imagekit.builders.options import BuildOptions
from imagekit.errors import UsageError
from imagekit.plans.load import load_plan
from imagekit.plans.render import ASSERT_CHECKER, ASSERT_SPEC, assertion_checker, render

REPO = Path(__file__).resolve().parents[3]


def test_ca_bundle_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    assert ca_bundle(BuildOptions(ca_bundle=bundle)) == bundle
    monkeypatch.setenv("IMAGEKIT_PIP_CA", str(bundle))
    assert ca_bundle(BuildOptions()) == bundle
    with pytest.raises(UsageError, match="not a file"):
        ca_bundle(BuildOptions(ca_bundle=tmp_path / "missing.pem"))


def test_stage_context_holds_the_rendered_files_and_the_overlays_only(tmp_path: Path) -> None:
    dockerfiles = tmp_path / "dockerfiles"
    shutil.copytree(REPO / "dockerfiles" / "demo", dockerfiles / "demo")
    # A checker an earlier imagekit committed in the plan's folder never reaches the context.
    (dockerfiles / "demo" / ASSERT_CHECKER).write_text("print('IMAGEKIT_ASSERTIONS_PASSED')\n")
    loaded = load_plan(REPO / "manifests" / "demo.yaml", dockerfiles_dir=dockerfiles)
    rendered = render(loaded)
    context = tmp_path / "context"
    context.mkdir()
    stage_context(rendered, context)
    staged = sorted(str(p.relative_to(context)) for p in context.rglob("*") if p.is_file())
    assert staged == sorted(
        [
            "Dockerfile",
            ASSERT_SPEC,
            ASSERT_CHECKER,
            "overlay/av_about.py",
            "overlay/imagekit-demo-hello",
        ]
    )
    # The checks staged are this render's, the checker the package's: what the Dockerfile's
    # bind mounts read.
    assert (context / ASSERT_SPEC).read_bytes() == rendered.files()[ASSERT_SPEC]
    assert (context / ASSERT_CHECKER).read_bytes() == assertion_checker()
    dockerfile = (context / "Dockerfile").read_text()
    assert f"source={ASSERT_SPEC}," in dockerfile and f"source={ASSERT_CHECKER}," in dockerfile
    hello = context / "overlay" / "imagekit-demo-hello"
    assert hello.stat().st_mode & 0o111  # the launcher keeps its mode
