"""Starting and stopping the real daemons the tests run on loopback (docker-registry,
containerd): output into a log file of their own, a polite stop that turns into a kill."""

from __future__ import annotations

import subprocess
from pathlib import Path


def start_logged(
    argv: list[str], log_path: Path, *, own_session: bool = False
) -> subprocess.Popen[bytes]:
    """Start ``argv`` with its stdout and stderr appended to ``log_path``; with
    ``own_session`` in a session of its own, so a Ctrl-C at the terminal reaches only the
    caller, which then stops it in its own order (the test cluster's daemons)."""
    with log_path.open("ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=own_session)


def stop_process(process: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """SIGTERM, then SIGKILL if it has not ended within ``timeout`` seconds."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
