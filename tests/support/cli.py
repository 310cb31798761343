"""The CLI in a child process, as a user runs it: the tests that need a fresh process (its own
environment, its own exit) start it here.

Two ways in: :data:`MAIN` calls ``imagekit.cli.main`` as a program would, :data:`ENTRY` is
``python -m imagekit``, the console script's own start-up (the collector paused, httpx's
command-line client kept out: imagekit.cli.entry).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence

MAIN = (sys.executable, "-c", "from imagekit.cli import main; main()")
ENTRY = (sys.executable, "-m", "imagekit")
#: where imagekit reads its TLS settings from the environment
TLS_VARIABLES = ("IMAGEKIT_CERTS_D", "IMAGEKIT_INSECURE_REGISTRIES", "IMAGEKIT_CA_FILE")


def run_child(
    way_in: Sequence[str], *args: str, env: Mapping[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``imagekit ARGS`` in a child process with exactly ``env``; its exit and output kept."""
    return subprocess.run(
        [*way_in, *args],
        capture_output=True,
        text=True,
        env=dict(env),
        check=False,
        timeout=timeout,
    )


def without_tls_settings(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """The console script in a process that sees none of this one's TLS settings
    (:data:`TLS_VARIABLES`): only those ``env`` gives it."""
    environment = {k: v for k, v in os.environ.items() if k not in TLS_VARIABLES}
    return run_child(ENTRY, *args, env={**environment, **(env or {})}, timeout=timeout)
