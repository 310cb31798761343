"""The ledger file: appending under a lock, reading it back byte for byte, and finding records.

See the package docstring (imagekit.ledger) for the format and the concurrency rules.
"""

from __future__ import annotations

import fcntl
import os
import socket
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from imagekit import jsondoc
from imagekit.errors import CouldNotFinish, RecordRefused, UsageError
from imagekit.evidence import file_digest
from imagekit.kinds import names
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
from imagekit.refs import Digest
from imagekit.version import __version__
from imagekit.workspace import Workspace

_READ_BACK = 64 * 1024
#: Reading streams the ledger this many bytes at a time, so memory stays bounded whatever
#: its length.
_CHUNK = 1 << 20
#: No record imagekit writes comes near this; a longer line is malformed without being held
#: in memory whole (a reader's memory must not follow a hostile line's length either).
MAX_LINE_BYTES = 16 << 20


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


def read_line(raw: bytes) -> Any:
    """One ledger line's JSON value, through the bounded reader (imagekit.jsondoc): a line
    nested too deep, with a NaN or a key twice is a ValueError like any line that is not
    JSON, never a crash."""
    return jsondoc.loads(raw, limit=MAX_LINE_BYTES)


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


_FILE_TYPES = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def _not_a_file(path: Path, mode: int) -> UsageError:
    what = _FILE_TYPES.get(stat.S_IFMT(mode), "something else")
    return UsageError(
        f"the ledger {path} is not a regular file ({what})",
        hint="point IMAGEKIT_LEDGER / --ledger at a JSON-lines file (manifests/ledger.jsonl)",
    )


def open_ledger(path: Path, flags: int) -> int:
    """An fd on the ledger file, refusing at once anything that is not a regular file.

    ``O_NONBLOCK`` makes opening a FIFO return instead of waiting for a writer; the type is
    then checked on the open descriptor (not on the name, which could change in between),
    so a FIFO, a directory or /dev/zero is bad input before a single byte is read.
    """
    try:
        fd = os.open(path, flags | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except IsADirectoryError as exc:
        raise _not_a_file(path, stat.S_IFDIR) from exc
    except OSError as exc:
        raise CouldNotFinish(
            f"cannot open the ledger {path}: {exc.strerror}",
            hint="check the path (IMAGEKIT_LEDGER / --ledger) and its permissions",
        ) from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_a_file(path, mode)
    os.set_blocking(fd, True)
    return fd


@contextmanager
def locked(path: Path, flags: int, *, shared: bool = False) -> Iterator[int]:
    """An fd on the ledger holding a flock (exclusive unless ``shared``) until the block ends.

    Inside :func:`holding` of the same ledger, the fd it holds (exclusively) is handed out
    instead: a second flock on another fd of the same file would wait for the first forever.
    """
    held = _held.get(_key(path))
    if held is not None:
        yield held
        return
    if flags & os.O_CREAT:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_ledger(path, flags)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing releases the flock


#: Ledgers held exclusively (:func:`holding`), by the holding thread and the resolved path:
#: another thread's append takes its own flock, so it waits for the holder as a process does.
_held: dict[tuple[int, Path], int] = {}


def _key(path: Path) -> tuple[int, Path]:
    return threading.get_ident(), path.resolve()


@contextmanager
def holding(path: Path) -> Iterator[None]:
    """Hold the ledger's exclusive lock across several reads and appends, so a
    read-compare-append (``ledger sync --from``: which records does it lack?) is one step:
    a second sync waits, then finds the first one's records already there. Every read and
    append inside the block uses the held fd."""
    with locked(path, os.O_RDWR | os.O_APPEND | os.O_CREAT) as fd:
        key = _key(path)
        _held[key] = fd
        try:
            yield
        finally:
            del _held[key]


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


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class TornLine:
    line: int
    offset: int
    length: int


@dataclass(frozen=True)
class Malformed:
    """A complete line that is not a record (its bytes are not kept: it may be huge)."""

    line: int
    offset: int
    length: int


#: One line as read, in file order: a record, a line that is not one, or a torn tail.
Line = Entry | Malformed | TornLine


@dataclass(frozen=True)
class Scan:
    """The ledger as read: complete entries, lines that did not parse, and a torn tail."""

    path: Path
    entries: tuple[Entry, ...]
    malformed: tuple[Malformed, ...]
    torn: TornLine | None
    size: int

    def lines(self) -> Iterator[Line]:
        """The same lines, in file order, as :func:`reading` yields them."""
        malformed = iter(self.malformed)
        pending = next(malformed, None)
        for entry in self.entries:
            while pending is not None and pending.line < entry.line_no:
                yield pending
                pending = next(malformed, None)
            yield entry
        while pending is not None:
            yield pending
            pending = next(malformed, None)
        if self.torn is not None:
            yield self.torn


def _no_ledger(path: Path) -> UsageError:
    return UsageError(
        f"no ledger at {path}",
        hint="set IMAGEKIT_LEDGER or --ledger, or record something first",
    )


@contextmanager
def reading(path: Path) -> Iterator[Iterator[Line]]:
    """The ledger's lines one at a time, under a shared lock held until the block ends.

    The shared flock waits for an append in progress, so a reader never mistakes a line
    being written for a torn one, and no append lands while the lines are read. Memory
    stays bounded whatever the ledger's length: the file is read a chunk at a time and only
    the line being parsed is held.
    """
    with passes(path) as again:
        yield again()


@contextmanager
def passes(path: Path) -> Iterator[Callable[[], Iterator[Line]]]:
    """Like :func:`reading`, for a reader that must go over the same bytes more than once.

    Each call of the yielded function streams the ledger from its first byte again; the
    shared lock is held across every pass, so no append lands between them and each pass
    reads exactly the bytes the one before it read (the lock verifies in one pass, then
    renders in two more, holding only what it shows).
    """
    if not path.exists():
        raise _no_ledger(path)
    with locked(path, os.O_RDONLY, shared=True) as fd:

        def again() -> Iterator[Line]:
            os.lseek(fd, 0, os.SEEK_SET)
            return _stream(path, fd)

        yield again


def _stream(path: Path, fd: int) -> Iterator[Line]:
    pending = bytearray()  # the start of a line whose newline has not been read yet
    skipping = 0  # bytes of an over-long line dropped so far (its end not yet read)
    offset = 0  # where the pending (or skipped) line begins
    line_no = 0
    while True:
        try:
            chunk = os.read(fd, _CHUNK)
        except OSError as exc:
            raise CouldNotFinish(f"cannot read the ledger {path}: {exc.strerror}") from exc
        if not chunk:
            break
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            if end < 0:
                if skipping or len(pending) + len(chunk) - start > MAX_LINE_BYTES:
                    skipping += len(pending) + len(chunk) - start
                    pending.clear()
                else:
                    pending += chunk[start:]
                break
            line_no += 1
            if skipping:
                length = skipping + end + 1 - start
                yield Malformed(line_no, offset, length)
            else:
                raw = bytes(pending) + chunk[start : end + 1] if pending else chunk[start : end + 1]
                length = len(raw)
                if length > MAX_LINE_BYTES:
                    yield Malformed(line_no, offset, length)
                else:
                    yield _line(line_no, offset, raw)
            pending.clear()
            skipping = 0
            offset += length
            start = end + 1
    if pending or skipping:
        yield TornLine(line=line_no + 1, offset=offset, length=len(pending) + skipping)


def _line(line_no: int, offset: int, raw: bytes) -> Entry | Malformed:
    try:
        record = LedgerRecord.from_json(read_line(raw))
    except (ValueError, ValidationError):
        return Malformed(line_no, offset, len(raw))
    return Entry(line_no=line_no, offset=offset, raw=raw, record=record)


def _collect(path: Path, lines: Iterator[Line], size: int) -> Scan:
    entries: list[Entry] = []
    malformed: list[Malformed] = []
    torn: TornLine | None = None
    for line in lines:
        if isinstance(line, Entry):
            entries.append(line)
        elif isinstance(line, Malformed):
            malformed.append(line)
        else:
            torn = line
    return Scan(path, tuple(entries), tuple(malformed), torn, size)


def scan(path: Path) -> Scan:
    """Every line at once, under a shared lock; exact bytes kept beside each parsed record.

    For what must hold the whole history (repair); :func:`reading` and :func:`passes`
    stream.
    """
    with reading(path) as lines:
        result = _collect(path, lines, 0)
    return replace(result, size=sum(_length(line) for line in result.lines()))


def _length(line: Line) -> int:
    return len(line.raw) if isinstance(line, Entry) else line.length


def parse(path: Path, data: bytes) -> Scan:
    """Split ledger bytes into complete entries, malformed lines and a torn tail."""

    def lines() -> Iterator[Line]:
        offset = 0
        line_no = 0
        while offset < len(data):
            line_no += 1
            end = data.find(b"\n", offset)
            if end < 0:
                yield TornLine(line=line_no, offset=offset, length=len(data) - offset)
                return
            yield _line(line_no, offset, data[offset : end + 1])
            offset = end + 1

    return _collect(path, lines(), len(data))


def read_records(path: Path) -> list[LedgerRecord]:
    """Every record at once; for a ledger of any length, :func:`iter_records` streams."""
    with iter_records(path) as records:
        return list(records)


@contextmanager
def iter_records(path: Path) -> Iterator[Iterator[LedgerRecord]]:
    """The ledger's records one at a time, oldest first, under a shared lock held until the
    block ends: a reader that keeps only what it looks for holds bounded memory whatever the
    ledger's length. Lines that are not records are passed over, as in :func:`read_records`;
    only ``verify`` judges them."""
    with reading(path) as lines:
        yield (line.record for line in lines if isinstance(line, Entry))


@dataclass(frozen=True)
class Skipped:
    """A line ``show`` could not list: not a record (``malformed``) or a ``torn`` tail."""

    line: int
    offset: int
    length: int
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "offset": self.offset, "length": self.length, "why": self.why}


#: How many skipped lines (or, in verify, problems) a report lists; the rest are counted.
#: A ledger of a million empty lines must not make a list of a million entries.
LISTED = 1000


@dataclass(frozen=True)
class ShowResult:
    path: Path
    records: tuple[LedgerRecord, ...]
    skipped: tuple[Skipped, ...] = ()
    skipped_not_listed: int = 0


@dataclass(frozen=True)
class ShowSummary:
    """What :func:`show_each` handed on: how many records, and the lines it skipped."""

    path: Path
    shown: int
    skipped: tuple[Skipped, ...] = ()
    skipped_not_listed: int = 0  # skipped lines beyond the first LISTED


def show(
    workspace: Workspace,
    *,
    plan: str | None = None,
    image: str | None = None,
    kind: str | None = None,
) -> ShowResult:
    """The records that match every filter given, in ledger order, and the lines skipped.

    A line that is not a record is never dropped silently: it is listed as skipped, so a
    reader knows the history shown has a gap. This holds every matching record; to list a
    ledger of any length, :func:`show_each` hands them on one at a time.
    """
    records: list[LedgerRecord] = []
    summary = show_each(workspace, records.append, plan=plan, image=image, kind=kind)
    return ShowResult(summary.path, tuple(records), summary.skipped, summary.skipped_not_listed)


def show_each(
    workspace: Workspace,
    each: Callable[[LedgerRecord], None],
    *,
    plan: str | None = None,
    image: str | None = None,
    kind: str | None = None,
) -> ShowSummary:
    """Hand each record that matches every filter to ``each``, in ledger order, as it is
    read: memory stays bounded whatever the ledger's length. The filters are checked
    before the first record is read, so bad input never comes after some output."""
    if kind is not None and kind not in names():
        raise UsageError(f"unknown record kind {kind!r}", hint="one of: " + ", ".join(names()))
    if image is not None and image.startswith("sha256:"):
        Digest(image)  # a malformed digest is bad input, not "no match"
    shown = 0
    skipped: list[Skipped] = []
    not_listed = 0
    with reading(workspace.ledger_path) as lines:
        for line in lines:
            if isinstance(line, Entry):
                record = line.record
                if (
                    (plan is None or record.plan == plan)
                    and (kind is None or record.kind == kind)
                    and (image is None or any(image in text for text in record.identifiers()))
                ):
                    each(record)
                    shown += 1
            elif len(skipped) >= LISTED:
                not_listed += 1
            elif isinstance(line, Malformed):
                skipped.append(Skipped(line.line, line.offset, line.length, "malformed"))
            else:
                skipped.append(Skipped(line.line, line.offset, line.length, "torn"))
    return ShowSummary(workspace.ledger_path, shown, tuple(skipped), not_listed)
