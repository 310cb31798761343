"""This host's processes as a place to run: the program in argv (the Python holding torch,
this interpreter), no container, no image; on the deadline, SIGINT or SIGTERM the run is
stopped (its whole process tree, or its process group) before anything else happens."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from imagekit.runners.seam import RunSpec
from imagekit.runtime.container import Bounded, ProcessRun, kill_tree


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the run's process group (a program whose children end on their own limits)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


class Started:
    """A bounded process run as the seam's handle; ``wait`` gives its ``ProcessRun``."""

    def __init__(self, bounded: Bounded, image: str | None, name: str) -> None:
        self._bounded, self._image, self._name = bounded, image, name

    @property
    def name(self) -> str:
        return self._name

    def wait(self, deadline_s: float) -> ProcessRun:
        return self._bounded.wait(deadline_s)

    def logs(self) -> str:
        """Its stdout as kept in memory (the last part of a long one), once it ended."""
        ended = self._bounded.ended
        return "" if ended is None else ended.stdout.text()

    def image_id(self) -> str | None:
        return self._image

    def cleanup(self) -> None:
        self._bounded.stop()


class HostRunner:
    """Runs a spec's argv here, ``env`` added to this process's environment; the image,
    mounts, devices and network of the spec do not apply (what this host has, it has)."""

    where = "this host"

    def __init__(self, stop: Callable[[subprocess.Popen[bytes]], None] = kill_tree) -> None:
        self._stop = stop

    def submit(self, spec: RunSpec, run_dir: Path) -> Started:
        env = {**os.environ, **spec.env} if spec.env else None
        bounded = Bounded(
            list(spec.argv),
            spec.shown or spec.argv,
            run_dir,
            stop=self._stop,
            stream_prefix=spec.output,
            env=env,
        )
        return Started(bounded, None, f"pid {bounded.pid}")
