"""The CLI in a child process held to a memory cap and a time limit, for inputs that once made
imagekit read until the kernel killed it (/dev/zero) or wait forever (a FIFO): on such code
the test fails (exit 70 from a MemoryError, or the time limit) instead of taking the machine
or the run with it."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

#: Address space for the child: imagekit starts in about 300 MB of it.
MEMORY_CAP = 2 << 30
TIME_LIMIT_S = 60


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def run_bounded(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``imagekit ARGS``; raises subprocess.TimeoutExpired past TIME_LIMIT_S."""
    return subprocess.run(
        [sys.executable, "-c", "from imagekit.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
        timeout=TIME_LIMIT_S,
        preexec_fn=_cap,  # runs in the child before exec: the cap is the child's only
    )
