"""A full disk, made real: a 64 KiB tmpfs the ledger and the evidence live on.

An append cut short by ENOSPC left a torn line that refused every later append; `ledger
repair` on the full disk failed leaving an empty quarantine file; evidence written on it
was an OSError (a crash) with a 0-byte file left. Each is now exit 3 with nothing half
written: the append rolled back, the repair undone, the evidence file removed.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagekit.errors import CouldNotFinish
from imagekit.evidence import write_bytes
from imagekit.ledger import verify
from imagekit.workspace import Workspace
from tests.unit.ledger.support import note, run_cli

pytestmark = pytest.mark.integration


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, unmounted at the end."""
    if os.geteuid() != 0:
        pytest.fail("mounting a tmpfs needs root (the test hosts run the suite as root)")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def _fill(disk: Path) -> Path:
    """What space is left taken by one file (removed to free it)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        while os.write(fd, b"\0" * 512):
            pass
    except OSError:
        pass  # ENOSPC: the disk is full
    finally:
        os.close(fd)
    return filler


def test_an_append_cut_by_a_full_disk_is_rolled_back(full_disk: Path) -> None:
    ws = Workspace.at(full_disk)
    appended = 0
    with pytest.raises(CouldNotFinish) as full:
        for n in range(10_000):
            note(ws, n, images={})
            appended += 1
    assert full.value.exit_code == 3
    assert "No space left on device" in full.value.message
    data = ws.ledger_path.read_bytes()
    assert data.endswith(b"\n") and data.count(b"\n") == appended  # no torn line
    assert "nothing was recorded (the ledger is as it was)" in full.value.message
    report = verify(ws)
    assert report.ok and report.records == appended
    # Space freed, the next append chains on as if the full disk had never been.
    shrunk = data[: data.rfind(b"\n", 0, len(data) // 2) + 1]
    ws.ledger_path.write_bytes(shrunk)
    note(ws, 99_999, images={})
    assert verify(ws).ok


def test_repair_on_a_full_disk_fails_cleanly(full_disk: Path) -> None:
    ws = Workspace.at(full_disk)
    for n in range(3):
        note(ws, n, images={})
    with ws.ledger_path.open("ab") as fh:
        fh.write(b'{"seq":4,"torn by a crash' + b"x" * 8000)
    before = ws.ledger_path.read_bytes()
    filler = _fill(full_disk)
    done = run_cli(ws, "ledger", "repair")
    assert done.returncode == 3, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0], done.stderr
    assert sorted(p.name for p in ws.ledger_path.parent.iterdir()) == ["ledger.jsonl"]
    assert "the ledger was left as it was" in errors[0]
    assert ws.ledger_path.read_bytes() == before
    filler.unlink()
    done = run_cli(ws, "ledger", "repair")
    assert done.returncode == 0, done.stderr
    assert verify(ws).ok


def test_evidence_on_a_full_disk_is_exit_3_and_leaves_no_file(full_disk: Path) -> None:
    _fill(full_disk)
    target = full_disk / "evidence" / "report.json"
    with pytest.raises(CouldNotFinish) as full:
        write_bytes(target, b"{}" * 10_000)
    assert full.value.exit_code == 3 and "No space left on device" in full.value.message
    assert not target.exists()
