"""One ledger as an object: append, read, verify, lock and repair it through one handle.

The functions beside this module (``store.append_record``, ``verify.verify``,
``lockfile.write_lock``, ``repair.repair``) each take a workspace; a script that works with
one ledger holds a :class:`Ledger` instead and does not need to know which module does what.
Nothing here adds behaviour: each method is the function of the same name, so the CLI and a
script that share a ledger see the same records, refusals and reports.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from imagekit.ledger.lockfile import LockResult, write_lock
from imagekit.ledger.readback import read_records
from imagekit.ledger.record import LedgerRecord, RecordDetails
from imagekit.ledger.repair import RepairReport, repair
from imagekit.ledger.store import append_record
from imagekit.ledger.verify import VerifyReport, verify
from imagekit.workspace import Workspace


class Ledger:
    """The ledger of ``workspace`` (None: the current directory's, moved by ``IMAGEKIT_*``).

    ``Ledger(workspace).records()`` reads what was recorded, ``verify()`` says whether the
    chain and every evidence file still hold (``.ok``), ``append(...)`` adds a record chained
    to the last one, ``lock(...)`` renders the image lock from a ledger that verifies, and
    ``repair()`` completes or moves aside a torn last line.
    """

    def __init__(self, workspace: Workspace | None = None) -> None:
        self.workspace = workspace or Workspace.from_env()

    @property
    def path(self) -> Path:
        return self.workspace.ledger_path

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    def append(
        self,
        kind: str,
        *,
        status: str,
        scope: str,
        images: dict[str, str] | None = None,
        plan: str | None = None,
        evidence: Path | None = None,
        details: RecordDetails | dict[str, Any] | None = None,
    ) -> LedgerRecord:
        """Append one record; RecordRefused (nothing written) when the ledger's end does not
        verify, UsageError for an unknown kind, details that do not fit it, or a secret."""
        return append_record(
            self.workspace,
            kind,
            plan=plan,
            images=images or {},
            status=status,
            scope=scope,
            evidence=evidence,
            details=details,
        )

    def records(self) -> list[LedgerRecord]:
        """Every line that parses as a record, oldest first; UsageError when there is no
        ledger. Reading proves nothing about the chain: ``verify()`` does."""
        return read_records(self.path)

    def __iter__(self) -> Iterator[LedgerRecord]:
        return iter(self.records())

    def verify(self, *, head: str | None = None, lock: Path | None = None) -> VerifyReport:
        """Recompute the chain and every evidence hash; ``head`` or ``lock`` pins the newest."""
        return verify(self.workspace, head=head, lock=lock)

    def lock(self, output: Path | None = None) -> LockResult:
        """The image lock rendered from the records (written to ``output`` when given);
        LedgerBroken when the ledger does not verify or is empty."""
        return write_lock(self.workspace, output)

    def repair(self) -> RepairReport:
        """Complete or move aside a torn last line; LedgerBroken for anything a person must
        look at (an edited, deleted or reordered record)."""
        return repair(self.workspace)
