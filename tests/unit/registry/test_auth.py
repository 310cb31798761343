"""The WWW-Authenticate parser (fuzzed) and the bearer token flow's protocol edges."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagekit.errors import RegistryProtocolError, RegistryUnauthorized
from imagekit.refs import parse_reference
from imagekit.registry import RegistryClient, RetryPolicy
from imagekit.registry.auth import Challenge, parse_www_authenticate
from tests.unit.registry.fakes import HOST, FakeRegistry, Image, StreamingMock, make_image

REPO = "team/app"
REF = parse_reference(f"{HOST}/{REPO}:v1")
REALM = "https://auth.example.test/token"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (
            'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
            'scope="repository:library/ubuntu:pull"',
            [
                Challenge(
                    "bearer",
                    {
                        "realm": "https://auth.docker.io/token",
                        "service": "registry.docker.io",
                        "scope": "repository:library/ubuntu:pull",
                    },
                )
            ],
        ),
        ('Basic realm="Registry Realm"', [Challenge("basic", {"realm": "Registry Realm"})]),
        ("basic realm=x", [Challenge("basic", {"realm": "x"})]),
        (
            'Basic realm="a", Bearer realm="https://t/x",scope="repository:a/b:pull,push"',
            [
                Challenge("basic", {"realm": "a"}),
                Challenge("bearer", {"realm": "https://t/x", "scope": "repository:a/b:pull,push"}),
            ],
        ),
        ('Bearer realm="a\\"b"', [Challenge("bearer", {"realm": 'a"b'})]),
        (
            "Negotiate YWJj==, Basic realm=r",
            [Challenge("negotiate", {"": "YWJj=="}), Challenge("basic", {"realm": "r"})],
        ),
        ('Bearer  realm = "x" , service=y', [Challenge("bearer", {"realm": "x", "service": "y"})]),
        ("Basic", [Challenge("basic", {})]),
    ],
)
def test_parses_real_world_challenges(header: str, expected: list[Challenge]) -> None:
    assert list(parse_www_authenticate(header)) == expected


@pytest.mark.parametrize(
    "header",
    [
        "",
        "   ",
        '"Bearer"',
        'Bearer realm="unterminated',
        'Bearer realm="a",realm="b"',
        "Bearer realm=a b=c",
        "=x",
        'Bearer realm="x\\',
        "x" * 10000,
    ],
)
def test_refuses_malformed_challenges(header: str) -> None:
    with pytest.raises(RegistryProtocolError):
        parse_www_authenticate(header, registry="r.example")


_header_text = st.one_of(
    st.text(max_size=200),
    st.lists(
        st.sampled_from(
            [
                "Bearer",
                "Basic",
                " ",
                ",",
                "=",
                '"',
                "\\",
                "realm",
                "scope",
                '"https://a/b"',
                "x",
                "token68==",
                "\t",
                "é",
                "\x00",
            ]
        ),
        max_size=30,
    ).map("".join),
)


@settings(max_examples=1000, deadline=None)
@given(_header_text)
def test_fuzzed_headers_only_parse_or_raise_our_error(header: str) -> None:
    try:
        challenges = parse_www_authenticate(header, registry="r.example")
    except RegistryProtocolError:
        return
    assert challenges
    for challenge in challenges:
        assert challenge.scheme == challenge.scheme.lower()
        assert all(isinstance(v, str) for v in challenge.params.values())


@settings(max_examples=300, deadline=None)
@given(
    realm=st.text(st.characters(codec="ascii", exclude_characters='"\\\r\n'), max_size=40),
    scope=st.text(st.characters(codec="ascii", exclude_characters='"\\\r\n'), max_size=40),
)
def test_quoted_values_round_trip(realm: str, scope: str) -> None:
    header = f'Bearer realm="{realm}",scope="{scope}"'
    (challenge,) = parse_www_authenticate(header)
    assert challenge.params == {"realm": realm, "scope": scope}


class TokenFake(FakeRegistry):
    """A registry behind bearer tokens whose token service we control."""

    def __init__(self, *, token_body: bytes | None = None) -> None:
        super().__init__()
        self.token_requests: list[httpx.Request] = []
        self.token_body = token_body
        self.refuse_all = False
        self.issued = 0
        self.valid: set[str] = set()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == "auth.example.test":
            self.token_requests.append(request)
            if self.token_body is not None:
                return httpx.Response(200, content=self.token_body)
            self.issued += 1
            token = f"tok{self.issued}.{request.url.params.get('scope', '')}"
            if not self.refuse_all:
                self.valid.add(token)
            return httpx.Response(200, json={"token": token, "expires_in": 300})
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer ") or header[7:] not in self.valid:
            scope = f"repository:{REPO}:pull"
            return httpx.Response(
                401,
                headers={
                    "WWW-Authenticate": f'Bearer realm="{REALM}",service="reg",scope="{scope}"'
                },
            )
        return super().__call__(request)


def _client(fake: FakeRegistry, config: Path | None = None) -> RegistryClient:
    policy = RetryPolicy(max_attempts=2, sleep=lambda _: None)
    return RegistryClient(
        insecure=(HOST,), transport=StreamingMock(fake), retry_policy=policy, docker_config=config
    )


def _token_registry() -> tuple[TokenFake, Image]:
    """A registry behind token auth, with one image tagged v1."""
    image = make_image()
    fake = TokenFake()
    fake.add_image(REPO, image, tag="v1")
    return fake, image


def _config(tmp_path: Path, user: str = "alice", password: str = "s3cret-pw") -> Path:  # noqa: S107
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {HOST: {"auth": auth}}}))
    return tmp_path


def test_token_scope_is_per_repository_and_cached(tmp_path: Path) -> None:
    fake, image = _token_registry()
    with _client(fake, _config(tmp_path)) as client:
        client.resolve(REF)
        client.resolve(REF)
        client.request(
            "HEAD",
            REF,
            f"blobs/{image.manifest_digest}",
            allow_status=(404,),
            scope_actions=("pull", "push"),
        )
    scopes = [r.url.params.get_list("scope") for r in fake.token_requests]
    assert scopes == [[f"repository:{REPO}:pull"], [f"repository:{REPO}:pull,push"]]
    assert fake.token_requests[0].headers["Authorization"].startswith("Basic ")
    assert fake.token_requests[0].url.params["service"] == "reg"


def test_expired_token_is_renewed_once_on_401(tmp_path: Path) -> None:
    fake, _ = _token_registry()
    with _client(fake, _config(tmp_path)) as client:
        client.get_manifest(REF, "v1")
        assert fake.issued == 1
        fake.valid.clear()  # the cached token expires on the server's side
        client.get_manifest(REF, "v1")  # refused once, renewed, served
        assert fake.issued == 2
        fake.refuse_all = True  # now even fresh tokens are refused
        fake.valid.clear()
        with pytest.raises(RegistryUnauthorized) as info:
            client.get_manifest(REF, "v1")
    assert fake.issued == 3  # renewed once, not in a loop
    assert "s3cret-pw" not in str(info.value) and "tok" not in info.value.message
    assert info.value.hint is not None and f"docker login {HOST}" in info.value.hint


def test_anonymous_token_flow_sends_no_basic_auth(tmp_path: Path) -> None:
    fake, _ = _token_registry()
    with _client(fake, tmp_path) as client:
        client.get_manifest(REF, "v1")
    assert "Authorization" not in fake.token_requests[0].headers


def test_oversize_token_answer_refused(tmp_path: Path) -> None:
    fake = TokenFake(token_body=b'{"token":"' + b"a" * (1 << 20) + b'"}')
    with _client(fake, tmp_path) as client, pytest.raises(RegistryProtocolError, match="limit"):
        client.get_manifest(REF, "v1")


def test_token_answer_that_is_not_json(tmp_path: Path) -> None:
    fake = TokenFake(token_body=b"<html>login</html>")
    with _client(fake, tmp_path) as client, pytest.raises(RegistryProtocolError, match="login"):
        client.get_manifest(REF, "v1")


def test_credentials_not_sent_to_plain_http_realm_elsewhere(tmp_path: Path) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            401, headers={"WWW-Authenticate": 'Bearer realm="http://auth.example.test/t"'}
        )

    with _client(handler, _config(tmp_path)) as client:  # type: ignore[arg-type]
        with pytest.raises(RegistryProtocolError, match="plain http"):
            client.get_manifest(REF, "v1")


def test_reprs_hide_secrets(tmp_path: Path) -> None:
    fake, _ = _token_registry()
    with _client(fake, _config(tmp_path)) as client:
        client.get_manifest(REF, "v1")
        text = repr(client) + repr(client._auth) + repr(client._auth._tokens)  # noqa: SLF001
        text += repr(client._auth.credential(HOST))  # noqa: SLF001
    assert "s3cret-pw" not in text
    assert "tok1" not in text


def test_identity_token_uses_the_oauth2_refresh_grant(tmp_path: Path) -> None:
    fake, image = _token_registry()
    original = fake.__call__

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "auth.example.test":
            form = dict(httpx.QueryParams(request.content.decode()))
            fake.token_requests.append(request)
            assert request.method == "POST"
            assert "Authorization" not in request.headers
            assert form["grant_type"] == "refresh_token"
            assert form["refresh_token"] == "refresh-abc"
            assert form["scope"] == f"repository:{REPO}:pull"
            assert form["service"] == "reg"
            fake.valid.add("oauth-token")
            return httpx.Response(200, json={"access_token": "oauth-token", "expires_in": 300})
        return original(request)

    (tmp_path / "config.json").write_text(
        json.dumps({"auths": {HOST: {"identitytoken": "refresh-abc"}}})
    )
    policy = RetryPolicy(max_attempts=1)
    with RegistryClient(
        insecure=(HOST,),
        transport=StreamingMock(handler),
        retry_policy=policy,
        docker_config=tmp_path,
    ) as client:
        assert client.get_manifest(REF, "v1")[0] == image.manifest
    assert len(fake.token_requests) == 1


@pytest.mark.parametrize(
    "realm", ["http://[::1", "https://a b/\x01", "ftp://auth.example/t", "/token"]
)
def test_unusable_realm_is_a_protocol_error(realm: str, tmp_path: Path) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, headers={"WWW-Authenticate": f'Bearer realm="{realm}"'})

    with _client(handler, tmp_path) as client:  # type: ignore[arg-type]
        with pytest.raises(RegistryProtocolError, match="realm"):
            client.get_manifest(REF, "v1")
