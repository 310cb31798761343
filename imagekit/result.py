"""What every stage's result says, whatever the stage: the seam the flows chain stages by.

A stage (build, audit, push, mirror, final pull, ledger verify, preflight) returns its own
result type, which says much more about its own work; each also meets :class:`StageResult`,
so a flow (imagekit.flows.pipeline) and a script judge any stage the same way: whether it
passed (``ok``), the exit code the CLI gives the same outcome (``exit_code``: 0, 1 for a check
that said no, 3 for work that could not be finished), the evidence it wrote, the ledger
records it appended, and its JSON document (what ``--json`` prints).

Every stage is also run the same way, :class:`Runner`: ``run(workspace, request) -> result``,
with a frozen request of the stage's own; the CLI, the public API (imagekit.api) and the
pipeline call each stage so, with no adapter of their own.

A foundation: it names no stage, and a new stage meets it without touching this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from imagekit.workspace import Workspace


@runtime_checkable
class StageResult(Protocol):
    """One stage's outcome, as a flow or a script reads it."""

    @property
    def ok(self) -> bool:
        """The stage passed: its checks held, or its work was done and recorded."""

    @property
    def exit_code(self) -> int:
        """0, 1 (a check said no) or 3 (could not finish): the class of the outcome."""

    @property
    def evidence(self) -> Path | None:
        """The main file the stage wrote as evidence (a log, a report), if any."""

    @property
    def ledger_seqs(self) -> tuple[int, ...]:
        """The seqs of the ledger records the stage appended, oldest first."""

    def to_json(self) -> Any:
        """The result as one JSON document (what the command prints under ``--json``)."""


Request = TypeVar("Request", contravariant=True)
Result = TypeVar("Result", bound=StageResult, covariant=True)


class Runner(Protocol[Request, Result]):
    """How every stage is run: its module's ``run(workspace, request)``, the request a frozen
    dataclass of the stage's own (``AuditRequest``, ``MirrorRequest``...). A stage may take
    collaborators beside it as keywords with defaults (an engine, a registry client, where
    its log goes), which no caller of this shape passes."""

    def __call__(self, workspace: Workspace, request: Request, /) -> Result: ...
