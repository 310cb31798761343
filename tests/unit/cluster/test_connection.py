"""imagekit.cluster.connection: the cluster found as kubectl finds it (no API server needed:
a client is made, not used)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagekit.cluster import connection
from imagekit.cluster.connection import ClusterTarget, connect
from imagekit.errors import UsageError
from tests.support.tls import make_server_certificate


def _kubeconfig(path: Path, name: str, server: str, namespace: str | None = None) -> Path:
    context: dict[str, str] = {"cluster": name, "user": name}
    if namespace:
        context["namespace"] = namespace
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": name, "cluster": {"server": server}}],
                "users": [{"name": name, "user": {"token": "t"}}],
                "contexts": [{"name": name, "context": context}],
                "current-context": name,
            }
        )
    )
    return path


@pytest.fixture(autouse=True)
def nothing_configured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(connection, "SERVICE_ACCOUNT", tmp_path / "no-account")


def test_nothing_configured_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no cluster is configured"):
        connect(ClusterTarget())


def test_kubeconfig_files_merge_as_kubectl_merges_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    first = _kubeconfig(tmp_path / "a", "one", "https://127.0.0.1:1", namespace="team")
    second = _kubeconfig(tmp_path / "b", "two", "https://127.0.0.1:2")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{first}:{second}")
    found = connect(ClusterTarget())
    assert (found.server, found.context, found.namespace) == ("https://127.0.0.1:1", "one", "team")
    other = connect(ClusterTarget(context="two", namespace="ns"))
    assert (other.server, other.namespace) == ("https://127.0.0.1:2", "ns")
    assert connect(ClusterTarget(context="two")).namespace == "default"
    with pytest.raises(UsageError, match="nope"):
        connect(ClusterTarget(context="nope"))


def test_the_flag_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "a", "env", "https://127.0.0.1:1")))
    flag = _kubeconfig(tmp_path / "b", "flag", "https://127.0.0.1:2")
    assert connect(ClusterTarget(kubeconfig=flag)).server == "https://127.0.0.1:2"
    with pytest.raises(UsageError, match="does not exist"):
        connect(ClusterTarget(kubeconfig=tmp_path / "missing"))


def test_the_default_file_then_the_service_account(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    account = tmp_path / "account"
    account.mkdir()
    (account / "token").write_text("token")
    (account / "namespace").write_text("jobs")
    (account / "ca.crt").write_bytes(make_server_certificate(tmp_path / "tls").ca_path.read_bytes())
    monkeypatch.setattr(connection, "SERVICE_ACCOUNT", account)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    inside = connect(ClusterTarget())
    assert (inside.source, inside.context, inside.namespace) == (
        "in-cluster service account", None, "jobs",
    )  # fmt: skip
    assert inside.server == "https://127.0.0.1:443"
    with pytest.raises(UsageError, match="--context needs a kubeconfig"):
        connect(ClusterTarget(context="x"))
    home = tmp_path / "home" / ".kube"
    home.mkdir(parents=True)
    _kubeconfig(home / "config", "home", "https://127.0.0.1:3")
    assert connect(ClusterTarget()).server == "https://127.0.0.1:3"  # the file comes first


def test_relative_paths_are_read_from_their_own_file(tmp_path: Path) -> None:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    path = _kubeconfig(folder / "config", "c", "https://127.0.0.1:1")
    document = json.loads(path.read_text())
    document["clusters"][0]["cluster"]["certificate-authority"] = "ca.pem"
    merged = connection._merged([path])  # noqa: SLF001 - the merge itself
    assert merged["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:1"
    absolute = connection._absolute(document, folder)  # noqa: SLF001
    assert absolute["clusters"][0]["cluster"]["certificate-authority"] == str(folder / "ca.pem")
