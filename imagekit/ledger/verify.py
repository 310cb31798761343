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

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from imagekit.errors import ReferenceFormatError, UsageError
from imagekit.evidence import file_digest
from imagekit.ledger.record import encode_line
from imagekit.ledger.store import Entry, Scan, evidence_path, scan
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


def read_lock_claim(path: Path) -> HeadClaim:
    """The ledger head a lock file (``imagekit ledger lock``) was written from."""
    try:
        document = json.loads(path.read_bytes())
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

    @property
    def status(self) -> VerifyStatus:
        """``ok`` only when records were there and verified; ``empty`` verifies nothing."""
        if self.problems:
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
        }


class _Findings:
    """Problems as found, each with the file line it sorts by (so the first breaks first)."""

    def __init__(self) -> None:
        self._items: list[tuple[int, Problem]] = []

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
        self._items.append((order, Problem(kind, line, seq, message)))

    def sorted(self) -> tuple[Problem, ...]:
        return tuple(p for _, p in sorted(self._items, key=lambda item: item[0]))


def _where(entry: Entry) -> str:
    return f"record seq {entry.record.seq} (line {entry.line_no})"


def _broken_link(entries: tuple[Entry, ...], i: int) -> bool:
    """Whether entry i names a prev other than the bytes of entry i-1, its seq predecessor."""
    entry, before = entries[i], entries[i - 1]
    return entry.record.seq == before.record.seq + 1 and entry.record.prev != before.digest


def _blame_prev(
    entries: tuple[Entry, ...], i: int, head: HeadClaim | None, found: _Findings
) -> bool:
    """Report why entry i does not chain to entry i-1; True when entry i+1 is explained too.

    Editing any record changes its bytes, so the record after it no longer chains: one break.
    Changing a record's own ``prev`` breaks two links, its own and the next one's, so a break
    followed by another names the record in between. The newest record has no next record:
    only its hash kept elsewhere (a head) tells whether it or the one before it changed.
    """
    entry, before = entries[i], entries[i - 1]
    rec = entry.record
    what = (
        f"its prev is {rec.prev}, but seq {before.record.seq} (line {before.line_no}) hashes "
        f"to {before.digest}"
    )
    last = i == len(entries) - 1
    if not last and _broken_link(entries, i + 1):
        found.add(
            "edited",
            f"{_where(entry)} was edited: {what}, and seq {entries[i + 1].record.seq} recorded "
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


def _check_chain(entries: tuple[Entry, ...], head: HeadClaim | None, found: _Findings) -> None:
    """Sequence numbers and ``prev`` hashes, followed from the actual bytes after a break,
    so that one edit is reported once, against the record whose bytes changed."""
    previous: Entry | None = None
    seen: set[int] = set()
    all_seqs = {entry.record.seq for entry in entries}
    explained = False  # this entry's broken prev was already blamed on the one before it
    for i, entry in enumerate(entries):
        rec = entry.record
        expected_seq = previous.record.seq + 1 if previous else 1
        where = _where(entry)
        if rec.seq in seen:
            found.add("duplicated", f"{where} repeats a sequence number already seen", entry)
        elif rec.seq > expected_seq and expected_seq in all_seqs:
            found.add(
                "reordered",
                f"{where} stands where seq {expected_seq} belongs (seq {expected_seq} "
                "comes later in the file): records were reordered",
                entry,
            )
        elif rec.seq > expected_seq:
            missing = (
                f"seq {expected_seq}"
                if rec.seq == expected_seq + 1
                else f"seq {expected_seq}..{rec.seq - 1}"
            )
            after = "" if previous is None else f" after seq {previous.record.seq}"
            found.add("deleted", f"{missing} missing before {where}: deleted{after}", entry)
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
                explained = _blame_prev(entries, i, head, found)
                seen.add(rec.seq)
                previous = entry
                continue
        elif entry.raw != encode_line(json.loads(entry.raw)):
            found.add(
                "edited",
                f"{where} is not in the form imagekit writes: it was edited by hand",
                entry,
            )
        explained = False
        seen.add(rec.seq)
        previous = entry


def _check_evidence(workspace: Workspace, entries: tuple[Entry, ...], found: _Findings) -> int:
    """Every recorded evidence file is there with the bytes it had; returns how many."""
    checked = 0
    for entry in entries:
        ref = entry.record.evidence
        if ref is None:
            continue
        checked += 1
        target = evidence_path(workspace, ref)
        if not target.is_file():
            found.add(
                "evidence-missing",
                f"evidence {ref.path} of {_where(entry)} is missing",
                entry,
            )
            continue
        actual = str(file_digest(target))
        if actual != ref.sha256:
            found.add(
                "evidence-changed",
                f"evidence {ref.path} of {_where(entry)} changed: recorded {ref.sha256}, "
                f"now {actual}",
                entry,
            )
    return checked


def _check_claim(result: Scan, claim: HeadClaim, found: _Findings) -> None:
    """The head kept elsewhere still names a record of this ledger, with the same bytes."""
    mismatch = _claim_mismatch(result.entries, claim)
    if mismatch is not None:
        message, entry = mismatch
        found.add("head-mismatch", message, entry)


def _claim_mismatch(
    entries: tuple[Entry, ...], claim: HeadClaim
) -> tuple[str, Entry | None] | None:
    """How the ledger no longer fits the claimed head, and the record that shows it; None
    when it fits."""
    last = entries[-1] if entries else None
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
    target = next((e for e in reversed(entries) if e.record.seq == claim.seq), None)
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


def verify_scan(
    workspace: Workspace, result: Scan, *, claim: HeadClaim | None = None
) -> VerifyReport:
    """Verify ledger bytes already read (``scan``): the lock renders from the same bytes."""
    found = _Findings()
    for line_no, _offset, raw in result.malformed:
        found.add(
            "malformed",
            f"line {line_no} is not a ledger record ({len(raw)} bytes): it was edited "
            "by hand or written by something else",
            line_no,
        )
    _check_chain(result.entries, claim, found)
    evidence_checked = _check_evidence(workspace, result.entries, found)
    last = result.entries[-1] if result.entries else None
    if result.torn is not None:
        torn = result.torn
        found.add(
            "torn",
            f"line {torn.line} is torn: {torn.length} bytes at offset {torn.offset} "
            "without a newline, left by an append that did not finish; "
            "`imagekit ledger repair` completes it or moves it aside",
            torn.line,
        )
    if claim is not None:
        _check_claim(result, claim, found)
    return VerifyReport(
        path=result.path,
        records=len(result.entries),
        head=last.digest if last else None,
        head_seq=last.record.seq if last else None,
        problems=found.sorted(),
        evidence_checked=evidence_checked,
    )


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
    return verify_scan(workspace, scan(workspace.ledger_path), claim=claim)
