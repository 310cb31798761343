"""Fixtures integration tests share: the engine references a test made (removed afterwards),
a tiny image for the final-pull tests, a buildkitd of a module's own (the remote builds, the
several platforms and the nightly on a shared builder) and a buildx builder on it, and the
seed replicas (tests/support/replicas.py) for the
seed and OSV tests."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from imagekit.runtime.engine import Engine, buildx_client
from tests.support import replicas
from tests.support import tiny_image as tiny
from tests.support.buildkitd import RunningBuildkitd, start_buildkitd
from tests.support.engine_refs import removing
from tests.support.registries import RunningRegistry


@pytest.fixture
def created_refs(engine: Engine) -> Iterator[list[str]]:
    """References a test built, tagged or pulled into the engine; removed by name afterwards
    (never by ID: shared layers and the base image stay)."""
    with removing(engine) as refs:
        yield refs


@pytest.fixture
def tiny_image(
    engine: Engine, registry: RunningRegistry, tmp_path: Path
) -> Iterator[tiny.TinyImage]:
    """A one-file image in the loopback registry and not in the engine."""
    with tiny.tiny_image(engine, registry, tmp_path) as image:
        yield image


@pytest.fixture(scope="module")
def buildkitd(
    registry: RunningRegistry, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningBuildkitd]:
    """A real buildkitd for the module (runc worker, its own root, a unix socket and a TCP
    listener on 127.0.0.1) that trusts the session's loopback registry over plain HTTP."""
    daemon = start_buildkitd(tmp_path_factory.mktemp("bkd"), [registry.host], tcp=True)
    yield daemon
    daemon.stop()


@pytest.fixture
def buildx_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """buildx's state (its builders) in a folder of the test's, never the user's."""
    folder = tmp_path / "buildx"
    monkeypatch.setenv("BUILDX_CONFIG", str(folder))
    return folder


@pytest.fixture
def remote_buildx(buildkitd: RunningBuildkitd, buildx_config: Path) -> Callable[[str], str]:
    """``remote_buildx(NAME)``: a buildx remote-driver builder NAME on the module's
    buildkitd, as a team's farm would be (in the test's buildx state); its name."""

    def create(name: str) -> str:
        subprocess.run(
            [buildx_client(), "buildx", "create", "--name", name, "--driver", "remote",
             buildkitd.address],
            capture_output=True, check=True,
        )  # fmt: skip
        return name

    return create


@pytest.fixture(scope="session")
def seed_replica(
    engine: Engine, make_registry: Callable[..., RunningRegistry]
) -> Iterator[Callable[[str], replicas.PublishedReplica]]:
    """``seed_replica(NAME)``: the replica in this session's registry B (where the replica
    bases stand in for the upstream registries), pinned by digest.

    B is a real registry serving, read-only, the replicas' cached registry storage
    (replicas.registry_store): the first session on a machine builds every seed replica not
    cached yet, side by side (one wait of a few minutes instead of three in a row), and pushes
    them into it; later sessions push nothing. What the engine pulled of them is removed at
    the end (the cached layouts and store stay).
    """
    bases: list[RunningRegistry] = []
    served: dict[str, replicas.PublishedReplica] = {}

    def get(name: str) -> replicas.PublishedReplica:
        if not bases:
            bases.append(make_registry("none", storage_of=replicas.registry_store(), readonly=True))
        if name not in served:
            served[name] = replicas.published(name, bases[0].host)
        return served[name]

    yield get
    for published in served.values():
        subprocess.run(
            [engine.client_path, "rmi", published.reference], check=False, capture_output=True
        )
