"""Repair completes what a crash left whole but for its newline, and quarantines only what
does not parse or does not chain."""

from __future__ import annotations

import json

import pytest

from imagekit.errors import LedgerBroken
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


DEEP = b"[" * 1000 + b"]" * 1000 + b"\n"


def test_lines_that_are_not_records_after_the_last_record_are_quarantined(
    ws: Workspace,
) -> None:
    """A 1,000-deep line (a RecursionError in every reader before) and a line of garbage
    after it: both are moved aside whole, in one quarantine file, and the history stays."""
    notes(ws, 2, images={})
    complete = ws.ledger_path.read_bytes()
    with ws.ledger_path.open("ab") as fh:
        fh.write(DEEP + b"not json\n" + b'{"torn')
    assert [p.kind for p in verify(ws).problems] == ["malformed", "malformed", "torn"]
    result = repair(ws)
    assert result.repaired and result.kept_records == 2
    assert result.quarantine is not None and ".unreadable-" in result.quarantine.name
    assert result.quarantine.read_bytes() == DEEP + b"not json\n" + b'{"torn'
    assert "moved 3 line(s) after the last record, from line 3" in result.message
    assert ws.ledger_path.read_bytes() == complete
    assert verify(ws).ok
    notes(ws, 1, images={})  # appends chain again
    assert verify(ws).ok


def test_a_line_that_is_not_a_record_before_a_record_is_left_to_a_person(ws: Workspace) -> None:
    notes(ws, 1, images={})
    (record,) = ledger_lines(ws)
    ws.ledger_path.write_bytes(record + DEEP + record)  # a record after it: not a tail
    with pytest.raises(LedgerBroken, match="line 2 of .* with records after it"):
        repair(ws)
    assert ws.ledger_path.read_bytes() == record + DEEP + record
