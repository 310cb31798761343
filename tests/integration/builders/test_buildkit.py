"""Builds on the real engine through BuildKit, from the real base fixture in a real registry.

Each test builds under a unique tag and removes the images it made. The demo's pip pin is
downloaded from the real package index inside the build (through the host CA bundle as a
BuildKit secret, which the TLS-intercepting proxy on our machines requires).

The tests that take the ``client`` fixture run twice: through ``docker buildx build`` on the
engine's own docker-driver builder (the path nearly every user takes) and through the legacy
client with ``DOCKER_BUILDKIT=1`` (the fallback where no buildx plugin is installed).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from imagekit.builders.buildkit import build_plan
from imagekit.builders.options import BuildOptions
from imagekit.cli.build_cmd import command as build_command
from imagekit.errors import BuildFailed
from imagekit.ledger import read_records
from imagekit.plans.render import assertion_checker
from imagekit.runtime.engine import BUILDX_ENV, Engine, connect
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.demo_variants import NO_NUMPY, index_url, write_variant
from tests.support.engine_refs import new_tag
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration

AV_ABOUT = "/usr/lib/python3/dist-packages/av/about.py"
AV_ABOUT_SHA256 = "75e5d191c344a5bdf61c1ee3e720661cb2d0c38e8d3bfb90b587b8107303c92e"


BUILDERS = {"buildx": "buildx", "legacy": "docker build (BuildKit)"}


@pytest.fixture(params=sorted(BUILDERS))
def client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    """The engine as a build connects to it, once through buildx and once through the legacy
    client ($IMAGEKIT_DOCKER_BUILDX=0), for the in-process calls and the CLI alike."""
    monkeypatch.setenv(BUILDX_ENV, "1" if request.param == "buildx" else "0")
    connect.cache_clear()
    engine = connect()
    assert engine.has_buildx == (request.param == "buildx")
    yield engine
    connect.cache_clear()


def _run(engine: Engine, image: str, *argv: str) -> str:
    return subprocess.run(
        [engine.client_path, "run", "--rm", "--network", "none", image, *argv],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _refused(
    engine: Engine, workspace: Workspace, name: str, base: BaseImage, made: list[str]
) -> tuple[str, BuildFailed]:
    """Build plan ``name`` on the base under a tag of its own, which must fail: (tag, error)."""
    tag = new_tag(name, made)
    with pytest.raises(BuildFailed) as info:
        build_plan(
            workspace, name, BuildOptions(tag=tag, base_override=base.reference), engine=engine
        )
    return tag, info.value


def test_demo_builds_end_to_end_and_pushes(
    client: Engine,
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    created_refs: list[str],
) -> None:
    tag = new_tag("demo", created_refs)
    push_repo = f"{registry.host}/imagekit-test/demo-build"
    created_refs.append(f"{push_repo}:{tag.rpartition(':')[2]}")
    index = index_url()
    result = CliRunner().invoke(
        build_command,
        [
            "demo",
            "--base",
            base_image.reference,
            "--tag",
            tag,
            "--push",
            push_repo,
            "--no-cache",  # so that every step runs and prints its checks into this log
            "--json",
        ],
        env={"PIP_INDEX_URL": index},
    )
    assert result.exit_code == 0, result.stderr[-3000:]
    doc = json.loads(result.stdout)  # exactly one JSON document on stdout
    assert doc["tag"] == tag and doc["image_id"].startswith("sha256:")
    assert doc["builder"] == BUILDERS["buildx" if client.has_buildx else "legacy"]
    assert doc["base"] == base_image.reference
    engine = client
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", doc["manifest_digest"])
    assert doc["pushed"] == f"{push_repo}@{doc['manifest_digest']}"

    # The log streamed to stderr and is kept in evidence, with the in-build checks in it.
    log = Path(doc["log"])
    assert log.is_file() and log.parent.parent == workspace.evidence_dir / "demo"
    text = log.read_text()
    assert "IMAGEKIT_OVERLAY_OK path=" + AV_ABOUT in text
    assert "IMAGEKIT_ASSERT_PASS find_spec six" in text
    assert "IMAGEKIT_ASSERTIONS_PASSED" in text
    assert "Successfully installed six-1.16.0" in text
    assert "IMAGEKIT_ASSERTIONS_PASSED" in result.stderr
    # The image ID is the one BuildKit wrote into the engine under the tag, in either store.
    written = set(re.findall(r"writing image (sha256:[0-9a-f]{64})", text))
    assert written == {doc["image_id"]} == {engine.client.image.inspect(tag).id}
    assert (log.parent / "Dockerfile").read_text().startswith("# Rendered by")

    # The image: labels, the overlay content, the new file, the pinned package.
    inspected = engine.client.image.inspect(tag)
    labels = inspected.config.labels or {}
    assert labels["org.opencontainers.image.base.digest"] == base_image.digest
    assert labels["io.imagekit.plan"] == "demo"
    plan_bytes = (workspace.plans_dir / "demo.yaml").read_bytes()
    assert labels["io.imagekit.plan-sha256"] == hashlib.sha256(plan_bytes).hexdigest()
    overlay = (workspace.dockerfiles_dir / "demo" / "overlay" / "av_about.py").read_text()
    assert _run(engine, tag, "cat", AV_ABOUT) == overlay
    assert "hello from overlay-1" in _run(engine, tag)  # CMD is the new launcher
    assert _run(engine, tag, "python3", "-c", "import six; print(six.__version__)") == "1.16.0\n"
    # Neither the CA bundle nor the index URL is in the image, its env or its history.
    assert _run(engine, tag, "sh", "-c", "ls -A /run/secrets 2>/dev/null | wc -l") == "0\n"
    # The assertion checker and the plan's checks were bind-mounted for their step only: not
    # in the image, and the log shows one short RUN line for them, not the script.
    for mounted in ("/tmp/imagekit-assert.py", "/tmp/imagekit-assert.json"):
        assert _run(engine, tag, "sh", "-c", f"test -e {mounted}; echo $?") == "1\n"
    # ... and they left nothing behind: no mount-point folder either.
    assert _run(engine, tag, "sh", "-c", "ls -A /tmp | wc -l") == "0\n"
    run_lines = [line for line in text.splitlines() if "/tmp/imagekit-assert.py" in line]
    # (two mounts and two paths: longer than the one mount's 200, far from the script's)
    assert run_lines and all(len(line) < 260 for line in run_lines)
    assert "def report(" not in text and '"find_spec": [' not in text
    # The evidence keeps what the build ran: the committed checks, the package's checker.
    checks = (workspace.dockerfiles_dir / "demo" / "imagekit-assert.json").read_bytes()
    assert (log.parent / "imagekit-assert.json").read_bytes() == checks
    assert (log.parent / "imagekit-assert.py").read_bytes() == assertion_checker()
    history = subprocess.run(
        [engine.client_path, "history", "--no-trunc", "--format", "{{.CreatedBy}}", tag],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert index not in history
    assert not re.search(r"\|\d+ PIP_INDEX_URL=", history)  # how an ARG would show up
    assert not any("PIP_" in env for env in inspected.config.env or [])

    records = read_records(workspace.ledger_path)
    assert [r.kind for r in records] == ["build", "push"]
    assert records[0].status == "built" and records[0].details["image_id"] == doc["image_id"]
    assert records[0].images["base"] == base_image.reference
    # The base as the registry describes it, for the lock file's upstream entry.
    base_details = records[0].details["base"]
    assert base_details["manifest_digest"] == base_image.digest
    assert base_details["config_digest"].startswith("sha256:")
    assert len(base_details["layer_digests"]) == 1 and base_details["compressed_layer_bytes"] > 0
    assert records[1].images["pushed"] == doc["pushed"]
    # The record pins every file of the context but the overlays, the checker's exact bytes too.
    assert records[0].details["rendered_sha256"] == {
        name: hashlib.sha256((log.parent / name).read_bytes()).hexdigest()
        for name in ("Dockerfile", "imagekit-assert.json", "imagekit-assert.py")
    }
    assert (
        records[0].details["rendered_sha256"]["imagekit-assert.py"]
        == hashlib.sha256(assertion_checker()).hexdigest()
    )


def test_drifted_overlay_fails_before_the_copy(
    engine: Engine, base_image: BaseImage, workspace: Workspace, created_refs: list[str]
) -> None:
    data = yaml.safe_load((workspace.plans_dir / "demo.yaml").read_text())
    steps = data["steps"]
    wrong = "0" * 64
    steps[1]["replaces"] = {"sha256": wrong}
    write_variant(workspace, "drift", {"steps": steps})
    tag, err = _refused(engine, workspace, "drift", base_image, created_refs)
    assert err.exit_code == 1 and err.reason == "overlay-drift"
    assert f"path={AV_ABOUT}" in err.message
    assert f"expected=sha256:{wrong}" in err.message
    assert f"actual=sha256:{AV_ABOUT_SHA256}" in err.message
    assert err.step is not None and f"p={AV_ABOUT};" in err.step
    log = err.log.read_text()
    assert not re.search(r"^#\d+ \[\d+/\d+\] COPY overlay/av_about\.py", log, re.MULTILINE)
    assert not engine.client.image.exists(tag)
    records = read_records(workspace.ledger_path)
    assert [(r.kind, r.status) for r in records] == [("rejected-build", "rejected")]
    assert records[0].details["reason"] == "overlay-drift"


def test_failed_assertion_rejects_the_build_and_keeps_its_log(
    client: Engine, base_image: BaseImage, workspace: Workspace, created_refs: list[str]
) -> None:
    # The seed's first fix: remove something, then find it missing at the assertion.
    write_variant(workspace, "no-numpy", NO_NUMPY)
    tag = new_tag("no-numpy", created_refs)
    result = CliRunner().invoke(
        build_command, ["no-numpy", "--base", base_image.reference, "--tag", tag, "--json"]
    )
    assert result.exit_code == 1, result.stderr[-3000:]
    error = json.loads(result.stdout)["error"]
    assert error["type"] == "BuildFailed" and error["reason"] == "assertion-failed"
    assert "find_spec numpy" in error["message"]
    assert any("IMAGEKIT_ASSERT_FAIL find_spec numpy" in line for line in error["last_lines"])
    assert error["step"].startswith("[")
    assert "RUN --mount=type=bind,source=imagekit-assert.py," in error["step"]
    log = Path(error["log"])
    assert log.is_file() and "IMAGEKIT_ASSERTIONS_REJECTED 1 failed" in log.read_text()
    assert "IMAGEKIT_ASSERT_PASS pip_check" in log.read_text()
    assert not client.client.image.exists(tag)
    records = read_records(workspace.ledger_path)
    assert [(r.kind, r.details["reason"]) for r in records] == [
        ("rejected-build", "assertion-failed")
    ]
    assert records[0].evidence is not None


def test_removing_a_package_that_takes_others_with_it_is_refused(
    engine: Engine, base_image: BaseImage, workspace: Workspace, created_refs: list[str]
) -> None:
    write_variant(
        workspace,
        "rm-numpy",
        {
            "steps": [{"kind": "remove_system_packages", "names": ["python3-numpy"]}],
            "assertions": {"pip_check": True},
        },
    )
    _, err = _refused(engine, workspace, "rm-numpy", base_image, created_refs)
    assert err.reason == "system-packages"
    assert "would-also-remove names=python3-av" in err.message


def test_unreachable_base_registry_is_exit_3(
    engine: Engine, workspace: Workspace, created_refs: list[str]
) -> None:
    # A closed loopback port stands for docker.io, which cannot be reached from here either
    # (without risking a 10 GB pull where it can).
    unreachable = "127.0.0.1:9/imagekit-test/nowhere@sha256:" + "1" * 64
    result = CliRunner().invoke(build_command, ["demo", "--base", unreachable])
    assert result.exit_code == 3, result.stderr[-2000:]
    assert "the registry 127.0.0.1:9 could not be reached" in result.stderr
    # Could not finish is not a rejected build: nothing goes into the ledger.
    assert not workspace.ledger_path.exists() or read_records(workspace.ledger_path) == []


def _imagekit_processes_under(folder: Path) -> list[str]:
    """Command lines of live processes that name a path under ``folder`` (the build's
    docker client names its context and iidfile there).

    Read from /proc: `ps -eo args` cuts its lines at $COLUMNS (80 under pytest), which cut the
    path off and made this check find nothing whatever was running.
    """
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # the process ended while we looked
        if str(folder) in args:
            found.append(args)
    return found


def test_a_terminated_build_removes_its_temporary_context_and_stops_its_client(
    client: Engine,
    base_image: BaseImage,
    workspace: Workspace,
    created_refs: list[str],
    tmp_path: Path,
) -> None:
    # The last step runs silently for a while: a docker client that is only stopped when it
    # next writes to a closed pipe (python-on-whales' streaming) would outlive imagekit here.
    write_variant(
        workspace,
        "slow",
        {"assertions": {"commands": [{"argv": ["sleep", "120"], "exit_code": 0}]}},
    )
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    tag = new_tag("sigterm", created_refs)
    imagekit = str(Path(sys.executable).parent / "imagekit")
    proc = subprocess.Popen(
        [imagekit, "build", "slow", "--base", base_image.reference, "--tag", tag, "--no-cache",
         "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(private_tmp), "PIP_INDEX_URL": index_url()},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not any(
            "/tmp/imagekit-assert.py" in log.read_text()
            for log in (workspace.evidence_dir / "slow").glob("*/build.log")
        ):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(3)  # the checker is in its silent sleep
        assert _imagekit_processes_under(private_tmp) != []  # the client is running
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, stderr[-2000:]
    assert json.loads(stdout)["interrupted"]["signal"] == "SIGTERM"
    assert list(private_tmp.iterdir()) == []
    time.sleep(1)
    assert _imagekit_processes_under(private_tmp) == []
    assert not workspace.ledger_path.exists()  # not a rejected build: nothing recorded


def test_the_engine_path_builds_on_the_engines_own_builder_whatever_buildx_has_selected(
    engine: Engine,
    base_image: BaseImage,
    workspace: Workspace,
    created_refs: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A user who selected another builder (`docker buildx use`, $BUILDX_BUILDER) for other
    # work: the engine path still builds on the engine it pulled the base into. A remote
    # builder is asked for by name (--buildx-builder), never picked up by accident.
    assert engine.has_buildx
    monkeypatch.setenv("BUILDX_BUILDER", "imagekit-test-no-such-builder")
    tag = new_tag("own-builder", created_refs)
    result = build_plan(
        workspace,
        "demo",
        BuildOptions(tag=tag, base_override=base_image.reference),
        engine=engine,
    )
    log = result.log.read_text()
    assert 'building with "default" instance using docker driver' in log
    assert engine.client.image.inspect(tag).id == result.image_id


def test_a_build_onto_a_ledger_that_does_not_verify_is_reported_and_not_recorded(
    base_image: BaseImage, workspace: Workspace, created_refs: list[str]
) -> None:
    workspace.ledger_path.write_bytes(b'{"seq": 1')  # a torn line
    tag = new_tag("refused", created_refs)
    result = CliRunner().invoke(
        build_command,
        ["demo", "--base", base_image.reference, "--tag", tag, "--json"],
        env={"PIP_INDEX_URL": index_url()},
    )
    assert result.exit_code == 1, result.stderr[-3000:]
    document = json.loads(result.stdout)
    assert document["tag"] == tag and document["image_id"].startswith("sha256:")
    assert Path(document["log"]).is_file()
    assert "torn line" in document["ledger_refused"]["message"]
    assert workspace.ledger_path.read_bytes() == b'{"seq": 1'


def test_a_destination_a_base_link_carries_into_proc_is_refused_before_the_copy(
    engine: Engine,
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    created_refs: list[str],
    tmp_path: Path,
) -> None:
    """The plan writes /opt/tools/new.sh; the base makes /opt/tools a link to /proc/self.
    COPY would follow it, so the guard step follows it too and stops the build naming where
    the path resolves: the rule against /proc holds for the path as the image resolves it."""
    context = tmp_path / "linkbase"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f"FROM {base_image.reference}\nRUN ln -s /proc/self /opt/tools\n"
    )
    based = f"{registry.host}/imagekit-test/linkbase:{secrets.token_hex(4)}"
    created_refs.append(based)
    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    for argv in (
        ["build", "--network", "host", "-q", "-t", based, str(context)],
        ["push", "-q", based],
    ):
        subprocess.run([engine.client_path, *argv], check=True, capture_output=True, env=env)
    pinned = subprocess.run(
        [engine.client_path, "inspect", "--format", "{{index .RepoDigests 0}}", based],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    step = {
        "kind": "overlay",
        "source": "overlay/imagekit-demo-hello",
        "destination": "/opt/tools/new.sh",
        "replaces": {"absent": True},
    }
    write_variant(workspace, "into-proc", {"steps": [step], "assertions": {}})
    tag = new_tag("into-proc", created_refs)
    with pytest.raises(BuildFailed) as info:
        build_plan(
            workspace, "into-proc", BuildOptions(tag=tag, base_override=pinned), engine=engine
        )
    err = info.value
    assert err.exit_code == 1 and err.reason == "destination-blocked", err.message
    assert "path=/opt/tools/new.sh resolves=/proc/" in err.message
    assert not engine.client.image.exists(tag)
    records = read_records(workspace.ledger_path)
    assert [(r.kind, r.details["reason"]) for r in records] == [
        ("rejected-build", "destination-blocked")
    ]
