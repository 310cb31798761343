"""Registry credentials from the docker config file, the way the Docker CLI finds them.

The file is ``$DOCKER_CONFIG/config.json`` (default ``~/.docker/config.json``). For a registry
the lookup order is the CLI's: ``credHelpers[registry]``, else ``credsStore``, through the
``docker-credential-NAME get`` protocol
(https://github.com/docker/docker-credential-helpers#development); when the helper has
nothing, the ``auths`` entry (base64 ``user:password`` in ``auth``, or ``username`` and
``password``, or an ``identitytoken``). Docker Hub's entry is keyed
``https://index.docker.io/v1/``.

The store is asked once per host and its answer kept until a registry or its token service
refuses it; then it is asked again (imagekit.registry.auth), so a helper whose secrets
expire or rotate (gcloud, ACR, docker-credential-pass after ``pass edit``) keeps a long run
going. tests/integration/registry/test_credential_helpers.py runs Debian's
docker-credential-pass for both ``credHelpers`` and ``credsStore``.

A Credential never shows its secret: not in repr, str, logs or error messages.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagekit import jsondoc
from imagekit.errors import RegistryError
from imagekit.files import read_regular

#: A docker config or a helper's answer holds a few credentials: far under this.
_MAX_CONFIG = 4 << 20
_HELPER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io")
_HELPER_TIMEOUT = 30.0


@dataclass(frozen=True, repr=False)
class Credential:
    """A username and a secret (a password, or an identity/refresh token)."""

    username: str
    secret: str = field(repr=False)
    is_identity_token: bool = False

    def __repr__(self) -> str:
        kind = "identity-token" if self.is_identity_token else "password"
        return f"Credential(username={self.username!r}, {kind}=***)"

    __str__ = __repr__

    def basic_header(self) -> str:
        raw = f"{self.username}:{self.secret}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")


def default_config_dir() -> Path:
    env = os.environ.get("DOCKER_CONFIG")
    return Path(env) if env else Path.home() / ".docker"


def _hostname(key: str) -> str:
    """Docker's convertToHostname: strip a scheme and any path from an auths key."""
    for prefix in ("https://", "http://"):
        if key.startswith(prefix):
            key = key[len(prefix) :]
            break
    return key.split("/", 1)[0]


def _server_keys(registry: str) -> tuple[str, ...]:
    if registry in ("docker.io", "index.docker.io", "registry-1.docker.io"):
        return _HUB_KEYS
    return (registry,)


class CredentialStore:
    """Looks credentials up in one docker config directory (read when first needed)."""

    def __init__(self, config_dir: Path | None = None) -> None:
        self._explicit = config_dir
        self._document: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"CredentialStore(config_dir={self._explicit!r})"

    @property
    def config_path(self) -> Path:
        base = self._explicit if self._explicit is not None else default_config_dir()
        # Accept either the directory (as DOCKER_CONFIG is) or the config.json file itself.
        return base if base.suffix == ".json" else base / "config.json"

    def _load(self, registry: str) -> dict[str, Any]:
        if self._document is not None:
            return self._document
        path = self.config_path
        try:
            text = read_regular(path, "docker config", limit=_MAX_CONFIG)
        except FileNotFoundError:
            self._document = {}
            return self._document
        except OSError as exc:
            raise RegistryError(
                f"cannot read the docker config {path.name}: {exc.strerror}",
                registry=registry,
                hint="check the permissions of $DOCKER_CONFIG/config.json",
            ) from exc
        try:
            document = jsondoc.loads(text, limit=_MAX_CONFIG)
        except jsondoc.JsonRefused as exc:
            raise RegistryError(
                f"the docker config {path} is not valid JSON: {exc}",
                registry=registry,
                hint="fix or remove it, then `docker login` again",
            ) from exc
        self._document = document if isinstance(document, dict) else {}
        return self._document

    def lookup(self, registry: str) -> Credential | None:
        """The credential for ``registry`` (a host[:port] as in a reference), or None."""
        document = self._load(registry)
        keys = _server_keys(registry)
        helpers = document.get("credHelpers")
        helper: str | None = None
        if isinstance(helpers, dict):
            for key in keys:
                if isinstance(helpers.get(key), str):
                    helper = helpers[key]
                    break
        if helper is None and isinstance(document.get("credsStore"), str):
            helper = document["credsStore"]
        if helper:
            found = _from_helper(helper, keys[0], registry)
            if found is not None:
                return found
        auths = document.get("auths")
        if isinstance(auths, dict):
            by_host = {_hostname(k): v for k, v in auths.items() if isinstance(v, dict)}
            for key in keys:
                entry = auths.get(key) if isinstance(auths.get(key), dict) else None
                entry = entry or by_host.get(_hostname(key))
                if entry:
                    found = _from_auths_entry(entry, registry)
                    if found is not None:
                        return found
        return None


def _from_auths_entry(entry: dict[str, Any], registry: str) -> Credential | None:
    token = entry.get("identitytoken")
    auth = entry.get("auth")
    username, password = entry.get("username"), entry.get("password")
    if isinstance(auth, str) and auth:
        try:
            decoded = base64.b64decode(auth, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise RegistryError(
                f"the docker config entry for {registry} has an `auth` value that is not "
                "base64 of user:password",
                registry=registry,
                hint=f"run `docker login {registry}` again",
            ) from exc
        username, sep, password = decoded.partition(":")
        if not sep:
            raise RegistryError(
                f"the docker config entry for {registry} has an `auth` value without ':'",
                registry=registry,
                hint=f"run `docker login {registry}` again",
            )
    if isinstance(token, str) and token:
        return Credential(str(username or "<token>"), token, is_identity_token=True)
    if isinstance(username, str) and isinstance(password, str) and username:
        return Credential(username, password)
    return None


def _from_helper(name: str, server: str, registry: str) -> Credential | None:
    if not _HELPER_NAME.fullmatch(name):
        raise RegistryError(
            f"the docker config names an invalid credential helper {name!r}",
            registry=registry,
        )
    program = f"docker-credential-{name}"
    try:
        done = subprocess.run(  # noqa: S603 - fixed argv, validated helper name, no shell
            [program, "get"],
            input=server.encode(),
            capture_output=True,
            timeout=_HELPER_TIMEOUT,
            check=False,
        )
    except FileNotFoundError as exc:
        raise RegistryError(
            f"the docker config asks for the credential helper {program}, which is not on PATH",
            registry=registry,
            hint=f"install {program} or remove it from $DOCKER_CONFIG/config.json",
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise RegistryError(
            f"the credential helper {program} did not answer within {_HELPER_TIMEOUT:.0f}s",
            registry=registry,
        ) from exc
    if done.returncode != 0:
        # "credentials not found in native keychain" is the protocol's way to say none.
        if b"credentials not found" in done.stdout + done.stderr:
            return None
        raise RegistryError(
            f"the credential helper {program} failed (exit {done.returncode})",
            registry=registry,
            hint=f"try `{program} list`, or `docker login {registry}` again",
        )
    try:
        answer = jsondoc.loads(done.stdout, limit=_MAX_CONFIG)
    except jsondoc.JsonRefused as exc:
        raise RegistryError(
            f"the credential helper {program} answered something that is not JSON: {exc}",
            registry=registry,
        ) from exc
    if not isinstance(answer, dict):
        return None
    username, secret = answer.get("Username"), answer.get("Secret")
    if not isinstance(secret, str) or not secret:
        return None
    if username == "<token>":
        return Credential("<token>", secret, is_identity_token=True)
    return Credential(str(username or ""), secret)
