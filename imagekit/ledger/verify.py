"""Verifying the ledger: recompute the hash chain over the exact bytes, and every evidence hash.

The chain finds an edited, deleted or reordered record anywhere but at the end; an edit of
the newest record is only visible against its hash recorded elsewhere, which is why the
report carries the head hash, ``head=`` checks one, and ``lock=`` checks the head a lock
file was written from.

An empty ledger verifies nothing: its status is ``empty``, never ``ok``, and it is broken
when a head or a lock says records existed (emptying the file must not pass as a clean
history).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from imagekit import jsondoc
from imagekit.errors import ReferenceFormatError, UsageError
from imagekit.evidence import file_digest
from imagekit.files import read_regular
from imagekit.ledger.listing import LISTED
from imagekit.ledger.readback import Entry, Line, Malformed, Scan, read_line, reading
from imagekit.ledger.record import encode_line
from imagekit.ledger.store import evidence_path
from imagekit.refs import Digest
from imagekit.workspace import Workspace

ProblemKind = Literal[
    "torn",
    "malformed",
    "edited",
    "deleted",
    "reordered",
    "duplicated",
    "head-mismatch",
    "evidence-missing",
    "evidence-changed",
]


@dataclass(frozen=True)
class Problem:
    """One thing verify found; ``line`` is 1-based, ``seq`` the record's number if known."""

    kind: ProblemKind
    line: int | None
    seq: int | None
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "line": self.line, "seq": self.seq, "message": self.message}


VerifyStatus = Literal["ok", "empty", "broken"]


@dataclass(frozen=True)
class HeadClaim:
    """What something kept outside the ledger says its head was: a hash, and (from a lock
    file) the seq it belonged to and how many records there were."""

    head: Digest
    seq: int | None = None
    records: int | None = None
    source: str = "--head"


#: A lock file lists a plan's images and their verdicts: far under this.
_MAX_LOCK = 16 << 20


def read_lock_claim(path: Path) -> HeadClaim:
    """The ledger head a lock file (``imagekit ledger lock``) was written from."""
    try:
        document = jsondoc.loads(read_regular(path, "lock file", limit=_MAX_LOCK), limit=_MAX_LOCK)
        ledger = document["ledger"]
        head, seq, records = ledger["head"], ledger["head_seq"], ledger["records"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f"{path} is not a lock file written by `imagekit ledger lock`",
            hint="give the lock file (e.g. manifests/images.lock.json) as --lock",
        ) from exc
    if not isinstance(seq, int) or not isinstance(records, int) or not isinstance(head, str):
        raise UsageError(f"{path}: ledger.head, head_seq and records are missing or malformed")
    return HeadClaim(Digest(head), seq, records, source=f"the lock {path}")


@dataclass(frozen=True)
class VerifyReport:
    path: Path
    records: int
    head: str | None
    head_seq: int | None
    problems: tuple[Problem, ...] = field(default_factory=tuple)
    evidence_checked: int = 0
    problems_not_listed: int = 0  # found beyond the first LISTED, counted only

    @property
    def status(self) -> VerifyStatus:
        """``ok`` only when records were there and verified; ``empty`` verifies nothing."""
        if self.problems or self.problems_not_listed:
            return "broken"
        return "ok" if self.records else "empty"

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def exit_code(self) -> int:
        """1 for a broken ledger, and for an empty one: it verifies nothing."""
        return 0 if self.ok else 1

    @property
    def evidence(self) -> Path:
        """What was verified: the ledger itself (verifying appends nothing)."""
        return self.path

    ledger_seqs: ClassVar[tuple[int, ...]] = ()

    @property
    def first(self) -> Problem | None:
        return self.problems[0] if self.problems else None

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger": str(self.path),
            "ok": self.ok,
            "status": self.status,
            "records": self.records,
            "head": self.head,
            "head_seq": self.head_seq,
            "evidence_checked": self.evidence_checked,
            "first_problem": self.first.to_json() if self.first else None,
            "problems": [p.to_json() for p in self.problems],
            "problems_not_listed": self.problems_not_listed,
        }


class _Findings:
    """Problems as found, each with the file line it sorts by (so the first breaks first).

    Only the first LISTED (by line) are kept; the rest are counted, so a ledger of a million
    broken lines is reported in bounded memory, its first problems named.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Problem | _Pending]] = []  # max-heap by negated order
        self._count = 0

    def add(
        self, kind: ProblemKind, message: str, of: Entry | int | None, *, at: int | None = None
    ) -> None:
        """Record a problem of a record (its line and seq), of a line that holds none, or
        (None) of the ledger as a whole.

        ``at`` is the line the problem sorts by when it is not the problem's own line (an
        edit is found on the line after the edited one).
        """
        line, seq = (of, None) if not isinstance(of, Entry) else (of.line_no, of.record.seq)
        order = at if at is not None else (line or 0)
        self._keep(order, Problem(kind, line, seq, message))

    def _keep(self, order: int, item: Problem | _Pending) -> None:
        self._count += 1
        entry = (-order, -self._count, item)
        if len(self._heap) < LISTED:
            heapq.heappush(self._heap, entry)
        elif entry > self._heap[0]:
            heapq.heapreplace(self._heap, entry)

    def pending(self, item: _Pending) -> None:
        """A problem whose kind is decided once every line was read."""
        self._keep(item.line, item)

    def sorted(self, seen: _Seqs) -> tuple[tuple[Problem, ...], int]:
        """The problems kept, in file order, and how many more were found."""
        kept = sorted(self._heap, key=lambda item: (-item[0], -item[1]))
        problems = tuple(
            item.resolve(seen) if isinstance(item, _Pending) else item for _, _, item in kept
        )
        return problems, self._count - len(problems)


@dataclass(frozen=True)
class _Pending:
    """A record whose seq skips ahead: records were deleted, or (when the missing seq comes
    later in the file) reordered; which one is known only at the end."""

    line: int
    seq: int
    where: str
    expected: int
    after: int | None

    def resolve(self, seen: _Seqs) -> Problem:
        if self.expected in seen:
            return Problem(
                "reordered",
                self.line,
                self.seq,
                f"{self.where} stands where seq {self.expected} belongs (seq {self.expected} "
                "comes later in the file): records were reordered",
            )
        missing = (
            f"seq {self.expected}"
            if self.seq == self.expected + 1
            else f"seq {self.expected}..{self.seq - 1}"
        )
        after = "" if self.after is None else f" after seq {self.after}"
        return Problem(
            "deleted", self.line, self.seq, f"{missing} missing before {self.where}: deleted{after}"
        )


class _Seqs:
    """The sequence numbers seen: a bitmap for those a ledger of up to 2**27 records has (16
    MiB at most, one bit a record), a set for the others (each one a problem already)."""

    _BITS = 1 << 27

    def __init__(self) -> None:
        self._bits = bytearray()
        self._others: set[int] = set()

    def add(self, seq: int) -> None:
        if 0 <= seq < self._BITS:
            byte = seq >> 3
            if byte >= len(self._bits):
                self._bits.extend(bytes(max(byte + 1 - len(self._bits), len(self._bits))))
            self._bits[byte] |= 1 << (seq & 7)
        else:
            self._others.add(seq)

    def __contains__(self, seq: int) -> bool:
        if 0 <= seq < self._BITS:
            byte = seq >> 3
            return byte < len(self._bits) and bool(self._bits[byte] & (1 << (seq & 7)))
        return seq in self._others


def _where(entry: Entry) -> str:
    return f"record seq {entry.record.seq} (line {entry.line_no})"


def _broken_link(entry: Entry, before: Entry) -> bool:
    """Whether ``entry`` names a prev other than the bytes of ``before``, its seq
    predecessor."""
    return entry.record.seq == before.record.seq + 1 and entry.record.prev != before.digest


def _blame_prev(
    entry: Entry, before: Entry, after: Entry | None, head: HeadClaim | None, found: _Findings
) -> bool:
    """Report why ``entry`` does not chain to ``before``; True when ``after`` is explained too.

    Editing any record changes its bytes, so the record after it no longer chains: one break.
    Changing a record's own ``prev`` breaks two links, its own and the next one's, so a break
    followed by another names the record in between. The newest record has no next record:
    only its hash kept elsewhere (a head) tells whether it or the one before it changed.
    """
    rec = entry.record
    what = (
        f"its prev is {rec.prev}, but seq {before.record.seq} (line {before.line_no}) hashes "
        f"to {before.digest}"
    )
    last = after is None
    if after is not None and _broken_link(after, entry):
        found.add(
            "edited",
            f"{_where(entry)} was edited: {what}, and seq {after.record.seq} recorded "
            f"another hash for it",
            entry,
        )
        return True
    if last and head is None:
        found.add(
            "edited",
            f"{_where(entry)} does not chain: {what}; either seq {before.record.seq} or the prev "
            f"of seq {rec.seq} was edited, which only the newest record's hash kept elsewhere "
            "can tell (`imagekit ledger verify --head HASH` or `--lock FILE`)",
            entry,
        )
    elif last and head is not None and head.seq in (None, rec.seq) and head.head != entry.digest:
        found.add("edited", f"{_where(entry)} was edited: {what}", entry)
    else:
        found.add(
            "edited",
            f"record seq {before.record.seq} (line {before.line_no}) was edited: its bytes hash "
            f"to {before.digest}, but seq {rec.seq} recorded {rec.prev}",
            before,
            at=entry.line_no,
        )
    return False


class _Chain:
    """Sequence numbers and ``prev`` hashes, followed from the actual bytes after a break,
    so that one edit is reported once, against the record whose bytes changed.

    Fed one entry at a time and judging each once the next is known (a one-record window),
    it holds three records whatever the ledger's length, and the seqs seen as bits.
    """

    def __init__(self, head: HeadClaim | None, found: _Findings) -> None:
        self.head = head
        self.found = found
        self.seen = _Seqs()
        self.previous: Entry | None = None
        self.waiting: Entry | None = None  # read, judged once the next one is known
        self.explained = False  # the waiting entry's broken prev was blamed on the one before

    def feed(self, entry: Entry) -> None:
        if self.waiting is not None:
            self._judge(self.waiting, entry)
        self.waiting = entry

    def finish(self) -> None:
        if self.waiting is not None:
            self._judge(self.waiting, None)
            self.waiting = None

    def _judge(self, entry: Entry, after: Entry | None) -> None:
        rec = entry.record
        previous = self.previous
        expected_seq = previous.record.seq + 1 if previous else 1
        where = _where(entry)
        found = self.found
        explained, self.explained = self.explained, False
        if rec.seq in self.seen:
            found.add("duplicated", f"{where} repeats a sequence number already seen", entry)
        elif rec.seq > expected_seq:
            found.pending(
                _Pending(
                    entry.line_no,
                    rec.seq,
                    where,
                    expected_seq,
                    previous.record.seq if previous else None,
                )
            )
        elif rec.seq < expected_seq:
            found.add(
                "reordered",
                f"{where} comes after seq {previous.record.seq if previous else 0}: "
                "records were reordered",
                entry,
            )
        elif previous is None and rec.prev is not None:
            found.add("edited", f"{where} is the first record but names a previous one", entry)
        elif previous is not None and rec.prev != previous.digest:
            if not explained:
                self.explained = _blame_prev(entry, previous, after, self.head, found)
        elif entry.raw != encode_line(read_line(entry.raw)):
            found.add(
                "edited",
                f"{where} is not in the form imagekit writes: it was edited by hand",
                entry,
            )
        self.seen.add(rec.seq)
        self.previous = entry


def _check_evidence(workspace: Workspace, entry: Entry, found: _Findings) -> bool:
    """The record's evidence file is there with the bytes it had; True when it names one."""
    ref = entry.record.evidence
    if ref is None:
        return False
    target = evidence_path(workspace, ref)
    if not target.is_file():
        found.add("evidence-missing", f"evidence {ref.path} of {_where(entry)} is missing", entry)
        return True
    actual = str(file_digest(target))
    if actual != ref.sha256:
        found.add(
            "evidence-changed",
            f"evidence {ref.path} of {_where(entry)} changed: recorded {ref.sha256}, now {actual}",
            entry,
        )
    return True


def _claim_mismatch(
    last: Entry | None, target: Entry | None, claim: HeadClaim
) -> tuple[str, Entry | None] | None:
    """How the ledger no longer fits the claimed head, and the record that shows it; None
    when it fits. ``target`` is the last record of the claim's seq, if it has one."""
    counted = f" from {claim.records} records" if claim.records is not None else ""
    if last is None:
        return (
            f"the ledger is empty, but {claim.source} was written{counted} with head "
            f"{claim.head}: its records were removed",
            None,
        )
    if claim.seq is None:
        if last.digest == claim.head:
            return None
        return (
            f"the newest record hashes to {last.digest}, not the expected head "
            f"{claim.head}: it was edited, or records were removed from the end",
            last,
        )
    if target is None:
        return (
            f"{claim.source} was written{counted} with head seq {claim.seq}, which the "
            f"ledger no longer has (its newest is seq {last.record.seq}): records were removed",
            last,
        )
    if target.digest != claim.head:
        return (
            f"{_where(target)} hashes to {target.digest}, not the head {claim.head} that "
            f"{claim.source} was written from: it was edited",
            target,
        )
    return None


def verify_lines(
    workspace: Workspace, path: Path, lines: Iterable[Line], *, claim: HeadClaim | None = None
) -> VerifyReport:
    """Verify the ledger's lines as they are read, in file order: the chain, every evidence
    file and the claimed head, holding a few records at a time whatever the length."""
    found = _Findings()
    chain = _Chain(claim, found)
    records = 0
    evidence_checked = 0
    last: Entry | None = None
    target: Entry | None = None  # the last record of the claimed head's seq
    for line in lines:
        if isinstance(line, Entry):
            records += 1
            chain.feed(line)
            evidence_checked += _check_evidence(workspace, line, found)
            last = line
            if claim is not None and line.record.seq == claim.seq:
                target = line
        elif isinstance(line, Malformed):
            found.add(
                "malformed",
                f"line {line.line} is not a ledger record ({line.length} bytes): it was edited "
                "by hand or written by something else",
                line.line,
            )
        else:
            found.add(
                "torn",
                f"line {line.line} is torn: {line.length} bytes at offset {line.offset} "
                "without a newline, left by an append that did not finish; "
                "`imagekit ledger repair` completes it or moves it aside",
                line.line,
            )
    chain.finish()
    if claim is not None:
        mismatch = _claim_mismatch(last, target, claim)
        if mismatch is not None:
            message, entry = mismatch
            found.add("head-mismatch", message, entry)
    problems, not_listed = found.sorted(chain.seen)
    return VerifyReport(
        path=path,
        records=records,
        head=last.digest if last else None,
        head_seq=last.record.seq if last else None,
        problems=problems,
        problems_not_listed=not_listed,
        evidence_checked=evidence_checked,
    )


def verify_scan(
    workspace: Workspace, result: Scan, *, claim: HeadClaim | None = None
) -> VerifyReport:
    """Verify ledger bytes already read (``scan``): the lock renders from the same bytes."""
    return verify_lines(workspace, result.path, result.lines(), claim=claim)


def verify(
    workspace: Workspace, *, head: str | None = None, lock: Path | None = None
) -> VerifyReport:
    """Recompute the chain over the exact bytes and every evidence hash; list what broke.

    ``head`` is the hash the newest record must have; ``lock`` a lock file whose head record
    must still be there with the same bytes. A malformed head is bad input (UsageError),
    checked before the ledger is read. Problems come in file order, so the first one names
    the first record that breaks.
    """
    if head is not None and lock is not None:
        raise UsageError("give --head or --lock, not both")
    claim = None
    if head is not None:
        try:
            claim = HeadClaim(Digest(head))
        except ReferenceFormatError as exc:
            raise ReferenceFormatError(
                f"--head {head!r} is not a ledger head: {exc.message}",
                hint="give the sha256:... that `imagekit ledger verify` printed, or --lock FILE",
            ) from exc
    if lock is not None:
        claim = read_lock_claim(lock)
    with reading(workspace.ledger_path) as lines:
        return verify_lines(workspace, workspace.ledger_path, lines, claim=claim)
