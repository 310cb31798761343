"""Retrying a registry request: bounded attempts, exponential backoff with jitter,
``Retry-After`` honoured, a rate limit said in the registry's own words.

429 Too Many Requests (Docker Hub's pull limit, quotas elsewhere) is retried the way the
registry asks: ``Retry-After`` when it sends one, else a pause that starts at
``RetryPolicy.rate_limit_wait`` and doubles; a pause longer than the policy allows ends the
command at once, with the registry's own words (its error body, its ``RateLimit-*``
headers) and the pause it asked for, instead of hammering it or hiding why.

Apart from the transport (imagekit.registry.transport), which sends one attempt and says
whether a failure is worth another (:class:`Transient`): how often and how long to try
again is the policy's alone, and the session, the token fetch and the document reads run
their requests through it.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TypeVar

import httpx
import tenacity

from imagekit import progress
from imagekit.errors import RateLimited, RetriesExhausted

T = TypeVar("T")

_DIGITS = re.compile(r"[0-9]{1,19}")


class Transient(Exception):
    """A failure worth another attempt; carries the server's Retry-After when it sent one,
    and for an answered status the status, what the registry said and its rate limits."""

    def __init__(
        self,
        description: str,
        *,
        retry_after: float | None = None,
        status: int | None = None,
        said: str = "",
        limits: str = "",
    ) -> None:
        super().__init__(description)
        self.description = description
        self.retry_after = retry_after
        self.status = status
        self.said = said
        self.limits = limits


def _limit_value(value: str | None) -> tuple[str, str | None] | None:
    """``100;w=21600`` (Docker Hub, the IETF RateLimit draft) -> ("100", "21600")."""
    if not value:
        return None
    first, *params = (part.strip() for part in value.split(";"))
    window = next((p[2:] for p in params if p.startswith("w=") and p[2:].isdigit()), None)
    return (first, window) if first.isdigit() else None


def rate_limits(headers: httpx.Headers) -> str:
    """The registry's rate-limit headers in words ("100 per 21600 s, 0 left"), or ""."""
    limit = _limit_value(headers.get("RateLimit-Limit"))
    remaining = _limit_value(headers.get("RateLimit-Remaining"))
    reset = headers.get("RateLimit-Reset", "").strip()
    parts: list[str] = []
    if limit is not None:
        parts.append(f"limit {limit[0]}" + (f" per {limit[1]} s" if limit[1] else ""))
    if remaining is not None:
        parts.append(f"{remaining[0]} left")
    if reset.isdigit():
        parts.append(f"resets in {reset} s")
    return ", ".join(parts)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if _DIGITS.fullmatch(value):
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry; ``sleep`` is replaceable so tests need not wait."""

    max_attempts: int = 5
    initial_wait: float = 0.5
    max_wait: float = 20.0
    #: A server asking for a longer pause than this gets this long (the attempts stay bounded).
    max_retry_after: float = 60.0
    #: The first pause after a 429 that named none; it doubles with each attempt.
    rate_limit_wait: float = 5.0
    sleep: Callable[[float], None] = field(default=time.sleep)

    def backoff(self, attempt: int) -> float:
        """Exponential backoff with "equal jitter": half fixed, half random, capped."""
        ceiling = min(self.max_wait, math.ldexp(self.initial_wait, max(0, attempt - 1)))
        return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - not for security

    def run(
        self,
        action: Callable[[], T],
        *,
        registry: str,
        what: str,
        repository: str | None = None,
        digest: str | None = None,
    ) -> T:
        """Call ``action`` until it stops raising Transient or the attempts run out."""

        def last(state: tenacity.RetryCallState) -> BaseException | None:
            return state.outcome.exception() if state.outcome else None

        class TooLong(tenacity.stop.stop_base):
            def __call__(self, state: tenacity.RetryCallState) -> bool:
                return too_long(state)

        def too_long(state: tenacity.RetryCallState) -> bool:
            # A registry asking for a longer pause than we allow will not serve us sooner.
            exc = last(state)
            return (
                isinstance(exc, Transient)
                and exc.retry_after is not None
                and exc.retry_after > self.max_retry_after
            )

        def wait(state: tenacity.RetryCallState) -> float:
            exc = last(state)
            if isinstance(exc, Transient) and exc.retry_after is not None:
                return min(exc.retry_after, self.max_retry_after)
            if isinstance(exc, Transient) and exc.status == 429:
                pause = math.ldexp(self.rate_limit_wait, state.attempt_number - 1)
                return min(self.max_retry_after, max(pause, self.backoff(state.attempt_number)))
            return self.backoff(state.attempt_number)

        def say(state: tenacity.RetryCallState) -> None:
            # One line a retry, with its reason and its wait (docker and skopeo say as much);
            # nothing unless the CLI installed a reporter.
            exc = last(state)
            reason = exc.description if isinstance(exc, Transient) else repr(exc)
            pause = state.next_action.sleep if state.next_action else 0.0
            progress.current().retry(
                f"{what}: {reason}; attempt {state.attempt_number + 1} of "
                f"{self.max_attempts} in {pause:.1f} s"
            )

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(max(1, self.max_attempts)) | TooLong(),
            wait=wait,
            retry=tenacity.retry_if_exception_type(Transient),
            sleep=self.sleep,
            before_sleep=say,
            reraise=False,
        )
        try:
            return retrying(action)
        except tenacity.RetryError as exc:
            attempts = exc.last_attempt.attempt_number
            failure = exc.last_attempt.exception()
            if isinstance(failure, Transient) and failure.status == 429:
                raise _rate_limited(failure, registry, what, attempts) from exc
            detail = failure.description if isinstance(failure, Transient) else repr(failure)
            raise RetriesExhausted(
                f"{what}: gave up after {attempts} attempts; last: {detail}",
                registry=registry,
                repository=repository,
                digest=digest,
                hint=f"check that {registry} is reachable and healthy, then try again",
            ) from exc


def _rate_limited(failure: Transient, registry: str, what: str, attempts: int) -> RateLimited:
    """One line: who limited us, in its own words and numbers, and what to do about it."""
    said = f": {failure.said}" if failure.said else ""
    limits = f" ({failure.limits})" if failure.limits else ""
    pause = failure.retry_after
    wait = f"wait {math.ceil(pause)} s (its Retry-After)" if pause else "wait a while"
    return RateLimited(
        f"{registry} is rate-limiting us: {what} answered HTTP 429 {attempts} "
        f"time{'s' if attempts != 1 else ''}{said}{limits}",
        registry=registry,
        status=429,
        hint=f"{wait} and run again; logged-in users get higher limits "
        f"(`docker login {registry}`); fewer --workers send fewer requests",
    )
