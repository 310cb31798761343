"""The ledger file: appending under a lock, reading it back byte for byte, and finding records.

See the package docstring (imagekit.ledger) for the format and the concurrency rules.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from imagekit import __version__
from imagekit.errors import CouldNotFinish, LedgerBroken, UsageError
from imagekit.evidence import file_digest
from imagekit.ledger.record import (
    KINDS,
    SCHEMA_VERSION,
    EvidenceRef,
    LedgerRecord,
    RecordDetails,
    check_no_secrets,
    details_for,
    encode_line,
    line_hash,
)
from imagekit.refs import Digest
from imagekit.workspace import Workspace

_READ_BACK = 64 * 1024


@dataclass(frozen=True)
class Entry:
    """A complete line read back: its position, its exact bytes and the parsed record."""

    line_no: int
    offset: int
    raw: bytes
    record: LedgerRecord

    @property
    def digest(self) -> str:
        return line_hash(self.raw)


def _evidence_ref(workspace: Workspace, evidence: Path) -> EvidenceRef:
    if not evidence.is_file():
        raise UsageError(
            f"evidence file {evidence} does not exist",
            hint="write the evidence before recording it",
        )
    resolved = evidence.resolve()
    root = workspace.root.resolve()
    try:
        shown = resolved.relative_to(root).as_posix()
    except ValueError:
        shown = resolved.as_posix()
    return EvidenceRef(path=shown, sha256=str(file_digest(resolved)))


def evidence_path(workspace: Workspace, ref: EvidenceRef) -> Path:
    path = Path(ref.path)
    return path if path.is_absolute() else workspace.root / path


@contextmanager
def locked(path: Path, flags: int) -> Iterator[int]:
    """An fd on the ledger holding an exclusive flock until the block ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, flags | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise CouldNotFinish(
            f"cannot open the ledger {path}: {exc.strerror}",
            hint="check the path (IMAGEKIT_LEDGER / --ledger) and its permissions",
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing releases the flock


def _tail(fd: int) -> tuple[bytes, int]:
    """The last line of the file (newline included) and the file size.

    Reads backwards in blocks so appending stays O(1) however long the ledger grows.
    """
    size = os.fstat(fd).st_size
    if size == 0:
        return b"", 0
    chunks: list[bytes] = []
    end = size
    while end > 0:
        start = max(0, end - _READ_BACK)
        chunk = os.pread(fd, end - start, start)
        # The last line starts after the last newline that is not the file's final byte.
        search_end = len(chunk) - 1 if end == size else len(chunk)
        cut = chunk.rfind(b"\n", 0, search_end)
        if cut >= 0:
            chunks.append(chunk[cut + 1 :])
            break
        chunks.append(chunk)
        end = start
    return b"".join(reversed(chunks)), size


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
) -> LedgerRecord:
    """Append one record to the workspace's ledger, chained to the line before it.

    Safe against concurrent appenders (exclusive flock held from reading the tail to fsync)
    and refuses to chain to a torn last line: that needs ``imagekit ledger repair`` first.
    ``details`` is the kind's model (imagekit.ledger.record), or a dict that fits it.
    """
    if kind not in KINDS:
        raise UsageError(
            f"unknown ledger record kind {kind!r}",
            hint="one of: " + ", ".join(KINDS),
        )
    if not status:
        raise UsageError("a ledger record needs a status")
    if isinstance(details, dict):
        check_no_secrets(details, "record.details")
    written_details = details_for(kind, details, status)
    evidence_ref = _evidence_ref(workspace, evidence) if evidence is not None else None
    body: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "time": datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
        "kind": kind,
        "plan": plan,
        "images": dict(images),
        "status": status,
        "scope": scope,
        "evidence": evidence_ref.model_dump() if evidence_ref else None,
        "imagekit": __version__,
        "host": socket.gethostname(),
        "details": written_details,
    }
    check_no_secrets(body)
    try:
        encode_line(body)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"ledger record details are not JSON: {exc}") from exc
    path = workspace.ledger_path
    with locked(path, os.O_RDWR | os.O_APPEND | os.O_CREAT) as fd:
        last, size = _tail(fd)
        if last and not last.endswith(b"\n"):
            raise LedgerBroken(
                f"the ledger {path} ends in a torn line ({len(last)} bytes at offset "
                f"{size - len(last)} without a newline); refusing to chain to it",
                hint="run `imagekit ledger verify`, then `imagekit ledger repair`",
            )
        if last:
            try:
                previous = json.loads(last)
                seq = int(previous["seq"]) + 1
            except (ValueError, KeyError, TypeError) as exc:
                raise LedgerBroken(
                    f"the last line of the ledger {path} is not a record; refusing to chain",
                    hint="run `imagekit ledger verify` to see what changed",
                ) from exc
            prev: str | None = line_hash(last)
        else:
            seq, prev = 1, None
        document = {**body, "seq": seq, "prev": prev}
        raw = encode_line(document)
        record = LedgerRecord.from_json(json.loads(raw))
        _write_all(fd, raw, path)
    return record


def _write_all(fd: int, data: bytes, path: Path) -> None:
    view = memoryview(data)
    try:
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError as exc:
        raise CouldNotFinish(
            f"writing the ledger {path} failed: {exc.strerror}",
            hint="free disk space or fix permissions, then `imagekit ledger verify`",
        ) from exc


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class TornLine:
    line: int
    offset: int
    length: int


@dataclass(frozen=True)
class Scan:
    """The ledger as read: complete entries, lines that did not parse, and a torn tail."""

    path: Path
    entries: tuple[Entry, ...]
    malformed: tuple[tuple[int, int, bytes], ...]  # (line, offset, raw)
    torn: TornLine | None
    size: int


def scan(path: Path) -> Scan:
    """Read every line under a shared lock; keep exact bytes beside each parsed record.

    The shared flock waits for an append in progress, so a reader never mistakes a line being
    written for a torn one.
    """
    if not path.exists():
        raise UsageError(
            f"no ledger at {path}",
            hint="set IMAGEKIT_LEDGER or --ledger, or record something first",
        )
    try:
        with path.open("rb") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
            data = fh.read()
    except OSError as exc:
        raise CouldNotFinish(f"cannot read the ledger {path}: {exc.strerror}") from exc
    return parse(path, data)


def parse(path: Path, data: bytes) -> Scan:
    """Split ledger bytes into complete entries, malformed lines and a torn tail."""
    entries: list[Entry] = []
    malformed: list[tuple[int, int, bytes]] = []
    torn: TornLine | None = None
    offset = 0
    line_no = 0
    while offset < len(data):
        line_no += 1
        end = data.find(b"\n", offset)
        if end < 0:
            torn = TornLine(line=line_no, offset=offset, length=len(data) - offset)
            break
        raw = data[offset : end + 1]
        try:
            record = LedgerRecord.from_json(json.loads(raw))
        except (ValueError, ValidationError):
            malformed.append((line_no, offset, raw))
        else:
            entries.append(Entry(line_no=line_no, offset=offset, raw=raw, record=record))
        offset = end + 1
    return Scan(
        path=path,
        entries=tuple(entries),
        malformed=tuple(malformed),
        torn=torn,
        size=len(data),
    )


def read_records(path: Path) -> list[LedgerRecord]:
    return [entry.record for entry in scan(path).entries]


@dataclass(frozen=True)
class ShowResult:
    path: Path
    records: tuple[LedgerRecord, ...]


def show(
    workspace: Workspace,
    *,
    plan: str | None = None,
    image: str | None = None,
    kind: str | None = None,
) -> ShowResult:
    """The records that match every filter given, in ledger order."""
    if kind is not None and kind not in KINDS:
        raise UsageError(f"unknown record kind {kind!r}", hint="one of: " + ", ".join(KINDS))
    if image is not None and image.startswith("sha256:"):
        Digest(image)  # a malformed digest is bad input, not "no match"
    records = [
        r
        for r in read_records(workspace.ledger_path)
        if (plan is None or r.plan == plan)
        and (kind is None or r.kind == kind)
        and (image is None or any(image in text for text in r.identifiers()))
    ]
    return ShowResult(workspace.ledger_path, tuple(records))
