"""Session fixtures: the real engine, real registries, the base image, a private containerd.

Nothing here is a fake. When the engine does not answer, every test that needs it FAILS with
the command that starts it: a missing engine in CI must never pass as a skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from imagekit.errors import EngineUnavailable
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage, push_base
from tests.support.containerd import CONTAINERD_BINARY, RunningContainerd, start_containerd
from tests.support.registries import RunningRegistry, start_registry

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def engine() -> Engine:
    from imagekit.runtime.engine import connect

    try:
        return connect()
    except EngineUnavailable as exc:
        pytest.fail(
            "the Docker engine does not answer, and the integration tests need the real one: "
            f"{exc.message}\nstart it with `make test` (it runs scripts/setup-host.sh) or as "
            "root: `dockerd --bridge=none --iptables=false --ip-masq=false &`",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def make_registry(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., RunningRegistry]]:
    """Start extra real registries: make_registry(auth="none"|"basic"|"token")."""
    started: list[RunningRegistry] = []

    def make(auth: str = "none", **kwargs: object) -> RunningRegistry:
        workdir = tmp_path_factory.mktemp(f"registry-{auth}")
        registry = start_registry(workdir, auth, **kwargs)  # type: ignore[arg-type]
        started.append(registry)
        return registry

    yield make
    for registry in started:
        registry.stop()
        shutil.rmtree(registry.storage, ignore_errors=True)


@pytest.fixture(scope="session")
def registry(make_registry: Callable[..., RunningRegistry]) -> RunningRegistry:
    return make_registry("none")


@pytest.fixture(scope="session")
def basic_registry(make_registry: Callable[..., RunningRegistry]) -> RunningRegistry:
    return make_registry("basic")


@pytest.fixture(scope="session")
def token_registry(make_registry: Callable[..., RunningRegistry]) -> RunningRegistry:
    return make_registry("token")


@pytest.fixture(scope="session")
def base_image(engine: Engine, registry: RunningRegistry) -> Iterator[BaseImage]:
    """The Debian bookworm base, pushed to the anonymous registry, pinned by digest."""
    base = push_base(engine.client_path, registry.host)
    yield base
    # The push left a repo digest for this session's registry port in the engine: untag it
    # (the image itself stays, under its local tag, for the next session to reuse).
    subprocess.run([engine.client_path, "rmi", base.reference], check=False, capture_output=True)


@pytest.fixture(scope="session")
def containerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningContainerd]:
    """A private containerd with its CRI plugin on (never the engine's), stopped at the end."""
    if not os.path.exists(CONTAINERD_BINARY):
        pytest.fail(
            f"{CONTAINERD_BINARY} is missing; it comes with docker.io: run scripts/setup-host.sh",
            pytrace=False,
        )
    instance = start_containerd(tmp_path_factory.mktemp("containerd"))
    yield instance
    instance.stop()
    shutil.rmtree(instance.root, ignore_errors=True)


@pytest.fixture
def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private DOCKER_CONFIG so no test reads or writes the user's ~/.docker."""
    path = tmp_path / "docker-config"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"auths": {}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(path))
    return path


def write_docker_auths(config_dir: Path, *registries: RunningRegistry) -> None:
    """Put the registries' credentials into a DOCKER_CONFIG's config.json `auths`."""
    auths: dict[str, object] = {}
    for reg in registries:
        auths.update(reg.docker_auth_entry())
    (config_dir / "config.json").write_text(json.dumps({"auths": auths}))


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """A project folder under tmp_path with copies of the repo's plans and build contexts.

    The IMAGEKIT_* variables point every stage (and the CLI) there, so tests never write
    evidence, renders or ledger records into the checkout.
    """
    root = tmp_path / "project"
    (root / "manifests").mkdir(parents=True)
    for plan in (REPO_ROOT / "manifests").glob("*.yaml"):
        shutil.copy2(plan, root / "manifests" / plan.name)
    if (REPO_ROOT / "dockerfiles").is_dir():
        shutil.copytree(REPO_ROOT / "dockerfiles", root / "dockerfiles")
    else:
        (root / "dockerfiles").mkdir()
    (root / "evidence").mkdir()
    for var in ("IMAGEKIT_PLANS_DIR", "IMAGEKIT_DOCKERFILES_DIR", "IMAGEKIT_EVIDENCE_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("IMAGEKIT_ROOT", str(root))
    monkeypatch.setenv("IMAGEKIT_LEDGER", str(root / "manifests" / "ledger.jsonl"))
    return Workspace.from_env(root)


# `make test` runs the suite on two workers (pytest-xdist): each test file is one unit of
# work, kept whole on one worker with its module fixtures. Files that look at state the engine
# shares between workers go in one unit together: the nightly files count the engine's
# `imagekit/demo:nightly-*` candidates, and the seed files pull the replicas (11 GB) into the
# engine from one read-only registry and remove them at the end; the cluster files share one
# Kubernetes.
SHARED_UNITS = {
    "tests/integration/flows/test_nightly.py": "nightly-candidates",
    "tests/integration/flows/test_nightly_watch.py": "nightly-candidates",
    "tests/integration/flows/test_nightly_remote.py": "nightly-candidates",
    "tests/integration/test_seeds.py": "seed-replicas",
    "tests/integration/test_audit_osv.py": "seed-replicas",
    "tests/integration/gpu/test_gpu_preflight.py": "seed-replicas",
}
# One Kubernetes per session (tests/integration/cluster/conftest.py), on one worker: every
# file under this folder is one unit, a file added there included, so no second kubelet is
# started beside the first (two would share the device-plugin folder under /var/lib/kubelet).
SHARED_FOLDERS = {"tests/integration/cluster/": "cluster"}
# The longest units start first (seconds of setup, call and teardown in a warm CI run on two
# workers, its junit report, 2026-12-07 evening), so no worker is left alone at the end with
# one of them; the rest keep the collection order.
LONGEST_FIRST = (
    "seed-replicas",  # 271 s
    "nightly-candidates",  # 220 s
    "cluster",  # 183 s: the walkthrough, the admission judges and --all-nodes included
    "tests/integration/builders/test_platforms.py",  # 174 s
    "tests/integration/flows/test_pipeline.py",  # 72 s
    "tests/integration/builders/test_remote.py",  # 72 s
    "tests/integration/test_audit.py",  # 61 s
    "tests/integration/test_mirror.py",  # 44 s
    "tests/integration/test_demo_script.py",  # 36 s
)


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or the shared unit its file is in."""
    path = nodeid.partition("::")[0]
    for folder, unit in SHARED_FOLDERS.items():
        if path.startswith(folder):
            return unit
    return SHARED_UNITS.get(path, path)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist: the longest units first (a plain run keeps the collection order)."""
    if not hasattr(config, "workerinput"):
        return
    rank = {unit: position for position, unit in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(unit_of(item.nodeid), len(rank)))  # files stay whole


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` with the shared units above: xdist's own scheduling by file, told
    which files go together. (Its `loadgroup` marks cannot do this under pytest 9.2: they
    work by renaming a test's node ID, which pytest 9.2 no longer lets a plugin do.)"""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return UnitScheduling(config, log)


def pytest_report_header(config: pytest.Config) -> str:
    return f"imagekit tests: DOCKER_HOST={os.environ.get('DOCKER_HOST', '(default socket)')}"
