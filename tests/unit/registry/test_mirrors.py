"""Where Docker Hub mirrors are found: flags, environment, daemon.json, hosts.toml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagekit.registry.mirrors import hub_mirrors, use_mirrors


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("IMAGEKIT_REGISTRY_MIRRORS", raising=False)
    monkeypatch.setenv("IMAGEKIT_DOCKER_DAEMON_JSON", str(tmp_path / "daemon.json"))
    monkeypatch.setenv("IMAGEKIT_CONTAINERD_CERTS_D", str(tmp_path / "certs.d"))
    return tmp_path


def _hub_hosts(files: Path, toml: str) -> Path:
    """containerd's hosts.toml for docker.io under FILES' certs.d; the folder holding it."""
    folder = files / "certs.d" / "docker.io"
    folder.mkdir(parents=True)
    (folder / "hosts.toml").write_text(toml)
    return folder


def test_no_mirror_anywhere_is_none(files: Path) -> None:
    assert hub_mirrors() == ()


def test_every_source_in_order_without_duplicates_or_hub_itself(
    files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (files / "daemon.json").write_text(
        json.dumps({"registry-mirrors": ["https://engine.example/", "https://flag.example"]})
    )
    _hub_hosts(
        files,
        'server = "https://registry-1.docker.io"\n'
        '[host."https://containerd.example"]\n  capabilities = ["pull", "resolve"]\n'
        '[host."https://push-only.example"]\n  capabilities = ["push"]\n'
        '[host."http://10.0.0.5:5000"]\n',
    )
    monkeypatch.setenv("IMAGEKIT_REGISTRY_MIRRORS", "env.example, https://registry-1.docker.io")
    with use_mirrors(["http://cli.example:5000"]):
        found = [str(m.origin) for m in hub_mirrors(["https://flag.example"])]
    assert found == [
        "https://flag.example/",
        "http://cli.example:5000/",
        "https://env.example/",
        "https://engine.example/",
        "https://containerd.example/",
        "http://10.0.0.5:5000/",
    ]
    # The command's own mirrors end with the command.
    assert "http://cli.example:5000/" not in [str(m.origin) for m in hub_mirrors()]


def test_broken_files_are_no_mirrors(files: Path) -> None:
    (files / "daemon.json").write_text("{not json")
    _hub_hosts(files, "[host.\n")
    assert hub_mirrors() == ()


def test_hosts_toml_paths_and_tls_files_as_containerd_reads_them(files: Path) -> None:
    folder = _hub_hosts(
        files,
        '[host."https://plain.example"]\n'
        '[host."https://prefixed.example/cache"]\n  ca = "/abs/ca.pem"\n'
        '[host."https://harbor.example/v2/hub"]\n  override_path = true\n'
        '  ca = ["a.pem", "b.pem"]\n  client = [["c.cert", "c.key"], "both.pem"]\n'
        '[host."https://single.example"]\n  client = "one.pem"\n'
        '[host."https://broken.example"]\n  client = [["a", "b", "c"]]\n',
    )
    found = {m.host: m for m in hub_mirrors()}
    assert "broken.example" not in found  # containerd refuses a pair of three
    path = "/v2/library/x/manifests/1"
    assert str(found["plain.example"].url(path)) == "https://plain.example/v2/library/x/manifests/1"
    assert str(found["prefixed.example"].url(path)) == (
        "https://prefixed.example/cache/v2/library/x/manifests/1"
    )
    harbor = found["harbor.example"]
    assert str(harbor.url(path)) == "https://harbor.example/v2/hub/library/x/manifests/1"
    assert found["prefixed.example"].cas == (Path("/abs/ca.pem"),)
    assert harbor.cas == (folder / "a.pem", folder / "b.pem")
    assert harbor.clients == ((folder / "c.cert", folder / "c.key"), (folder / "both.pem", None))
    assert found["single.example"].clients == ((folder / "one.pem", None),)


def test_hosts_toml_skip_verify_and_headers_as_containerd_reads_them(files: Path) -> None:
    _hub_hosts(
        files,
        '[host."https://unverified.example"]\n  skip_verify = true\n'
        '  dial_timeout = "5s"\n'
        '[host."https://headers.example"]\n'
        '  [host."https://headers.example".header]\n'
        '    x-mirror-token = "t0ken-not-shown"\n    x-team = ["infer", "serving"]\n'
        '[host."https://bad-skip.example"]\n  skip_verify = "yes"\n'
        '[host."https://bad-header.example"]\n  header = ["x-a"]\n'
        '[host."https://bad-value.example"]\n'
        '  [host."https://bad-value.example".header]\n    x-a = 1\n',
    )
    found = {m.host: m for m in hub_mirrors()}
    # containerd refuses these files; here only the malformed hosts are left out
    assert sorted(found) == ["headers.example", "unverified.example"]
    assert found["unverified.example"].skip_verify is True
    assert found["unverified.example"].headers == ()
    headers = found["headers.example"]
    assert headers.skip_verify is False
    assert headers.headers == (
        ("x-mirror-token", "t0ken-not-shown"),
        ("x-team", "infer"),
        ("x-team", "serving"),
    )
    assert "t0ken" not in repr(headers)
