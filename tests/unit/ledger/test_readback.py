"""The ledger read back in chunks: lines whole wherever the chunks cut them."""

from __future__ import annotations

import pytest

from imagekit.ledger import (
    readback,
)
from imagekit.workspace import Workspace
from tests.support.ledger_chain import write_chain


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_reading_in_chunks_sees_the_lines_parse_sees(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """Lines cut anywhere by the chunks come back whole; a line longer than any record is
    malformed with its length, never held whole; the torn tail keeps its offset."""
    ws.ledger_path.parent.mkdir(parents=True)
    write_chain(ws.ledger_path, records=3)
    with ws.ledger_path.open("ab") as fh:
        fh.write(b"x" * 1500 + b"\n" + b"\n" + b'{"seq": 9')
    monkeypatch.setattr(readback, "_CHUNK", chunk)
    monkeypatch.setattr(readback, "MAX_LINE_BYTES", 1000)  # a record is ~600 bytes
    with readback.reading(ws.ledger_path) as lines:
        read = list(lines)
    data = ws.ledger_path.read_bytes()
    assert [type(line).__name__ for line in read] == [
        "Entry", "Entry", "Entry", "Malformed", "Malformed", "TornLine",
    ]  # fmt: skip
    entries = [line for line in read if isinstance(line, readback.Entry)]
    assert b"".join(e.raw for e in entries) == data[: read[3].offset]
    assert read[3] == readback.Malformed(4, read[3].offset, 1501)
    assert read[4] == readback.Malformed(5, read[3].offset + 1501, 1)
    assert read[5] == readback.TornLine(6, len(data) - 9, 9)
