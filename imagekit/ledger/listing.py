"""Finding records: ``ledger show``'s filters over the records read back, and the lines it
could not list, said rather than dropped.

Apart from reading (readback.py), which hands every line on: this is what a person asks of
them, and what verify shares with it (how many skipped lines a report lists).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagekit.errors import UsageError
from imagekit.kinds import names
from imagekit.ledger.readback import Entry, Malformed, reading
from imagekit.ledger.record import LedgerRecord
from imagekit.refs import Digest
from imagekit.workspace import Workspace


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
