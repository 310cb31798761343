"""scripts/lib/kube.sh: the wrapper module replaces exactly the staging modules the release's
own go.mod replaces (less the sample modules no command imports), and the one binary setup
built answers as each of its six programs, at the pinned versions.

Scripts have no package, so this sits beside the other tests of the whole. It reads the
release's go.mod through the go command, from the module cache setup filled.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.cluster import binary

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
KUBE_SH = REPO / "scripts" / "lib" / "kube.sh"


def _bash(script: str) -> str:
    path = os.environ["PATH"]
    if Path("/usr/local/go/bin/go").is_file():
        path = f"/usr/local/go/bin:{path}"
    done = subprocess.run(
        ["bash", "-c", f"source {KUBE_SH}\n{script}"],
        capture_output=True, text=True, timeout=300, check=False, env={**os.environ, "PATH": path},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_wrapper_replaces_every_staging_module_the_release_replaces() -> None:
    version, listed = _bash('echo "$KUBE_VERSION"; echo "${KUBE_STAGING[*]}"').splitlines()
    found = json.loads(_bash(f"go mod download -json k8s.io/kubernetes@{version}"))
    gomod = json.loads(_bash(f"go mod edit -json {found['GoMod']}"))
    replaced = {
        entry["Old"]["Path"].removeprefix("k8s.io/")
        for entry in gomod["Replace"]
        if entry["New"]["Path"].startswith("./staging/")
    }
    samples = {name for name in replaced if name.startswith("sample-")}
    assert samples == {"sample-apiserver", "sample-cli-plugin", "sample-controller"}
    assert set(listed.split()) == replaced - samples


@pytest.mark.parametrize(
    ("program", "args", "says"),
    [
        ("etcd", ["--version"], "etcd Version: 3.6.5"),
        ("kube-apiserver", ["--version"], "Kubernetes v1.34.4"),
        ("kube-controller-manager", ["--version"], "Kubernetes v1.34.4"),
        ("kube-scheduler", ["--version"], "Kubernetes v1.34.4"),
        ("kubelet", ["--version"], "Kubernetes v1.34.4"),
        ("kubectl", ["version", "--client"], "Client Version: v1.34.4"),
    ],
)
def test_one_binary_answers_as_each_program(program: str, args: list[str], says: str) -> None:
    done = subprocess.run(
        [binary(program), *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert says in done.stdout
    assert Path(binary(program)).resolve() == Path(binary("kube")).resolve()
