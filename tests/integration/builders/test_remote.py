"""Builds on a BuildKit daemon of their own (`imagekit build NAME --buildkit ADDR`), no engine.

The daemon is a real buildkitd the tests start (runc worker, its own root, a unix socket and
a TCP listener on 127.0.0.1); the base comes from the session's loopback registry and the
image goes back to it, pushed by digest by BuildKit. The assertions then run once more in the
pushed image through the engine, as the registry builder's do.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.errors import EngineUnavailable
from imagekit.ledger import read_records
from imagekit.runtime.engine import connect
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.buildkitd import TOOLS, RunningBuildkitd, start_buildkitd
from tests.support.demo_variants import NO_NUMPY, build_json, write_variant
from tests.support.registries import RunningRegistry
from tests.support.tls import make_server_certificate

pytestmark = pytest.mark.integration

CRANE = str(TOOLS / "crane")


def _registry_digest(ref: str) -> str:
    return subprocess.run(
        [CRANE, "digest", "--insecure", ref], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_demo_builds_on_a_remote_buildkit_pushes_by_digest_and_is_asserted_and_recorded(
    buildkitd: RunningBuildkitd,
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    created_refs: list[str],
) -> None:
    repo = f"{registry.host}/imagekit-test/remote-demo"
    code, out, err = build_json(
        "demo", "--base", base_image.reference, "--buildkit", buildkitd.address, "--push", repo,
        "--no-cache",
    )  # fmt: skip
    assert code == 0, err[-3000:]
    doc = json.loads(out)
    created_refs.append(doc["pushed"])  # the assertions pulled it into the engine
    assert doc["builder"] == "buildkit" and doc["buildkit"] == buildkitd.address
    assert re.fullmatch(rf"{re.escape(repo)}@sha256:[0-9a-f]{{64}}", doc["pushed"])
    # BuildKit pushed it: the registry serves that manifest, as a peer (crane) reads it.
    assert _registry_digest(doc["pushed"]) == doc["manifest_digest"]
    assert doc["image_id"].startswith("sha256:")
    # The in-build guards and assertions ran on the daemon, and again in the pushed image.
    log = Path(doc["log"]).read_text()
    assert "with the BuildKit daemon at " + buildkitd.address in log
    assert "IMAGEKIT_OVERLAY_OK path=/usr/lib/python3/dist-packages/av/about.py" in log
    assert "IMAGEKIT_ASSERTIONS_PASSED" in log and "Successfully installed six-1.16.0" in log
    assert doc["assertions"]["status"] == "passed"
    assert doc["assertions"]["execution"] == "native"
    assert "IMAGEKIT_ASSERTIONS_PASSED" in Path(doc["assertions"]["log"]).read_text()
    [record] = read_records(workspace.ledger_path)
    assert (record.kind, record.status) == ("build", "built")
    assert record.details["builder"] == "buildkit"
    assert record.details["manifest_digest"] == doc["manifest_digest"]
    assert record.details["assertions"]["status"] == "passed"
    assert record.images == {"image": doc["pushed"], "base": base_image.reference}
    assert "on the BuildKit daemon at" in record.scope


def test_a_remote_build_over_tcp_needs_no_engine(
    buildkitd: RunningBuildkitd,
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No assertions to run afterwards, and an engine that cannot be reached: the build, the
    # in-build steps and the push happen on the daemon alone.
    write_variant(workspace, "no-checks", {"assertions": {}})
    assert buildkitd.tcp_address is not None
    repo = f"{registry.host}/imagekit-test/remote-noengine"
    monkeypatch.setenv("IMAGEKIT_DOCKER_CLIENT", "/nonexistent/docker")
    connect.cache_clear()  # a connection made by an earlier test would hide a call
    with pytest.raises(EngineUnavailable):
        connect()
    try:
        code, out, err = build_json(
            "no-checks", "--base", base_image.reference, "--buildkit", buildkitd.tcp_address,
            "--push", repo,
        )  # fmt: skip
    finally:
        connect.cache_clear()
    assert code == 0, err[-3000:]
    doc = json.loads(out)
    assert doc["assertions"]["status"] == "none"
    assert _registry_digest(doc["pushed"]) == doc["manifest_digest"]


def test_a_failed_assertion_on_the_daemon_rejects_the_build(
    buildkitd: RunningBuildkitd,
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
) -> None:
    write_variant(workspace, "no-numpy", NO_NUMPY)
    repo = f"{registry.host}/imagekit-test/remote-rejected"
    code, out, err = build_json(
        "no-numpy", "--base", base_image.reference, "--buildkit", buildkitd.address,
        "--push", repo,
    )  # fmt: skip
    assert code == 1, err[-3000:]
    error = json.loads(out)["error"]
    assert error["reason"] == "assertion-failed" and "find_spec numpy" in error["message"]
    records = read_records(workspace.ledger_path)
    assert [(r.kind, r.details["reason"]) for r in records] == [
        ("rejected-build", "assertion-failed")
    ]


@pytest.mark.parametrize(
    "address", ["unix:///nonexistent/imagekit-test/buildkitd.sock", "tcp://127.0.0.1:9"]
)
def test_a_buildkitd_that_does_not_answer_is_exit_3_naming_it(
    address: str, base_image: BaseImage, registry: RunningRegistry, workspace: Workspace
) -> None:
    code, _, err = build_json(
        "demo", "--base", base_image.reference, "--buildkit", address,
        "--push", f"{registry.host}/imagekit-test/never",
    )  # fmt: skip
    assert code == 3, err[-2000:]
    assert f"the BuildKit daemon at {address} did not answer" in err
    assert not workspace.ledger_path.exists()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--buildkit", "127.0.0.1:1234", "--push", "127.0.0.1:5/x"], "not a BuildKit address"),
        # Once exit 3 "did not answer" (buildctl's words for a malformed address or CA).
        (["--buildkit", "tcp://[::1", "--push", "127.0.0.1:5/x"], "Invalid IPv6 URL"),
        (["--buildkit", "tcp://127.0.0.1:99999", "--push", "127.0.0.1:5/x"], "Port out of range"),
        (["--buildkit", "tcp://127.0.0.1:9", "--buildkit-ca", "/etc/passwd", "--push",
          "127.0.0.1:5/x"], "--buildkit-ca /etc/passwd is not a PEM certificate"),
        (["--buildkit", "unix:///x.sock"], "--buildkit needs --push"),
        (["--buildkit", "unix:///x.sock", "--push", "127.0.0.1:5/x", "--builder", "registry"],
         "--builder registry"),
        (["--cache-ref", "127.0.0.1:5/cache:x"], "--cache-ref is an option of --buildkit"),
    ],
)  # fmt: skip
def test_bad_remote_options_are_exit_2(argv: list[str], words: str, workspace: Workspace) -> None:
    code, _, err = build_json("demo", *argv)
    assert code == 2, err[-2000:]
    assert words in err


def test_a_named_buildx_builder_builds_like_buildkit(
    remote_buildx: Callable[[str], str],
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    created_refs: list[str],
) -> None:
    name = remote_buildx("imagekit-test-remote")
    repo = f"{registry.host}/imagekit-test/buildx-remote"
    code, out, err = build_json(
        "demo", "--base", base_image.reference, "--buildx-builder", name, "--push", repo,
        "--no-cache",  # the module's daemon built the demo before: run and log every step
    )  # fmt: skip
    assert code == 0, err[-3000:]
    doc = json.loads(out)
    created_refs.append(doc["pushed"])
    assert doc["builder"] == "buildx"
    assert _registry_digest(doc["pushed"]) == doc["manifest_digest"]
    log = Path(doc["log"]).read_text()
    assert f'building with "{name}" instance using remote driver' in log
    assert "IMAGEKIT_ASSERTIONS_PASSED" in log and "Successfully installed six-1.16.0" in log
    assert doc["assertions"]["status"] == "passed"
    [record] = read_records(workspace.ledger_path)
    assert record.details["builder"] == "buildx" and record.status == "built"


def test_an_unknown_buildx_builder_is_exit_2(
    buildx_config: Path, registry: RunningRegistry, workspace: Workspace
) -> None:
    code, _, err = build_json(
        "demo", "--buildx-builder", "imagekit-test-no-such-builder",
        "--push", f"{registry.host}/imagekit-test/never",
    )  # fmt: skip
    assert code == 2, err[-2000:]
    assert "--buildx-builder 'imagekit-test-no-such-builder'" in err
    assert not workspace.ledger_path.exists()


def test_a_fresh_daemon_reuses_the_registry_cache_a_first_build_exported(
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    tmp_path: Path,
    created_refs: list[str],
) -> None:
    # A nightly on a fresh runner: each build on a daemon with an empty root of its own.
    cache = f"{registry.host}/imagekit-test/remote-cache:demo"
    repo = f"{registry.host}/imagekit-test/remote-cached"
    seconds: list[float] = []
    logs: list[str] = []
    for n in (1, 2):
        daemon = start_buildkitd(tmp_path / f"bkd{n}", [registry.host])
        try:
            started = time.monotonic()
            code, out, err = build_json(
                "demo", "--base", base_image.reference, "--buildkit", daemon.address,
                "--push", repo, "--cache-ref", cache,
            )  # fmt: skip
            seconds.append(time.monotonic() - started)
        finally:
            daemon.stop()
        assert code == 0, err[-3000:]
        doc = json.loads(out)
        created_refs.append(doc["pushed"])
        logs.append(Path(doc["log"]).read_text())
    cold, warm = logs
    assert "Successfully installed six-1.16.0" in cold and "exporting cache" in cold
    assert "importing cache manifest from " + cache in warm
    # Every step of the warm build came from the registry's cache: pip never ran.
    assert "Successfully installed" not in warm
    steps = re.findall(r"^#(\d+) \[stage-0 [2-7]/7\]", warm, re.MULTILINE)
    assert len(steps) == 6
    assert all(re.search(rf"^#{n} CACHED$", warm, re.MULTILINE) for n in steps)
    print(f"remote build with registry cache: cold {seconds[0]:.1f} s, warm {seconds[1]:.1f} s")


def test_a_remote_build_over_mutual_tls(
    base_image: BaseImage, registry: RunningRegistry, workspace: Workspace, tmp_path: Path
) -> None:
    cert = make_server_certificate(tmp_path / "tls", client_auth=True)
    daemon = start_buildkitd(tmp_path / "bkd", [registry.host], tcp=True, tls=cert)
    write_variant(workspace, "no-checks", {"assertions": {}})
    assert daemon.tcp_address is not None
    repo = f"{registry.host}/imagekit-test/remote-tls"
    try:
        # Without the CA the daemon's certificate is not trusted: could not finish, named.
        code, _, err = build_json(
            "no-checks", "--base", base_image.reference, "--buildkit", daemon.tcp_address,
            "--push", repo,
        )  # fmt: skip
        assert code == 3, err[-2000:]
        assert f"the BuildKit daemon at {daemon.tcp_address} did not answer" in err
        code, out, err = build_json(
            "no-checks", "--base", base_image.reference, "--buildkit", daemon.tcp_address,
            "--buildkit-ca", str(cert.ca_path), "--buildkit-cert", str(cert.chain_path),
            "--buildkit-key", str(cert.key_path), "--push", repo,
        )  # fmt: skip
    finally:
        daemon.stop()
    assert code == 0, err[-3000:]
    doc = json.loads(out)
    assert _registry_digest(doc["pushed"]) == doc["manifest_digest"]
    # The key's path and contents stay out of the log and the ledger.
    assert str(cert.key_path) not in Path(doc["log"]).read_text()
    assert str(cert.key_path) not in workspace.ledger_path.read_text()
