"""A canary password through real flows: it must not appear in any file or output we write.

The registry uses htpasswd with a unique canary password, the credentials sit only in a
temporary DOCKER_CONFIG, and inspect, a verified and a failed final pull and the ledger
commands run against it. Then every file under the workspace (ledger, evidence, lock) and
every byte the commands printed is searched for the password and its base64 forms.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.ledger import read_records
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.conftest import write_docker_auths
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration


def _forms(username: str, password: str) -> list[bytes]:
    forms = {password.encode()}
    for text in (password, f"{username}:{password}"):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(text.encode())
            forms.add(encoded)
            forms.add(encoded.rstrip(b"="))
    return sorted(forms)


def _imagekit(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-c", "from imagekit.cli import main; main()", *args],
        capture_output=True,
        env=os.environ.copy(),
        check=False,
        timeout=300,
    )


def test_canary_password_never_leaves_the_process(
    engine: Engine,
    make_registry: Callable[..., RunningRegistry],
    docker_config: Path,
    workspace: Workspace,
    tmp_path: Path,
) -> None:
    canary = "canary-" + secrets.token_hex(12)
    registry = make_registry("basic", password=canary)
    assert registry.username is not None and registry.password == canary
    write_docker_auths(docker_config, registry)

    repository = f"{registry.host}/imagekit-test/secret-{secrets.token_hex(4)}"
    payload = tmp_path / "payload" / "hello.txt"
    payload.parent.mkdir()
    payload.write_text("secret test\n")
    archive = tmp_path / "payload" / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(payload, arcname="hello.txt")
    docker = engine.client_path
    outputs: list[bytes] = []
    refs = [f"{repository}:v1"]
    try:
        subprocess.run([docker, "import", str(archive), refs[0]], check=True, capture_output=True)
        pushed = subprocess.run([docker, "push", refs[0]], check=True, capture_output=True)
        outputs += [pushed.stdout, pushed.stderr]
        digest = subprocess.run(
            [docker, "image", "inspect", "--format", "{{index .RepoDigests 0}}", refs[0]],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        pinned = f"{repository}@{digest.rpartition('@')[2]}"
        refs.append(pinned)
        subprocess.run([docker, "rmi", refs[0]], check=True, capture_output=True)

        runs = [
            _imagekit("inspect", pinned, "--json"),
            _imagekit("pull", pinned, "--record", "--plan", "secret", "--json"),
            _imagekit(
                "pull", refs[0], "--expect-digest", "sha256:" + "0" * 64, "--record", "--json"
            ),
            _imagekit("ledger", "show", "--json"),
            _imagekit("ledger", "verify", "--json"),
            _imagekit("ledger", "lock", "-o", str(workspace.root / "manifests" / "lock.json")),
        ]
    finally:
        subprocess.run([docker, "rmi", "-f", *refs], capture_output=True, check=False)
    codes = [r.returncode for r in runs]
    assert codes == [0, 0, 1, 0, 0, 0], [r.stderr.decode() for r in runs]
    assert [r.status for r in read_records(workspace.ledger_path)] == ["verified", "mismatch"]
    assert json.loads(runs[1].stdout)["status"] == "verified"
    for run in runs:
        outputs += [run.stdout, run.stderr]

    files = [p for p in workspace.root.rglob("*") if p.is_file()]
    written = [p for p in files if "evidence" in p.parts or p.parent.name == "manifests"]
    assert any(p.name == "ledger.jsonl" for p in written)
    assert any("evidence" in p.parts for p in written)
    forms = _forms(registry.username, canary)
    for path in files:
        data = path.read_bytes()
        for form in forms:
            assert form not in data, f"{path.relative_to(workspace.root)} holds a secret form"
        assert b"Authorization" not in data and b"Basic " not in data
    for index, output in enumerate(outputs):
        for form in forms:
            assert form not in output, f"output #{index} holds a secret form"
