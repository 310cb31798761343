"""Repairing the ledger: the one fault a crash can leave, a torn last line.

An append writes its record and newline in one ``write``, but a crash (or a full disk) can
still cut it. A cut line that is a whole record, chained to the line before it and in the
form imagekit writes, is missing only its newline: repair completes it, so the record it
holds stays on record. Anything else a torn line holds, whether it does not parse or does
not chain, is moved into a quarantine file beside the ledger. Nothing else is ever repaired:
an edited, deleted or reordered record is evidence of something a person must look at.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from imagekit.errors import CouldNotFinish, LedgerBroken, UsageError
from imagekit.evidence import utc_stamp
from imagekit.ledger.store import locked, parse, tail_problem
from imagekit.workspace import Workspace


@dataclass(frozen=True)
class RepairReport:
    path: Path
    repaired: bool
    quarantine: Path | None
    moved_bytes: int
    kept_records: int
    message: str
    completed: bool = False  # the torn line was a whole record: its newline was written

    # A repair that could not be made raises (LedgerBroken, UsageError); a report is success.
    ok: ClassVar[bool] = True
    exit_code: ClassVar[int] = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger": str(self.path),
            "repaired": self.repaired,
            "quarantine": str(self.quarantine) if self.quarantine else None,
            "moved_bytes": self.moved_bytes,
            "kept_records": self.kept_records,
            "completed": self.completed,
            "message": self.message,
        }


def repair(workspace: Workspace) -> RepairReport:
    """Complete a torn last line that is a whole record, or move it into a quarantine file.

    Only the torn tail a crashed append leaves is repaired; no complete line is touched. An
    edited, deleted or reordered record is evidence of something a person must look at:
    repair refuses (LedgerBroken).
    """
    path = workspace.ledger_path
    if not path.exists():
        raise UsageError(f"no ledger at {path}", hint="set IMAGEKIT_LEDGER or --ledger")
    with locked(path, os.O_RDWR | os.O_APPEND) as fd:
        size = os.fstat(fd).st_size
        result = parse(path, os.pread(fd, size, 0))
        if result.malformed:
            line_no = result.malformed[0].line
            raise LedgerBroken(
                f"line {line_no} of {path} is a complete line that is not a record; repair only "
                "moves aside a torn last line",
                hint="look at it with `imagekit ledger verify`; an edit needs a person",
            )
        if result.torn is None:
            return RepairReport(
                path, False, None, 0, len(result.entries), "no torn line; nothing to repair"
            )
        torn = result.torn
        tail = os.pread(fd, torn.length, torn.offset)
        previous = result.entries[-1].raw if result.entries else None
        if tail_problem(previous, tail + b"\n", size + 1) is None:
            try:
                os.write(fd, b"\n")
                os.fsync(fd)
            except OSError as exc:
                raise CouldNotFinish(f"repairing {path} failed: {exc.strerror}") from exc
            kept = len(result.entries) + 1
            return RepairReport(
                path,
                True,
                None,
                0,
                kept,
                f"completed the torn line {torn.line}: a whole record chained to the one before "
                f"it, missing only its newline; {kept} complete records kept",
                completed=True,
            )
        quarantine = path.with_name(f"{path.name}.torn-{utc_stamp()}-{torn.offset}")
        try:
            with quarantine.open("xb") as out:
                out.write(tail)
                out.flush()
                os.fsync(out.fileno())
            os.ftruncate(fd, torn.offset)
            os.fsync(fd)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                raise CouldNotFinish(f"quarantine file {quarantine} already exists") from exc
            raise CouldNotFinish(f"repairing {path} failed: {exc.strerror}") from exc
    return RepairReport(
        path,
        True,
        quarantine,
        torn.length,
        len(result.entries),
        f"moved the torn line {torn.line} ({torn.length} bytes) to {quarantine.name}; "
        f"{len(result.entries)} complete records kept",
    )
