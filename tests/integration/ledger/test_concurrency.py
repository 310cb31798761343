"""Many real processes appending at once, and a real SIGKILL in the middle of an append."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagekit.ledger import read_records, repair, scan, verify
from imagekit.workspace import Workspace

pytestmark = pytest.mark.integration

# A worker appends COUNT records once the start file exists (so all of them start together).
_APPENDER = """
import os, sys, time
from pathlib import Path
from imagekit.ledger import append_record
from imagekit.workspace import Workspace

worker, count, start, blob = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
ws = Workspace.from_env()
while not start.exists():
    time.sleep(0.001)
for n in range(count):
    append_record(
        ws, "note", plan="concurrency", images={"image": f"w{worker}"}, status="ok",
        scope=f"worker {worker} record {n}", details={"worker": worker, "n": n, "blob": "x" * blob},
    )
"""


def _spawn(worker: int, count: int, start: Path, blob: int = 0) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", _APPENDER, str(worker), str(count), str(start), str(blob)],
        env=os.environ.copy(),
        stderr=subprocess.PIPE,
    )


def test_eight_processes_append_1600_records_without_loss(
    workspace: Workspace, tmp_path: Path
) -> None:
    start = tmp_path / "start"
    workers = [_spawn(w, 200, start) for w in range(8)]
    time.sleep(0.5)  # let the interpreters start and wait at the line
    start.touch()
    # A reader during the appends (shared lock) never sees a half-written line.
    readings = 0
    while any(proc.poll() is None for proc in workers):
        if workspace.ledger_path.exists():
            during = verify(workspace)
            assert during.ok, during.problems
            readings += 1
        time.sleep(0.05)
    assert readings > 0
    for proc in workers:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
    report = verify(workspace)
    assert report.ok, report.problems
    assert report.records == 1600
    records = read_records(workspace.ledger_path)
    assert [r.seq for r in records] == list(range(1, 1601))
    pairs = [(r.details["worker"], r.details["n"]) for r in records]
    assert sorted(pairs) == sorted((str(w), n) for w in range(8) for n in range(200))
    # They really interleaved: the records of one worker are not one block.
    first_worker = [r.details["worker"] for r in records[:400]]
    assert len(set(first_worker)) > 1
    assert len(workspace.ledger_path.read_bytes().splitlines()) == 1600


def _ends_torn(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell() == 0:
                return False
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"
    except FileNotFoundError:
        return False


def test_sigkill_mid_append_leaves_a_torn_line_that_repair_moves_aside(
    workspace: Workspace, tmp_path: Path
) -> None:
    """A real appender writing 32 MB records is SIGKILLed while its write is in progress.

    The parent watches the ledger and kills the moment the file stops ending in a newline,
    i.e. while the kernel is copying the record in. If the write finishes first, no harm: the
    next record is tried, a bounded number of times.
    """
    path = workspace.ledger_path
    start = tmp_path / "start"
    start.touch()
    torn_seen = False
    complete_before = b""
    for attempt in range(12):
        # Large enough to be caught mid-write, under the 16 MiB a ledger line may be.
        proc = _spawn(0, 2, start, blob=12 * 1024 * 1024)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            if _ends_torn(path):
                proc.send_signal(signal.SIGKILL)
                break
        _, err = proc.communicate(timeout=60)
        if proc.returncode == -signal.SIGKILL and _ends_torn(path):
            torn_seen = True
            print(f"torn line after attempt {attempt + 1}")
            data = path.read_bytes()
            complete_before = data[: data.rfind(b"\n") + 1]
            break
        assert proc.returncode in (0, -signal.SIGKILL), err.decode()
    try:
        assert torn_seen, "no SIGKILL landed inside a write in 12 attempts"
        records_before = complete_before.count(b"\n")
        torn_length = path.stat().st_size - len(complete_before)
        assert 0 < torn_length

        report = verify(workspace)
        assert [p.kind for p in report.problems] == ["torn"]
        problem = report.problems[0]
        assert problem.line == records_before + 1
        assert f"{torn_length} bytes at offset {len(complete_before)}" in problem.message
        assert report.records == records_before

        result = repair(workspace)
        assert result.repaired and result.kept_records == records_before
        assert result.moved_bytes == torn_length
        assert result.quarantine is not None and result.quarantine.stat().st_size == torn_length
        assert path.read_bytes() == complete_before
        # Torn on the first record, nothing is left: an empty ledger verifies nothing.
        assert verify(workspace).status == ("ok" if records_before else "empty")
        assert scan(path).torn is None
        # The ledger takes appends again, chained to the last complete record.
        proc = _spawn(0, 1, start)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        after = verify(workspace)
        assert after.ok and after.records == records_before + 1
        last = json.loads(path.read_bytes().splitlines()[-1])
        assert last["seq"] == records_before + 1
    finally:
        path.unlink(missing_ok=True)
        for leftover in path.parent.glob(path.name + ".torn-*"):
            leftover.unlink()
