"""The ledger read back byte for byte: each line a record, a malformed line or a torn tail,
streamed in bounded chunks under a shared lock.

Apart from appending (store.py): the verifier, the lock, the sync and ``ledger show`` read
the file through this, and appending reads only its last lines.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from imagekit import jsondoc
from imagekit.errors import CouldNotFinish, UsageError
from imagekit.ledger.file import locked
from imagekit.ledger.record import LedgerRecord, line_hash

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
