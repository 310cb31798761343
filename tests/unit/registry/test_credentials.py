"""Docker config lookups: auths, credHelpers, credsStore (real helper programs), DOCKER_CONFIG."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from imagekit.errors import RegistryError
from imagekit.registry.credentials import Credential, CredentialStore


def _write(config_dir: Path, document: dict[str, object]) -> Path:
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config.json").write_text(json.dumps(document))
    return config_dir


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _helper(bin_dir: Path, name: str, answers: dict[str, tuple[str, str]]) -> None:
    """A real docker-credential-NAME executable speaking the helper protocol."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / f"docker-credential-{name}"
    table = json.dumps(
        {k: {"ServerURL": k, "Username": u, "Secret": p} for k, (u, p) in answers.items()}
    )
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"table = json.loads({table!r})\n"
        "assert sys.argv[1] == 'get'\n"
        "server = sys.stdin.read().strip()\n"
        "if server not in table:\n"
        "    print('credentials not found in native keychain'); sys.exit(1)\n"
        "print(json.dumps(table[server]))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_auths_base64_and_plain_fields(tmp_path: Path) -> None:
    store = CredentialStore(
        _write(
            tmp_path,
            {
                "auths": {
                    "reg.example:5000": {"auth": _b64("alice:pa:ss")},
                    "https://other.example/v1/": {"username": "bob", "password": "pw"},
                    "hub": {},
                }
            },
        )
    )
    alice = store.lookup("reg.example:5000")
    assert alice == Credential("alice", "pa:ss")
    assert store.lookup("other.example") == Credential("bob", "pw")
    assert store.lookup("absent.example") is None


def test_docker_hub_key(tmp_path: Path) -> None:
    store = CredentialStore(
        _write(tmp_path, {"auths": {"https://index.docker.io/v1/": {"auth": _b64("u:p")}}})
    )
    assert store.lookup("docker.io") == Credential("u", "p")


def test_identity_token(tmp_path: Path) -> None:
    store = CredentialStore(
        _write(tmp_path, {"auths": {"r.example": {"identitytoken": "refresh-xyz"}}})
    )
    cred = store.lookup("r.example")
    assert cred is not None and cred.is_identity_token and cred.secret == "refresh-xyz"
    assert "refresh-xyz" not in repr(cred) and "refresh-xyz" not in str(cred)


def test_bad_auth_value_is_an_error_without_the_secret(tmp_path: Path) -> None:
    store = CredentialStore(_write(tmp_path, {"auths": {"r.example": {"auth": "not base64 !!"}}}))
    with pytest.raises(RegistryError) as info:
        store.lookup("r.example")
    assert "not base64 !!" not in str(info.value)


def test_docker_config_env_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "cfg", {"auths": {"r.example": {"auth": _b64("env:pw")}}})
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "cfg"))
    assert CredentialStore().lookup("r.example") == Credential("env", "pw")


def test_missing_config_means_anonymous(tmp_path: Path) -> None:
    assert CredentialStore(tmp_path / "nowhere").lookup("r.example") is None


def test_cred_helpers_and_creds_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    _helper(bin_dir, "imagekitpass", {"helped.example": ("helper-user", "helper-pw")})
    _helper(
        bin_dir,
        "imagekitstore",
        {
            "stored.example": ("store-user", "store-pw"),
            "https://index.docker.io/v1/": ("<token>", "hub-refresh"),
        },
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    store = CredentialStore(
        _write(
            tmp_path / "cfg",
            {
                "credHelpers": {"helped.example": "imagekitpass"},
                "credsStore": "imagekitstore",
                "auths": {"fallback.example": {"auth": _b64("file:pw")}},
            },
        )
    )
    assert store.lookup("helped.example") == Credential("helper-user", "helper-pw")
    assert store.lookup("stored.example") == Credential("store-user", "store-pw")
    hub = store.lookup("docker.io")
    assert hub is not None and hub.is_identity_token and hub.secret == "hub-refresh"
    # The helper has nothing: the auths entry is used.
    assert store.lookup("fallback.example") == Credential("file", "pw")
    assert store.lookup("nothing.example") is None


def test_missing_helper_is_a_clear_error(tmp_path: Path) -> None:
    store = CredentialStore(_write(tmp_path, {"credsStore": "imagekit-no-such-helper"}))
    with pytest.raises(RegistryError, match="docker-credential-imagekit-no-such-helper"):
        store.lookup("r.example")


def test_helper_name_cannot_be_a_path(tmp_path: Path) -> None:
    store = CredentialStore(_write(tmp_path, {"credsStore": "../../bin/sh"}))
    with pytest.raises(RegistryError, match="invalid credential helper"):
        store.lookup("r.example")
