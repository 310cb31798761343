"""A long, valid ledger written fast: records chained exactly as ``append_record`` chains
them, without its lock and fsync per record, for the ledger's memory test and benchmark."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from imagekit import __version__
from imagekit.ledger.record import SCHEMA_VERSION, encode_line, line_hash


def _record(seq: int, prev: str | None) -> dict[str, Any]:
    digest = "sha256:" + hashlib.sha256(str(seq).encode()).hexdigest()
    return {
        "schema": SCHEMA_VERSION,
        "seq": seq,
        "prev": prev,
        "time": f"2026-12-04T12:{seq // 60 % 60:02d}:{seq % 60:02d}.000000Z",
        "kind": "note",
        "plan": f"plan-{seq % 7}",
        "images": {"image": f"registry.test/serving/plan-{seq % 7}@{digest}"},
        "status": "ok",
        "scope": "a note kept beside the builds, audits and pushes of the night "
        "(CPU-only checks, no weights loaded, no GPU test)",
        "evidence": None,
        "imagekit": __version__,
        "host": "bench-host",
        "details": {"night": seq // 100, "summary": "reproducible: same diffIDs " * 4},
    }


def write_chain(path: Path, *, records: int | None = None, size: int | None = None) -> int:
    """Write a valid chain of ``records`` records, or of as many as fill ``size`` bytes;
    returns how many were written."""
    prev: str | None = None
    written = 0
    total = 0
    with path.open("wb") as out:
        while (records is not None and written < records) or (size is not None and total < size):
            raw = encode_line(_record(written + 1, prev))
            out.write(raw)
            prev = line_hash(raw)
            written += 1
            total += len(raw)
    return written
