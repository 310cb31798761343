"""Retries against a registry: Retry-After, 429 in its own words, backoff, giving up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from imagekit.errors import (
    RateLimited,
    RetriesExhausted,
)
from imagekit.refs import parse_reference
from imagekit.registry import RegistryClient, RetryPolicy
from imagekit.registry.retry import parse_retry_after
from tests.unit.registry.fakes import HOST, FakeRegistry, StreamingMock, make_image, sha

REPO = "team/app"
REF = parse_reference(f"{HOST}/{REPO}:v1")


def test_retry_after_parsing() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_retry_after("7") == 7.0
    assert (
        parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now=now)
        == 30.0
    )
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honoured(status: int) -> None:
    image = make_image()
    fake = FakeRegistry()
    fake.add_image(REPO, image, tag="v1")
    answers = iter([httpx.Response(status, headers={"Retry-After": "3"})])
    original = fake.__call__

    def handler(request: httpx.Request) -> httpx.Response:
        return next(answers, None) or original(request)

    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=3, initial_wait=0.01, max_wait=0.02, sleep=sleeps.append)
    with RegistryClient(
        transport=StreamingMock(handler), retry_policy=policy, insecure=(HOST,)
    ) as client:
        body, _, _ = client.get_manifest(REF, "v1")
    assert body == image.manifest
    assert sleeps == [3.0]


def test_a_retry_after_beyond_the_cap_ends_at_once_saying_how_long_to_wait() -> None:
    """Waiting the capped pause and asking again only spends the attempts (and the quota):
    the registry said when it serves us again, so the user is told that, at once."""
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(429, headers={"Retry-After": "86400"})

    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=2, max_retry_after=5, sleep=sleeps.append)
    with (
        RegistryClient(
            transport=StreamingMock(handler), retry_policy=policy, insecure=(HOST,)
        ) as client,
        pytest.raises(RateLimited) as caught,
    ):
        client.ping(HOST)
    assert sleeps == []
    assert calls == 1
    assert caught.value.exit_code == 3
    assert "wait 86400 s" in (caught.value.hint or "")


@pytest.mark.parametrize("status", [408, 500, 502, 504])
def test_transient_statuses_are_retried_with_backoff_then_give_up(status: int) -> None:
    fake = FakeRegistry()
    fake.overrides["/v2/"] = lambda request: httpx.Response(status)
    sleeps: list[float] = []
    with (
        fake.client(max_attempts=4, sleeps=sleeps) as client,
        pytest.raises(RetriesExhausted) as info,
    ):
        client.ping(HOST)
    assert len([r for r in fake.requests if r.url.path == "/v2/"]) == 4
    assert len(sleeps) == 3 and all(0 < s <= 0.02 for s in sleeps)
    assert str(status) in info.value.message
    assert info.value.registry == HOST


def test_retries_exhausted_names_registry_repository_and_digest() -> None:
    fake = FakeRegistry()
    digest = sha(b"blob")
    fake.overrides[f"/v2/{REPO}/blobs/{digest}"] = lambda request: httpx.Response(502)
    with fake.client(max_attempts=2) as client, pytest.raises(RetriesExhausted) as info:
        client.blob_exists(REF, digest)
    assert (info.value.registry, info.value.repository, info.value.digest) == (HOST, REPO, digest)


def test_each_retry_is_one_progress_line_with_its_reason_and_its_wait() -> None:
    import io

    from imagekit import progress
    from imagekit.progress import PlainReporter

    fake = FakeRegistry()
    fake.overrides["/v2/"] = lambda request: httpx.Response(502)
    stream = io.StringIO()
    with (
        progress.installed(PlainReporter(stream)),
        fake.client(max_attempts=3, sleeps=[]) as client,
        pytest.raises(RetriesExhausted),
    ):
        client.ping(HOST)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2  # three attempts: two waits
    for number, line in enumerate(lines, start=2):
        assert line.startswith("retry: ") and "502" in line, line
        assert f"attempt {number} of 3 in 0." in line and line.endswith(" s"), line
