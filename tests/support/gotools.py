"""The Go tools scripts/setup-host.sh builds into .tools/bin (cosign, oras, crane): the real
third-party readers the attestation tests check imagekit's output with."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

_TOOLS = Path(__file__).resolve().parents[2] / ".tools" / "bin"


def tool(name: str) -> str:
    """The tool's path; a missing tool fails the test (setup builds it), never skips it."""
    local = _TOOLS / name
    if local.is_file():
        return str(local)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not built: run scripts/setup-host.sh")
    return found


def run_tool(
    name: str, *args: str, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run a tool with the environment plus ENV (passwords go there, never into args)."""
    return subprocess.run(  # noqa: S603 - a test's own command line
        [tool(name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def cosign_verify_attestation(
    reference: str, public_key: Path, predicate_type: str
) -> subprocess.CompletedProcess[str]:
    """`cosign verify-attestation --key PUB` on the legacy .att tag, no transparency log,
    plain HTTP to the loopback registry."""
    return run_tool(
        "cosign",
        "verify-attestation",
        "--key",
        str(public_key),
        "--insecure-ignore-tlog",
        "--allow-http-registry",
        "--type",
        predicate_type,
        reference,
    )


def cosign_verify(reference: str, public_key: Path) -> subprocess.CompletedProcess[str]:
    return run_tool(
        "cosign",
        "verify",
        "--key",
        str(public_key),
        "--insecure-ignore-tlog",
        "--allow-http-registry",
        reference,
    )
