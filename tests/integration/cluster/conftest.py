"""The real single-node Kubernetes (tests/support/cluster.py): one per session, on the
worker that runs the cluster files (they are one unit of work, tests/conftest.py), trusting
the session's loopback registry; stopped and removed at the end."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import Cluster, start_cluster
from tests.support.registries import RunningRegistry


@pytest.fixture(scope="session")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, registry: RunningRegistry
) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("kube")
    try:
        started = start_cluster(root)
    except RuntimeError as exc:
        pytest.fail(f"the test cluster did not start: {exc}", pytrace=False)
    print(f"\ntest cluster up in {started.started_in:.1f} s", file=sys.stderr)
    started.trust_registry(registry.host)
    yield started
    started.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def as_a_user(cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The cluster reached as a user reaches theirs: KUBECONFIG, nothing in HOME."""
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    monkeypatch.setenv("HOME", str(tmp_path))
