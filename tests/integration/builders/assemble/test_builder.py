"""`imagekit build --builder registry` on the real Debian base in a real registry.

The demo plan's overlay-only variant (its overlays, env, labels, cmd and assertions, without
the pip step) is assembled without an engine build or a base pull, twice, to the same
digest; skopeo and the engine then read the result and must agree with what imagekit said.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from imagekit.builders.assemble import AssembleOptions, AssembleResult, assemble_plan
from imagekit.cli.build_cmd import command as build_command
from imagekit.ledger import read_records
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.demo_variants import overlay_only
from tests.support.faultproxy import FaultProxy
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration

AV_ABOUT = "/usr/lib/python3/dist-packages/av/about.py"
AV_ABOUT_SHA256 = "75e5d191c344a5bdf61c1ee3e720661cb2d0c38e8d3bfb90b587b8107303c92e"


def _skopeo(*args: str) -> str:
    done = subprocess.run(
        ["skopeo", *args, "--tls-verify=false"], capture_output=True, text=True, check=True
    )
    return done.stdout


Assemble = Callable[[str, str], AssembleResult]


@pytest.fixture
def assemble(workspace: Workspace, base_image: BaseImage, cache_dir: Path) -> Assemble:
    """``assemble(NAME, REPO)``: plan NAME assembled on the test base and pushed to REPO, with
    the test's own layer-index cache, as the demo tests run it (cold, warm, refused)."""

    def run(name: str, repo: str) -> AssembleResult:
        base = base_image.reference
        return assemble_plan(
            workspace, name, AssembleOptions(push=repo, base_override=base, cache_dir=cache_dir)
        )

    return run


def test_demo_overlay_only_builds_reproducibly_and_the_tools_agree(
    engine: Engine,
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    assemble: Assemble,
    created_refs: list[str],
) -> None:
    name = overlay_only(workspace, "demo-overlay")
    repo = f"{registry.host}/imagekit-test/demo-overlay"
    first = assemble(name, repo)
    created_refs.append(first.pushed)
    # Cold: the base's one layer was streamed and indexed (nothing written but the index).
    assert [u.how for u in first.layers] == ["read"]
    assert first.layers[0].stats is not None and first.layers[0].stats.entries > 1000
    assert [c.verdict for c in first.guard] == ["ok", "ok"]
    assert first.guard[0].found == f"sha256:{AV_ABOUT_SHA256}"
    # Same registry: the base's blob was mounted, never uploaded.
    assert first.push.blobs_mounted == 1 and first.push.bytes_uploaded < 10_000
    assert first.assertions.status == "passed"
    assert first.assertions.execution is not None and first.assertions.execution.how == "native"
    # The record pins the checker that said passed: imagekit's own, staged from the package.
    checker = resources.files("imagekit.plans").joinpath("assert_checker.py").read_bytes()
    assert first.assertions.checker_sha256 == hashlib.sha256(checker).hexdigest()
    built = [r for r in read_records(workspace.ledger_path) if r.kind == "build"]
    assert built[-1].details["assertions"]["checker_sha256"] == first.assertions.checker_sha256

    # Warm and again from scratch in the registry's eyes: the same digest, no layer read.
    second = assemble(name, repo)
    assert second.manifest_digest == first.manifest_digest
    assert second.config_digest == first.config_digest
    assert second.layer == first.layer
    assert [u.how for u in second.layers] == ["cached"]
    assert second.tag != first.tag  # each run tags anew; the content is the same

    # skopeo agrees with what imagekit reported ...
    raw = _skopeo("inspect", "--raw", f"docker://{second.tag}")
    manifest = json.loads(raw)
    assert manifest["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json"
    assert manifest["config"]["digest"] == first.config_digest
    assert manifest["layers"][-1]["digest"] == str(first.layer.digest if first.layer else "")
    inspected = json.loads(_skopeo("inspect", f"docker://{second.tag}"))
    assert inspected["Digest"] == first.manifest_digest
    assert inspected["Architecture"] == "amd64"
    labels = inspected["Labels"]
    assert labels["org.opencontainers.image.base.digest"] == base_image.digest
    assert labels["io.imagekit.plan"] == name
    assert labels["org.opencontainers.image.title"] == "imagekit demo"
    config = json.loads(_skopeo("inspect", "--config", "--raw", f"docker://{second.tag}"))
    assert config["rootfs"]["diff_ids"][-1] == str(first.layer.diff_id if first.layer else "")
    assert "IMAGEKIT_DEMO=1" in config["config"]["Env"]
    assert config["config"]["Cmd"] == ["imagekit-demo-hello"]

    # ... and so does the engine: `docker pull` of the tag names the manifest imagekit
    # reported, and the image it made is the config imagekit wrote (a classic store's ID).
    created_refs.append(second.tag)
    pull = subprocess.run(
        [engine.client_path, "pull", second.tag], capture_output=True, text=True, check=True
    )
    assert f"Digest: {first.manifest_digest}" in pull.stdout
    image = engine.client.image.inspect(second.tag)
    assert image.id == first.config_digest
    assert any(d.endswith(first.manifest_digest) for d in image.repo_digests or [])
    assert [str(d) for d in image.root_fs.layers or []][-1] == str(
        first.layer.diff_id if first.layer else ""
    )
    run = [engine.client_path, "run", "--rm", "--network", "none", first.pushed]
    out = subprocess.run([*run, "cat", AV_ABOUT], capture_output=True, text=True, check=True)
    overlay = workspace.dockerfiles_dir / name / "overlay" / "av_about.py"
    assert out.stdout == overlay.read_text()
    hello = subprocess.run(run, capture_output=True, text=True, check=True)
    assert "hello from overlay-1" in hello.stdout
    modes = subprocess.run(
        [*run, "stat", "-c", "%a %u %g %n", "/usr/local/bin/imagekit-demo-hello", AV_ABOUT, "/tmp"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    # 0755 for the executable source, 0644 for the other; /tmp keeps the base's 1777.
    assert modes == [
        "755 0 0 /usr/local/bin/imagekit-demo-hello",
        f"644 0 0 {AV_ABOUT}",
        "1777 0 0 /tmp",
    ]

    records = read_records(workspace.ledger_path)
    assert [(r.kind, r.status) for r in records] == [("build", "built"), ("push", "pushed")] * 2
    build = records[0]
    assert build.details["builder"] == "registry"
    assert build.details["manifest_digest"] == first.manifest_digest
    assert "no engine build and no base pull" in build.scope
    assert build.details["base"]["manifest_digest"] == base_image.digest


def test_a_drifted_file_is_caught_with_no_pull(
    engine: Engine,
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    cache_dir: Path,
) -> None:
    data = yaml.safe_load((workspace.plans_dir / "demo.yaml").read_text())
    steps = [s for s in data["steps"] if s["kind"] != "pip_install"]
    wrong = "0" * 64
    steps[0]["replaces"] = {"sha256": wrong}
    overlay_only(workspace, "demo-drift", {"steps": steps})
    # Everything the build asks of the registry goes through this proxy: its log shows that
    # nothing was pushed.
    with FaultProxy(registry.host) as proxy:
        base = base_image.reference.replace(registry.host, proxy.host)
        repo = f"{proxy.host}/imagekit-test/demo-drift"
        result = CliRunner().invoke(
            build_command,
            ["demo-drift", "--builder", "registry", "--base", base, "--push", repo, "--json"],
            env={"IMAGEKIT_CACHE_DIR": str(cache_dir)},
        )
    assert result.exit_code == 1, result.stderr[-3000:]
    error = json.loads(result.stdout)["error"]
    assert error["type"] == "BuildFailed" and error["reason"] == "overlay-drift"
    assert f"path={AV_ABOUT}" in error["message"]
    assert f"expected=sha256:{wrong}" in error["message"]
    assert f"actual=sha256:{AV_ABOUT_SHA256}" in error["message"]
    assert error["step"] == f"steps[0] overlay {AV_ABOUT}"
    assert not any(e.method == "PUT" and "/manifests/" in e.path for e in proxy.log)
    assert not any("demo-drift" in e.path for e in proxy.log)  # nothing pushed at all
    # No pull: the engine never saw the base through this proxy (it has no such name).
    assert not engine.client.image.exists(base)
    records = read_records(workspace.ledger_path)
    assert [(r.kind, r.status) for r in records] == [("rejected-build", "rejected")]
    assert records[0].details["reason"] == "overlay-drift"
    assert Path(error["log"]).is_file()


def test_the_registry_builder_names_the_step_that_needs_the_engine(
    base_image: BaseImage, registry: RunningRegistry, workspace: Workspace
) -> None:
    repo = f"{registry.host}/imagekit-test/demo"
    args = ["demo", "--builder", "registry", "--base", base_image.reference, "--push", repo]
    result = CliRunner().invoke(build_command, args)
    assert result.exit_code == 2
    assert "steps[0] (pip_install)" in result.stderr
    assert "--builder engine" in result.stderr
    assert "Traceback" not in result.stderr


def test_auto_and_the_options_of_one_builder(
    base_image: BaseImage, registry: RunningRegistry, workspace: Workspace
) -> None:
    overlay_only(workspace, "demo-auto")
    repo = f"{registry.host}/imagekit-test/demo-auto"
    base = ["--base", base_image.reference]
    # Without --push, auto cannot pick the registry (its image lives only there): the engine
    # path would run, and --index is then refused as an option it does not have.
    result = CliRunner().invoke(build_command, ["demo-auto", *base, "--index"])
    assert result.exit_code == 2 and "--index is an option of the registry builder" in result.stderr
    result = CliRunner().invoke(build_command, ["demo-auto", *base, "--push", repo, "--no-cache"])
    assert result.exit_code == 2 and "--no-cache is an option of the engine" in result.stderr
    result = CliRunner().invoke(build_command, ["demo-auto", "--builder", "registry", *base])
    assert result.exit_code == 2 and "needs --push REPO" in result.stderr


def test_a_ledger_that_refuses_the_records_does_not_hide_the_pushed_image(
    registry: RunningRegistry, workspace: Workspace, assemble: Assemble, created_refs: list[str]
) -> None:
    from imagekit.errors import RecordRefused
    from imagekit.flows.nightly.candidate import rejected

    name = overlay_only(workspace, "demo-refused")
    workspace.ledger_path.write_bytes(b'{"seq": 1')  # a torn line: every append is refused
    repo = f"{registry.host}/imagekit-test/demo-refused"
    with pytest.raises(RecordRefused) as info:
        assemble(name, repo)
    kept = info.value.result
    assert kept is not None and kept.__class__.__name__ == "AssembleResult"
    pushed: str = getattr(kept, "pushed")  # noqa: B009 - typed object | None on the error
    created_refs.append(pushed)
    assert pushed.startswith(f"{repo}@sha256:")
    assert json.loads(_skopeo("inspect", f"docker://{pushed}"))["Digest"] == pushed.split("@")[1]
    assert workspace.ledger_path.read_bytes() == b'{"seq": 1'  # nothing appended behind it
    # The night names the image it has to forget, as it does for an engine build.
    why, image = rejected(info.value)
    assert image == getattr(kept, "config_digest")  # noqa: B009
    assert pushed in why and "refused its build record" in why and "torn" in why
