"""Repair completes what a crash left whole but for its newline, and quarantines only what
does not parse or does not chain."""

from __future__ import annotations

import json

from imagekit.ledger import repair, verify
from imagekit.workspace import Workspace
from tests.unit.ledger.support import ledger_lines, notes


def test_a_whole_last_record_missing_only_its_newline_is_completed(ws: Workspace) -> None:
    notes(ws, 3, images={})
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
    notes(ws, 3, images={})
    lines = ledger_lines(ws)
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
    notes(ws, 2, images={})
    complete = ws.ledger_path.read_bytes()
    with ws.ledger_path.open("ab") as fh:
        fh.write(b'{"seq":3,"tor')
    result = repair(ws)
    assert result.repaired and not result.completed and result.moved_bytes == 13
    assert ws.ledger_path.read_bytes() == complete
