"""The fixtures themselves: each registry flavour really enforces its auth."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest

from tests.support.registries import RunningRegistry


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _refused(url: str, scheme: str) -> str:
    """A GET without credentials is refused with a challenge of ``scheme``: the challenge."""
    status, headers, _ = _get(url)
    assert status == 401
    challenge = headers["Www-Authenticate"]
    assert challenge.startswith(f"{scheme} ")
    return challenge


def _basic(credentials: str) -> dict[str, str]:
    """The Authorization header of basic auth for ``user:password``."""
    return {"Authorization": f"Basic {base64.b64encode(credentials.encode()).decode()}"}


def test_anonymous_registry_answers(registry: RunningRegistry) -> None:
    status, _, _ = _get(f"{registry.url}/v2/")
    assert status == 200


def test_basic_registry_refuses_without_and_accepts_with_credentials(
    basic_registry: RunningRegistry,
) -> None:
    _refused(f"{basic_registry.url}/v2/", "Basic")
    credentials = f"{basic_registry.username}:{basic_registry.password}"
    status, _, _ = _get(f"{basic_registry.url}/v2/", _basic(credentials))
    assert status == 200


def test_token_registry_challenges_and_accepts_issued_tokens(
    token_registry: RunningRegistry,
) -> None:
    challenge = _refused(f"{token_registry.url}/v2/x/tags/list", "Bearer")
    assert 'scope="repository:x:pull"' in challenge
    assert token_registry.realm is not None
    url = f"{token_registry.realm}?service=imagekit-test-registry&scope=repository:x:pull"
    status, _, body = _get(url, _basic(f"{token_registry.username}:{token_registry.password}"))
    assert status == 200
    token = json.loads(body)["token"]
    # The real registry validates our JWT: the repository does not exist, so 404, not 401.
    status, _, _ = _get(
        f"{token_registry.url}/v2/x/tags/list", {"Authorization": f"Bearer {token}"}
    )
    assert status == 404


@pytest.mark.parametrize("wrong", ["nobody:nothing"])
def test_token_issuer_refuses_wrong_credentials(
    token_registry: RunningRegistry, wrong: str
) -> None:
    assert token_registry.realm is not None
    status, _, _ = _get(f"{token_registry.realm}?service=s", _basic(wrong))
    assert status == 401


def test_base_image_is_pinned_and_runs_without_network(engine, base_image) -> None:  # type: ignore[no-untyped-def]
    from imagekit.refs import parse_reference

    ref = parse_reference(base_image.reference)
    assert ref.pinned and ref.digest == base_image.digest
    status, headers, body = _get(
        f"http://{base_image.registry_host}/v2/{base_image.repository}/manifests/{base_image.digest}",
        {"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    assert status == 200
    assert headers["Docker-Content-Digest"] == base_image.digest
    from imagekit.refs import Digest

    assert Digest.of_bytes(body) == base_image.digest
    output = engine.client.run(
        base_image.local_tag,
        ["python3", "-c", "import av, numpy, sys; print(sys.version_info[:2])"],
        remove=True,
        networks=["none"],
    )
    assert "(3, 11)" in str(output)
