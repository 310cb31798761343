"""Real credential helpers: Debian's docker-credential-pass (golang-docker-credential-helpers)
over a pass store and a gpg key the tests create, named by ``credHelpers`` and ``credsStore``
in config.json, against the real registries; a secret rotated while a client runs is asked
for again after the registry's token service refuses the old one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from imagekit.errors import RegistryUnauthorized
from imagekit.refs import parse_reference
from imagekit.registry import RegistryClient
from tests.support.oci_layout import Layer, make_tar, push_new_image
from tests.support.registries import MakeRegistry, RunningRegistry

pytestmark = pytest.mark.integration
HELPER = shutil.which("docker-credential-pass") or "/usr/bin/docker-credential-pass"
KEY_ID = "imagekit-test@example.invalid"
Store = Callable[[str, str, str], None]


@pytest.fixture
def pass_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """A gpg key and a pass store of this test's own (GNUPGHOME, PASSWORD_STORE_DIR), and a
    function that stores a credential through the helper itself (``store``)."""
    for tool in (HELPER, "pass", "gpg"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} is missing: run scripts/setup-host.sh", pytrace=False)
    # Short paths: gpg-agent's socket lives in GNUPGHOME and sockets allow ~100 bytes.
    root = Path(tempfile.mkdtemp(prefix="ik-pass-"))
    gnupg, store = root / "g", root / "s"
    gnupg.mkdir(mode=0o700)
    monkeypatch.setenv("GNUPGHOME", str(gnupg))
    monkeypatch.setenv("PASSWORD_STORE_DIR", str(store))
    try:
        subprocess.run(
            ["gpg", "--batch", "--passphrase", "", "--quick-gen-key", KEY_ID, "default",
             "default", "never"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        subprocess.run(["pass", "init", KEY_ID], check=True, capture_output=True, timeout=60)

        def put(server: str, username: str, secret: str) -> None:
            document = {"ServerURL": server, "Username": username, "Secret": secret}
            subprocess.run(
                [HELPER, "store"], input=json.dumps(document).encode(), check=True,
                capture_output=True, timeout=60,
            )  # fmt: skip

        yield put
    finally:
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _push(registry: RunningRegistry, tmp: Path, repo: str, seed: int) -> str:
    creds = f"{registry.username}:{registry.password}"
    layers = [Layer.gzip(make_tar(seed))]
    return push_new_image(tmp / repo, f"{registry.host}/{repo}:1", layers, "--dest-creds", creds)


def test_cred_helpers_pass_with_a_secret_rotated_during_the_run(
    make_registry: MakeRegistry, pass_store: Store, docker_config: Path, tmp_path: Path
) -> None:
    reg = make_registry("token")
    assert reg.token_server is not None and reg.username and reg.password
    first, second = _push(reg, tmp_path, "helper/a", 700), _push(reg, tmp_path, "helper/b", 701)
    pass_store(reg.host, reg.username, reg.password)
    (docker_config / "config.json").write_text(json.dumps({"credHelpers": {reg.host: "pass"}}))
    with RegistryClient(docker_config=docker_config) as client:
        assert len(client.resolve(parse_reference(first)).layers) == 1
        # The registry's secret rotates, and the store with it, while the client runs.
        rotated = "rotated-" + reg.password
        reg.token_server.password = rotated
        pass_store(reg.host, reg.username, rotated)
        assert len(client.resolve(parse_reference(second)).layers) == 1
    logins = reg.token_server.logins
    assert logins[0] == (reg.username, True)
    assert (reg.username, False) in logins  # the old secret, refused once
    assert logins[-1] == (reg.username, True)  # the new one, asked for again and accepted


def test_creds_store_pass_for_a_basic_auth_registry(
    make_registry: MakeRegistry, pass_store: Store, docker_config: Path, tmp_path: Path
) -> None:
    reg = make_registry("basic")
    assert reg.username and reg.password
    ref = _push(reg, tmp_path, "helper/basic", 702)
    (docker_config / "config.json").write_text(json.dumps({"credsStore": "pass"}))
    with RegistryClient(docker_config=docker_config) as client:
        with pytest.raises(RegistryUnauthorized, match="requires authentication"):
            client.resolve(parse_reference(ref))  # nothing stored yet: the helper says so
        pass_store(reg.host, reg.username, reg.password)
    with RegistryClient(docker_config=docker_config) as client:
        assert len(client.resolve(parse_reference(ref)).layers) == 1
