"""The largest body a registry's 413/416 says it takes, read from its own words."""

from __future__ import annotations

import pytest

from imagekit.registry.blob_upload import stated_max_size
from tests.support.faultproxy import GHCR_TOO_LARGE


def test_ghcrs_exact_words_give_its_4_mib() -> None:
    # The body GHCR answers a PATCH over its limit with, byte for byte.
    assert b"request body is too large, max size is 4.00MiB" in GHCR_TOO_LARGE
    assert stated_max_size(GHCR_TOO_LARGE.decode()) == 4 * 1024 * 1024


@pytest.mark.parametrize(
    ("said", "size"),
    [
        ("request body is too large, max size is 0.09MiB", 94_371),  # rounded down
        ("client intended to send too large body: maximum size 8 MB", 8_000_000),
        ("max_body_size=1048576 bytes", 1_048_576),
        ("request body is too large", None),
        ("max size is 0.00MiB", None),
        ("too many requests", None),
    ],
)
def test_other_spellings_and_none(said: str, size: int | None) -> None:
    assert stated_max_size(said) == size
