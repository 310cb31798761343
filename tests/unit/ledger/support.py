"""What the ledger tests share: records written as a table, the ledger's lines, the CLI.

A history reads best as one row a record (``Rec``), appended in order by ``append_all``; the
CLI runs in a child process, as a user runs it, with no IMAGEKIT_ variable of this machine
leaking in.
"""

from __future__ import annotations

import os
import subprocess
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagekit.ledger import LedgerRecord, append_record
from imagekit.workspace import Workspace
from tests.support.cli import MAIN, run_child

DIGEST_A = "sha256:" + "a" * 64
NOTE_IMAGES = {"image": f"r/x@{DIGEST_A}"}


@dataclass(frozen=True)
class Rec:
    """One record to append, in append_record's terms."""

    kind: str
    plan: str | None
    images: dict[str, str]
    status: str
    scope: str = ""
    details: dict[str, Any] | None = None  # as append_record takes them
    evidence: Path | None = None

    def append(self, ws: Workspace) -> LedgerRecord:
        return append_record(
            ws,
            self.kind,
            plan=self.plan,
            images=self.images,
            status=self.status,
            scope=self.scope,
            evidence=self.evidence,
            details=self.details,
        )


def append_all(ws: Workspace, *records: Rec) -> list[LedgerRecord]:
    return [record.append(ws) for record in records]


def note(
    ws: Workspace, n: int, plan: str = "p", images: dict[str, str] | None = None
) -> LedgerRecord:
    return Rec("note", plan, dict(NOTE_IMAGES) if images is None else images, "ok", f"n{n}").append(
        ws
    )


def notes(ws: Workspace, count: int, images: dict[str, str] | None = None) -> None:
    for n in range(count):
        note(ws, n, images=images)


def ledger_lines(ws: Workspace) -> list[bytes]:
    return ws.ledger_path.read_bytes().splitlines(keepends=True)


def run_cli(
    ws: Workspace, *args: str, ledger: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``imagekit ARGS`` rooted at ws (and its ledger at ``ledger`` when given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEKIT_")}
    env["IMAGEKIT_ROOT"] = str(ws.root)
    if ledger is not None:
        env["IMAGEKIT_LEDGER"] = str(ledger)
    return run_child(MAIN, *args, env=env, timeout=timeout)


def peak_bytes(action: Callable[[], object]) -> int:
    """The most bytes Python held at once while ``action`` ran (allocations, not time)."""
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
