"""The ledger file appended to: a record chained onto a whole last line, under the lock, and
how a record names its evidence.

Reading it back is imagekit.ledger.readback, finding records imagekit.ledger.listing, holding the
file imagekit.ledger.file. See the package docstring (imagekit.ledger) for the format and the
concurrency rules.
"""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from imagekit.errors import CouldNotFinish, RecordRefused, UsageError
from imagekit.evidence import file_digest
from imagekit.kinds import names
from imagekit.ledger.file import locked
from imagekit.ledger.readback import MAX_LINE_BYTES, read_line
from imagekit.ledger.record import (
    SCHEMA_VERSION,
    EvidenceRef,
    LedgerRecord,
    RecordDetails,
    check_no_secrets,
    details_for,
    encode_line,
    line_hash,
)
from imagekit.version import __version__
from imagekit.workspace import Workspace

_READ_BACK = 64 * 1024


def _evidence_ref(workspace: Workspace, evidence: Path) -> EvidenceRef:
    if not evidence.is_file():
        raise UsageError(
            f"evidence file {evidence} does not exist",
            hint="write the evidence before recording it",
        )
    return EvidenceRef(path=_shown(workspace, evidence), sha256=str(file_digest(evidence)))


def _shown(workspace: Workspace, evidence: Path) -> str:
    """How a record names its evidence: its path under the workspace's root, as written
    there (an ``evidence/`` that is a link to another disk stays ``evidence/...``), else as
    resolved; absolute only for evidence kept outside the root on purpose (IMAGEKIT_*)."""
    written = Path(os.path.abspath(evidence))
    for path, root in (
        (written, Path(os.path.abspath(workspace.root))),
        (evidence.resolve(), workspace.root.resolve()),
    ):
        if path.is_relative_to(root):
            return path.relative_to(root).as_posix()
    return evidence.resolve().as_posix()


def within_root(named: str) -> bool:
    """Whether a record's evidence path stays inside the workspace as written: relative,
    and never climbing out through ``..``."""
    if os.path.isabs(named):
        return False
    normal = os.path.normpath(named)
    return normal != ".." and not normal.startswith("../")


def evidence_path(workspace: Workspace, ref: EvidenceRef) -> Path:
    path = Path(ref.path)
    return path if path.is_absolute() else workspace.root / path


def last_lines(fd: int) -> tuple[bytes | None, bytes, int]:
    """The line before the last (None if there is none), the last line, and the file size.

    Lines keep their newline (a torn last line has none). Reads backwards in blocks, so
    appending stays O(1) however long the ledger grows.
    """
    size = os.fstat(fd).st_size
    if size == 0:
        return None, b"", 0
    data = b""
    start = size
    # Two line starts are needed: after the second-to-last newline that is not the final byte.
    while start > 0 and data[:-1].count(b"\n") < 2:
        begin = max(0, start - _READ_BACK)
        data = os.pread(fd, start - begin, begin) + data
        start = begin
    lines = data.splitlines(keepends=True)
    if start > 0:
        lines = lines[1:]  # the first block began inside a line
    return (lines[-2] if len(lines) >= 2 else None), lines[-1], size


def tail_problem(previous: bytes | None, last: bytes, size: int) -> str | None:
    """Why nothing may chain onto this ledger's last line, or None when a record may.

    The last line must be whole, a record, in the form imagekit writes, and chained to the
    line before it; a new record chained to anything else would vouch for a history that
    no longer verifies.
    """
    at = size - len(last)
    if not last.endswith(b"\n"):
        return (
            f"it ends in a torn line ({len(last)} bytes at offset {at} without a newline), "
            "left by an append that did not finish"
        )
    try:
        record = LedgerRecord.from_json(read_line(last))
    except (ValueError, ValidationError):
        return f"its last line (at offset {at}) is not a ledger record"
    if encode_line(read_line(last)) != last:
        return f"its last record (seq {record.seq}) is not in the form imagekit writes: edited"
    if previous is None:
        if record.seq != 1 or record.prev is not None:
            return f"its only record is seq {record.seq}: the records before it were removed"
        return None
    try:
        before = LedgerRecord.from_json(read_line(previous))
    except (ValueError, ValidationError):
        return "the line before its last is not a ledger record: the last cannot be chained"
    if record.seq == before.seq:
        return f"its last record repeats seq {record.seq} of the line before it: duplicated"
    if record.seq != before.seq + 1:
        return f"its last record is seq {record.seq} right after seq {before.seq}"
    if record.prev != line_hash(previous):
        return (
            f"its last record (seq {record.seq}) does not chain to seq {before.seq}: its prev "
            f"is {record.prev}, that line hashes to {line_hash(previous)}"
        )
    return None


def append_record(
    workspace: Workspace,
    kind: str,
    *,
    plan: str | None,
    images: dict[str, str],
    status: str,
    scope: str,
    evidence: Path | None = None,
    details: RecordDetails | dict[str, Any] | None = None,
    made: tuple[str, str] | None = None,
) -> LedgerRecord:
    """Append one record to the workspace's ledger, chained to the line before it.

    ``made`` is (time, host) of a record made elsewhere and merged here (imagekit.ledger.sync:
    a CI job's ledger piece), which keeps when and where it was made; otherwise now and here.

    Safe against concurrent appenders (exclusive flock held from reading the tail to fsync).
    Refuses (RecordRefused, nothing written) to chain onto a last line that does not verify:
    torn, not a record, edited, duplicated or not chained to the line before it.
    ``details`` is the kind's model (imagekit.ledger.record), or a dict that fits it.
    """
    if kind not in names():
        raise UsageError(
            f"unknown ledger record kind {kind!r}",
            hint="one of: " + ", ".join(names()),
        )
    if not status:
        raise UsageError("a ledger record needs a status")
    if isinstance(details, dict):
        check_no_secrets(details, "record.details")
    written_details = details_for(kind, details, status)
    evidence_ref = _evidence_ref(workspace, evidence) if evidence is not None else None
    body: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "time": made[0]
        if made
        else datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
        "kind": kind,
        "plan": plan,
        "images": dict(images),
        "status": status,
        "scope": scope,
        "evidence": evidence_ref.model_dump() if evidence_ref else None,
        "imagekit": __version__,
        "host": made[1] if made else socket.gethostname(),
        "details": written_details,
    }
    check_no_secrets(body)
    try:
        encoded = encode_line(body)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"ledger record details are not JSON: {exc}") from exc
    if len(encoded) > MAX_LINE_BYTES - 4096:  # room for seq and prev
        raise UsageError(
            f"a {kind} record of {len(encoded)} bytes is longer than a ledger line may be "
            f"({MAX_LINE_BYTES} bytes)",
            hint="keep large output in the evidence file the record names",
        )
    path = workspace.ledger_path
    with locked(path, os.O_RDWR | os.O_APPEND | os.O_CREAT) as fd:
        previous, last, size = last_lines(fd)
        problem = tail_problem(previous, last, size) if last else None
        if problem is not None:
            raise RecordRefused(
                f"refusing to record {kind}: the ledger {path} does not verify at its end: "
                f"{problem}",
                ledger=str(path),
                problem=problem,
                hint="nothing was recorded; `imagekit ledger verify` names every problem, and "
                "`imagekit ledger repair` completes or moves aside a torn last line and lines "
                "that are not records after the last record (an edited or duplicated record "
                "needs a person)",
            )
        if last:
            seq = int(read_line(last)["seq"]) + 1
            prev: str | None = line_hash(last)
        else:
            seq, prev = 1, None
        document = {**body, "seq": seq, "prev": prev}
        raw = encode_line(document)
        record = LedgerRecord.from_json(read_line(raw))
        _write_all(fd, raw, path, size)
    return record


def _write_all(fd: int, data: bytes, path: Path, size: int) -> None:
    """Write one line at the end of the ledger (``size`` bytes before it), or none of it.

    A write cut short (a full disk: ENOSPC after part of the line) is rolled back: the
    ledger is cut to its old length, still under the lock, so no torn line is left to
    refuse every later append. Only when even that fails is the torn line left, for
    ``imagekit ledger repair``.
    """
    view = memoryview(data)
    try:
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError as exc:
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        except OSError:
            left = "; a torn line may be left: `imagekit ledger repair` moves it aside"
        else:
            left = "; nothing was recorded (the ledger is as it was)"
        raise CouldNotFinish(
            f"writing the ledger {path} failed: {exc.strerror}{left}",
            hint="free disk space or fix permissions, then run it again",
        ) from exc
