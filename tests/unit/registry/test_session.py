"""The session against protocol faults a real registry will not produce (MockTransport):
statuses turned into our errors, naming what was asked."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from imagekit.errors import (
    RegistryNotFound,
    RegistryProtocolError,
    RegistryUnauthorized,
)
from tests.unit.registry.fakes import (
    HOST,
    REF,
    REPO,
    FakeRegistry,
    sha,
    v1_refused,
)


def test_oversize_error_body_refused() -> None:
    big = b"x" * (2 << 20)
    v1_refused(
        RegistryProtocolError, lambda request: httpx.Response(404, content=big), match="limit"
    )


def test_unauthorized_without_credentials_names_registry_and_login(tmp_path: Path) -> None:
    refused = v1_refused(
        RegistryUnauthorized,
        lambda request: httpx.Response(
            401,
            headers={"WWW-Authenticate": 'Basic realm="x"'},
            json={"errors": [{"code": "UNAUTHORIZED", "message": "authentication required"}]},
        ),
        docker_config=tmp_path,
    )
    assert HOST in refused.message
    assert refused.hint is not None and f"docker login {HOST}" in refused.hint
    assert refused.exit_code == 3


def test_ping_refuses_a_web_server() -> None:
    fake = FakeRegistry()
    fake.overrides["/v2/"] = lambda request: httpx.Response(
        200,
        content=b"<!doctype html><title>Router login</title>",
        headers={"Content-Type": "text/html"},
    )
    with fake.client() as client, pytest.raises(RegistryProtocolError, match="Router login"):
        client.ping(HOST)


def test_not_found_names_the_digest() -> None:
    fake = FakeRegistry()
    digest = sha(b"absent manifest")
    with fake.client() as client, pytest.raises(RegistryNotFound) as info:
        client.get_manifest(REF, digest)
    assert (info.value.registry, info.value.repository, info.value.digest) == (HOST, REPO, digest)
    assert info.value.status == 404


@pytest.mark.parametrize(
    ("code", "missing"), [("MANIFEST_UNKNOWN", "tag or digest"), ("NAME_UNKNOWN", "repository")]
)
def test_a_reference_that_names_nothing_is_bad_input_naming_it_as_given(
    code: str, missing: str
) -> None:
    from imagekit.errors import ReferenceNotFound

    fake = FakeRegistry()
    fake.overrides[f"/v2/{REPO}/manifests/nope"] = lambda request: httpx.Response(
        404, json={"errors": [{"code": code, "message": "unknown"}]}
    )
    with fake.client() as client, pytest.raises(ReferenceNotFound) as info:
        client.get_manifest(REF, "nope")
    error = info.value
    assert error.exit_code == 2 and isinstance(error, RegistryNotFound)  # still a 404 to code
    assert error.message.startswith(f"{HOST}/{REPO}:nope: the reference names nothing here")
    assert code in error.message
    assert f"check the {missing}" in (error.hint or "")
