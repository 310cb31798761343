"""Verifying the ledger: recompute the hash chain over the exact bytes, and every evidence hash.

The chain finds an edited, deleted or reordered record anywhere but at the end; an edit of
the newest record is only visible against its hash recorded elsewhere, which is why the
report carries the head hash, ``head=`` checks one, and the lock file carries it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from imagekit.evidence import file_digest
from imagekit.ledger.record import encode_line
from imagekit.ledger.store import Entry, evidence_path, scan
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


@dataclass(frozen=True)
class VerifyReport:
    path: Path
    records: int
    head: str | None
    head_seq: int | None
    problems: tuple[Problem, ...] = field(default_factory=tuple)
    evidence_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def first(self) -> Problem | None:
        return self.problems[0] if self.problems else None

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger": str(self.path),
            "ok": self.ok,
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
        self,
        kind: ProblemKind,
        message: str,
        *,
        entry: Entry | None = None,
        line: int | None = None,
        seq: int | None = None,
        at: int | None = None,
    ) -> None:
        """Record a problem of ``entry`` (its line and seq), or of an explicit line/seq.

        ``at`` is the line the problem sorts by when it is not the problem's own line (an
        edit is found on the line after the edited one).
        """
        if entry is not None:
            line = entry.line_no if line is None else line
            seq = entry.record.seq if seq is None else seq
        order = at if at is not None else (line or 0)
        self._items.append((order, Problem(kind, line, seq, message)))

    def sorted(self) -> tuple[Problem, ...]:
        return tuple(p for _, p in sorted(self._items, key=lambda item: item[0]))


def _where(entry: Entry) -> str:
    return f"record seq {entry.record.seq} (line {entry.line_no})"


def _check_chain(entries: tuple[Entry, ...], found: _Findings) -> None:
    """Sequence numbers and ``prev`` hashes, followed from the actual bytes after a break,
    so that one edit is reported once."""
    previous: Entry | None = None
    seen: set[int] = set()
    all_seqs = {entry.record.seq for entry in entries}
    for entry in entries:
        rec = entry.record
        expected_seq = previous.record.seq + 1 if previous else 1
        where = _where(entry)
        if rec.seq in seen:
            found.add("duplicated", f"{where} repeats a sequence number already seen", entry=entry)
        elif rec.seq > expected_seq and expected_seq in all_seqs:
            found.add(
                "reordered",
                f"{where} stands where seq {expected_seq} belongs (seq {expected_seq} "
                "comes later in the file): records were reordered",
                entry=entry,
            )
        elif rec.seq > expected_seq:
            missing = (
                f"seq {expected_seq}"
                if rec.seq == expected_seq + 1
                else f"seq {expected_seq}..{rec.seq - 1}"
            )
            after = "" if previous is None else f" after seq {previous.record.seq}"
            found.add("deleted", f"{missing} missing before {where}: deleted{after}", entry=entry)
        elif rec.seq < expected_seq:
            found.add(
                "reordered",
                f"{where} comes after seq {previous.record.seq if previous else 0}: "
                "records were reordered",
                entry=entry,
            )
        elif rec.prev != (previous.digest if previous else None):
            if previous is None:
                found.add(
                    "edited", f"{where} is the first record but names a previous one", entry=entry
                )
            else:
                found.add(
                    "edited",
                    f"record seq {previous.record.seq} (line {previous.line_no}) was edited: "
                    f"its bytes hash to {previous.digest}, but seq {rec.seq} recorded {rec.prev}",
                    entry=previous,
                    at=entry.line_no,
                )
        elif entry.raw != encode_line(json.loads(entry.raw)):
            found.add(
                "edited",
                f"{where} is not in the form imagekit writes: it was edited by hand",
                entry=entry,
            )
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
                entry=entry,
            )
            continue
        actual = str(file_digest(target))
        if actual != ref.sha256:
            found.add(
                "evidence-changed",
                f"evidence {ref.path} of {_where(entry)} changed: recorded {ref.sha256}, "
                f"now {actual}",
                entry=entry,
            )
    return checked


def verify(workspace: Workspace, *, head: str | None = None) -> VerifyReport:
    """Recompute the chain over the exact bytes and every evidence hash; list what broke.

    Problems come in file order, so the first one names the first record that breaks.
    """
    path = workspace.ledger_path
    result = scan(path)
    found = _Findings()
    for line_no, _offset, raw in result.malformed:
        found.add(
            "malformed",
            f"line {line_no} is not a ledger record ({len(raw)} bytes): it was edited "
            "by hand or written by something else",
            line=line_no,
        )
    _check_chain(result.entries, found)
    evidence_checked = _check_evidence(workspace, result.entries, found)
    last = result.entries[-1] if result.entries else None
    if result.torn is not None:
        torn = result.torn
        found.add(
            "torn",
            f"line {torn.line} is torn: {torn.length} bytes at offset {torn.offset} "
            "without a newline, left by an append that did not finish; "
            "`imagekit ledger repair` moves it aside",
            line=torn.line,
        )
    if head is not None and (last is None or last.digest != head):
        found.add(
            "head-mismatch",
            f"the newest record hashes to {last.digest if last else None}, "
            f"not the expected head {head}: it was edited, or records were "
            "removed from the end",
            entry=last,
        )
    return VerifyReport(
        path=path,
        records=len(result.entries),
        head=last.digest if last else None,
        head_seq=last.record.seq if last else None,
        problems=found.sorted(),
        evidence_checked=evidence_checked,
    )
