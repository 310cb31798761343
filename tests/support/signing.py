"""Fixtures of the signing tests (tests/integration/attest/ and gate/): small images written
straight into the session's loopback registry, and the key pair that signs them."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.attest.keys import KeyPairFiles, generate_key_pair
from tests.support.images import Blob, M, Pushed, Writer
from tests.support.registries import RunningRegistry

_counter = itertools.count()


@pytest.fixture
def make_image(registry: RunningRegistry) -> Callable[[str], Pushed]:
    """``make_image(REPO)``: a new one-layer image in REPO (a new digest each call)."""

    def make(repo: str) -> Pushed:
        number = next(_counter)
        layer = Blob.gzip([M(f"file{number}.txt", data=f"content {number} {repo}".encode())])
        with Writer(registry.host) as writer:
            return writer.image(repo, f"v{number}", [layer])

    return make


@pytest.fixture
def pair(tmp_path: Path) -> KeyPairFiles:
    """CI's signing key, a new one for each test (in its own folder): no test can be passed by
    a signature another test made."""
    return generate_key_pair(tmp_path / "ci")
