"""imagekit.runners.host: argv run here, its env added, its output kept; on the deadline
the whole process tree is gone before the run comes back."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from imagekit.runners.host import HostRunner, kill_group
from imagekit.runners.seam import RunSpec


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_a_host_run_gets_its_env_and_keeps_its_output(tmp_path: Path) -> None:
    code = "import json, os; print(json.dumps([os.environ['IMAGEKIT_T'], os.environ['HOME']]))"
    spec = RunSpec(argv=(sys.executable, "-c", code), stage="t", env={"IMAGEKIT_T": "given"})
    run = HostRunner().submit(spec, tmp_path)
    ended = run.wait(30)
    assert ended.exit_code == 0 and not ended.timed_out
    assert json.loads(run.logs()) == ["given", os.environ["HOME"]]  # added, not replaced
    assert run.image_id() is None and run.name.startswith("pid ")
    assert (tmp_path / "probe-stdout.raw").read_bytes() == run.logs().encode()
    assert ended.command == spec.argv  # shown as run when nothing else is said
    run.cleanup()  # ended: nothing left to stop, and no error


def test_at_the_deadline_every_process_of_the_tree_is_killed(tmp_path: Path) -> None:
    # the child leaves the group (a session of its own), as a launcher's workers may
    said = tmp_path / "child.pid"
    code = (
        "import pathlib, subprocess, sys, time; "
        "c = subprocess.Popen(['sleep', '60'], start_new_session=True); "
        f"pathlib.Path({str(said)!r}).write_text(str(c.pid)); time.sleep(60)"
    )
    spec = RunSpec(argv=(sys.executable, "-c", code), stage="t", output="tree")
    run = HostRunner().submit(spec, tmp_path)
    deadline = time.monotonic() + 20
    while not said.exists() or not said.read_text():
        if time.monotonic() > deadline:
            run.cleanup()
            pytest.fail("the child never said its pid")
        time.sleep(0.05)
    child = int(said.read_text())
    assert _alive(child)
    ended = run.wait(0.2)
    assert ended.timed_out
    gone_by = time.monotonic() + 5  # SIGKILL is sent, not yet delivered, when kill() returns
    while _alive(child) and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert not _alive(child)


def test_cleanup_stops_a_run_still_going(tmp_path: Path) -> None:
    spec = RunSpec(argv=("sleep", "60"), stage="t")
    run = HostRunner(stop=kill_group).submit(spec, tmp_path)
    started = time.monotonic()
    run.cleanup()
    ended = run.wait(5)  # what the cleanup collected
    assert ended.exit_code != 0 and time.monotonic() - started < 10
    assert json.loads((tmp_path / "probe-run.json").read_text())["ended"] == (
        "stopped by its caller"
    )
