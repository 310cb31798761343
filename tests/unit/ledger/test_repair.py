"""Repair completes what a crash left whole but for its newline, and quarantines only what
does not parse or does not chain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagekit.ledger import append_record, repair, verify
from imagekit.workspace import Workspace


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace.at(tmp_path)


def _notes(ws: Workspace, count: int) -> None:
    for n in range(count):
        append_record(ws, "note", plan="p", images={}, status="ok", scope=f"n{n}")


def test_a_whole_last_record_missing_only_its_newline_is_completed(ws: Workspace) -> None:
    _notes(ws, 3)
    whole = ws.ledger_path.read_bytes()
    ws.ledger_path.write_bytes(whole[:-1])  # the crash came between the record and its \n
    assert [p.kind for p in verify(ws).problems] == ["torn"]
    result = repair(ws)
    assert result.repaired and result.completed
    assert result.quarantine is None and result.moved_bytes == 0 and result.kept_records == 3
    assert "completed" in result.message
    assert ws.ledger_path.read_bytes() == whole
    assert verify(ws).ok
    assert list(ws.ledger_path.parent.glob("*.torn-*")) == []


def test_a_torn_tail_that_does_not_chain_is_quarantined(ws: Workspace) -> None:
    _notes(ws, 3)
    lines = ws.ledger_path.read_bytes().splitlines(keepends=True)
    forged = json.loads(lines[-1])
    forged["seq"] = 4  # a whole record, but it does not chain: its prev names seq 2
    complete = b"".join(lines)
    tail = json.dumps(forged, sort_keys=True, separators=(",", ":")).encode()
    ws.ledger_path.write_bytes(complete + tail)
    result = repair(ws)
    assert result.repaired and not result.completed
    assert result.quarantine is not None and result.quarantine.read_bytes() == tail
    assert ws.ledger_path.read_bytes() == complete


def test_a_torn_tail_that_does_not_parse_is_quarantined(ws: Workspace) -> None:
    _notes(ws, 2)
    complete = ws.ledger_path.read_bytes()
    with ws.ledger_path.open("ab") as fh:
        fh.write(b'{"seq":3,"tor')
    result = repair(ws)
    assert result.repaired and not result.completed and result.moved_bytes == 13
    assert ws.ledger_path.read_bytes() == complete
