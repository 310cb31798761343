"""Redirects, the scheme rule and what is retried, of the registry transport."""

from __future__ import annotations

import base64
import json
import ssl
from pathlib import Path

import httpx
import pytest

from imagekit.errors import (
    RegistryError,
    RegistryNotFound,
    RegistryProtocolError,
    RetriesExhausted,
)
from imagekit.refs import parse_reference
from imagekit.registry import RegistryClient, RetryPolicy
from imagekit.registry.transport import is_loopback
from tests.unit.registry.fakes import HOST, FakeRegistry, StreamingMock, make_image, sha

REPO = "team/app"
REF = parse_reference(f"{HOST}/{REPO}:v1")


@pytest.mark.parametrize(
    ("host", "loop"),
    [
        ("127.0.0.1:5000", True),
        ("127.8.9.1", True),
        ("localhost:5000", True),
        ("[::1]:5000", True),
        ("::1", True),
        ("10.0.0.1:5000", False),
        ("registry.example.com", False),
        ("localhost.example.com:5000", False),
    ],
)
def test_loopback_detection(host: str, loop: bool) -> None:
    assert is_loopback(host) is loop


def test_https_unless_loopback_and_insecure_falls_back_to_plain_http_as_docker_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--insecure HOST: TLS without verification first; plain HTTP only for a host that
    does not speak TLS (its answer to the handshake is no TLS), and from then on."""
    monkeypatch.delenv("IMAGEKIT_INSECURE_REGISTRIES", raising=False)
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if request.url.host == "plain" and request.url.scheme == "https":
            raise httpx.ConnectError("no TLS here") from ssl.SSLError(1, "WRONG_VERSION_NUMBER")
        return httpx.Response(
            200, json={}, headers={"Docker-Distribution-API-Version": "registry/2.0"}
        )

    insecure = ("myreg:5000", "plain:5000")
    with RegistryClient(insecure=insecure, transport=httpx.MockTransport(handler)) as client:
        client.ping("127.0.0.1:5000")
        client.ping("myreg:5000")
        client.ping("plain:5000")
        client.ping("plain:5000")
        client.ping("other.example:5000")
    assert seen == [
        "http://127.0.0.1:5000/v2/",
        "https://myreg:5000/v2/",
        "https://plain:5000/v2/",
        "http://plain:5000/v2/",
        "http://plain:5000/v2/",
        "https://other.example:5000/v2/",
    ]


@pytest.mark.parametrize("status", [400, 404, 405, 409, 416])
def test_other_4xx_are_not_retried(status: int) -> None:
    fake = FakeRegistry()
    fake.overrides[f"/v2/{REPO}/manifests/v1"] = lambda request: httpx.Response(status)
    with fake.client() as client, pytest.raises(RegistryError) as info:
        client.get_manifest(REF, "v1")
    assert len(fake.requests) == 1
    assert info.value.status == status
    assert not isinstance(info.value, RetriesExhausted)
    if status == 404:
        assert isinstance(info.value, RegistryNotFound)


def test_network_errors_are_retried() -> None:
    image = make_image()
    fake = FakeRegistry()
    fake.add_image(REPO, image, tag="v1")
    failures = iter([httpx.ConnectError("refused"), httpx.ReadTimeout("slow")])

    def handler(request: httpx.Request) -> httpx.Response:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return fake(request)

    policy = RetryPolicy(max_attempts=3, initial_wait=0.001, max_wait=0.001, sleep=lambda _: None)
    with RegistryClient(
        transport=StreamingMock(handler), retry_policy=policy, insecure=(HOST,)
    ) as client:
        assert client.get_manifest(REF, "v1")[0] == image.manifest


def _config_with(tmp_path: Path, host: str, user: str, password: str) -> Path:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {host: {"auth": token}}}))
    return tmp_path


def test_authorization_never_follows_a_redirect_to_another_host(tmp_path: Path) -> None:
    image = make_image()
    seen: dict[str, str | None] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen[f"{request.url.host}{request.url.path}"] = request.headers.get("Authorization")
        if request.url.host == "objects.example.test":
            return httpx.Response(200, content=image.layer)
        if request.headers.get("Authorization") is None:
            return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="r"'})
        # Like S3-backed registries: the blob lives elsewhere, behind a pre-signed URL.
        return httpx.Response(
            307, headers={"Location": "https://objects.example.test/bucket/x?X-Signature=s3cr3t"}
        )

    config = _config_with(tmp_path, HOST, "alice", "pw")
    policy = RetryPolicy(max_attempts=1)
    with RegistryClient(
        insecure=(HOST,),
        docker_config=config,
        transport=StreamingMock(handler),
        retry_policy=policy,
    ) as client:
        from imagekit.refs import Digest
        from imagekit.registry import Descriptor

        desc = Descriptor("application/octet-stream", Digest(sha(image.layer)), len(image.layer))
        assert b"".join(client.stream_blob(REF, desc)) == image.layer
    assert seen[f"{HOST}/v2/{REPO}/blobs/{sha(image.layer)}"] is not None
    assert seen["objects.example.test/bucket/x"] is None


def test_https_registry_may_not_redirect_to_http() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(307, headers={"Location": "http://evil.example.test/x"})

    policy = RetryPolicy(max_attempts=1)
    with RegistryClient(transport=StreamingMock(handler), retry_policy=policy) as client:
        with pytest.raises(RegistryProtocolError, match="redirected to a http URL"):
            client.get_manifest(parse_reference("registry.example.com/a/b:v1"), "v1")


def test_redirect_loops_are_bounded() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"Location": str(request.url)})

    with RegistryClient(transport=StreamingMock(handler), insecure=(HOST,)) as client:
        with pytest.raises(RegistryProtocolError, match="redirects"):
            client.ping(HOST)


def test_presigned_query_never_in_messages() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "objects.example.test":
            return httpx.Response(500)
        return httpx.Response(
            307, headers={"Location": "https://objects.example.test/o?X-Amz-Signature=s3cr3t"}
        )

    policy = RetryPolicy(max_attempts=2, sleep=lambda _: None)
    with RegistryClient(
        insecure=(HOST,), transport=StreamingMock(handler), retry_policy=policy
    ) as client:
        with pytest.raises(RetriesExhausted) as info:
            client.ping(HOST)
    assert "s3cr3t" not in str(info.value) and "s3cr3t" not in json.dumps(info.value.to_json())
