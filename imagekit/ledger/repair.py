"""Repairing the ledger: what a crash, a full disk or a foreign writer leaves after its last
record.

An append writes its record and newline in one ``write``, but a crash (or a full disk) can
still cut it. A cut line that is a whole record, chained to the line before it and in the
form imagekit writes, is missing only its newline: repair completes it, so the record it
holds stays on record. Anything else a torn line holds, whether it does not parse or does
not chain, is moved into a quarantine file beside the ledger, and so are complete lines that
are not records after the last record (a hostile or broken writer's: no record can chain
onto them, so moving them aside leaves the history as it was). Nothing else is ever
repaired: an edited, deleted or reordered record is evidence of something a person must
look at.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from imagekit.errors import CouldNotFinish, LedgerBroken, UsageError
from imagekit.evidence import utc_stamp
from imagekit.ledger.file import locked
from imagekit.ledger.readback import parse
from imagekit.ledger.store import tail_problem
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
        last = result.entries[-1].line_no if result.entries else 0
        inside = [line for line in result.malformed if line.line < last]
        if inside:
            raise LedgerBroken(
                f"line {inside[0].line} of {path} is a complete line that is not a record, "
                f"with records after it; repair only moves aside what follows the last record",
                hint="look at it with `imagekit ledger verify`; an edit needs a person",
            )
        if result.malformed:
            # Lines no record chains onto (an append refuses to chain onto one): moving them
            # aside leaves the history as it was before they were written.
            first = result.malformed[0]
            moved = size - first.offset
            quarantine = path.with_name(f"{path.name}.unreadable-{utc_stamp()}-{first.offset}")
            _quarantine(fd, path, quarantine, first.offset, moved)
            count = len(result.malformed) + (result.torn is not None)
            return RepairReport(
                path,
                True,
                quarantine,
                moved,
                len(result.entries),
                f"moved {count} line(s) after the last record, from line {first.line} "
                f"({moved} bytes), that are not records to {quarantine.name}; "
                f"{len(result.entries)} complete records kept",
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
        _quarantine(fd, path, quarantine, torn.offset, torn.length)
    return RepairReport(
        path,
        True,
        quarantine,
        torn.length,
        len(result.entries),
        f"moved the torn line {torn.line} ({torn.length} bytes) to {quarantine.name}; "
        f"{len(result.entries)} complete records kept",
    )


def _quarantine(fd: int, path: Path, quarantine: Path, offset: int, length: int) -> None:
    """Copy the ledger's bytes from ``offset`` into a new ``quarantine`` file, then cut the
    ledger there. A failure (a full disk) leaves the ledger as it was and no quarantine
    file behind, not an empty or partial one beside an uncut ledger."""
    data = os.pread(fd, length, offset)
    try:
        out = os.open(quarantine, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError as exc:
        raise CouldNotFinish(f"quarantine file {quarantine} already exists") from exc
    except OSError as exc:
        raise CouldNotFinish(
            f"repairing {path} failed: cannot create {quarantine.name}: {exc.strerror}"
        ) from exc
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
            os.fsync(out)
        finally:
            os.close(out)
    except OSError as exc:
        quarantine.unlink(missing_ok=True)
        raise CouldNotFinish(
            f"repairing {path} failed: writing {quarantine.name}: {exc.strerror}; the ledger "
            "was left as it was",
            hint="free disk space beside the ledger, then `imagekit ledger repair` again",
        ) from exc
    try:
        os.ftruncate(fd, offset)
        os.fsync(fd)
    except OSError as exc:
        raise CouldNotFinish(
            f"repairing {path} failed: {exc.strerror}; its tail is also in {quarantine.name}"
        ) from exc
