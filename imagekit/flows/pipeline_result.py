"""What `imagekit pipeline` reports: each stage's status and line, and the run's result.

The statuses (docs/ARCHITECTURE.md, "Statuses"), the options one run takes, a stage's line
in the summary table (``StageOutcome``) and the whole run's ``PipelineResult``: ok and its
exit code (the failing stage's), the table, and its JSON document. imagekit.flows.pipeline
runs the stages and makes these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from imagekit.audit.vulns import VulnPolicy


class StageStatus(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    NOT_RUN = "not run"
    SKIPPED = "skipped"  # an optional stage that does not apply here, and why: counts as ok


# The members under short names, for the stage functions below.
PASSED, FAILED, ERROR, NOT_RUN, SKIPPED = StageStatus


@dataclass(frozen=True)
class PipelineOptions:
    """Where one run pushes and mirrors, and what its build and audit take instead of the
    plan's own.

    ``profile`` audits with another profile than the plan's (a name or a YAML file), e.g. one
    that says which checks a replica base cannot carry; the audit record names it.
    ``vulns`` is the audit's vulnerability database and --fail-on, as `imagekit audit` takes
    them: findings it fails on stop the run before the push.
    """

    registry: str
    mirror: str
    base_override: str | None = None
    profile: str | None = None
    vulns: VulnPolicy = field(default_factory=VulnPolicy)
    sign_key: Path | None = None  # attest every stage that proves something (imagekit/attest)


@dataclass(frozen=True)
class StageOutcome:
    stage: str
    status: StageStatus
    detail: str = ""
    digest: str | None = None
    seconds: float | None = None
    evidence: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "status": self.status,
            "detail": self.detail,
            "digest": self.digest,
            "seconds": self.seconds,
            "evidence": self.evidence,
            "data": self.data,
        }


@dataclass(frozen=True)
class PipelineResult:
    plan: str
    registry: str
    mirror: str
    stages: tuple[StageOutcome, ...]
    evidence: Path
    ledger_seq_before: int
    ledger_seq_after: int
    error: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return all(s.status in (PASSED, SKIPPED) for s in self.stages)

    @property
    def exit_code(self) -> int:
        if self.ok:
            return 0
        if self.error is not None:
            return int(self.error.get("exit_code", 3))
        # A stage that reported (not raised) "error", e.g. a mirror verdict of error.
        return 3 if any(s.status == ERROR for s in self.stages) else 1

    @property
    def ledger_seqs(self) -> tuple[int, ...]:
        """Every record the run's stages appended."""
        return tuple(range(self.ledger_seq_before + 1, self.ledger_seq_after + 1))

    @property
    def final_reference(self) -> str | None:
        pulled = next((s for s in self.stages if s.stage == "final-pull"), None)
        return pulled.data.get("reference") if pulled and pulled.status == PASSED else None

    def table(self) -> list[str]:
        """The summary table: stage, status, digest, time, evidence path."""

        def status(s: StageOutcome) -> str:
            if not s.detail or s.status == NOT_RUN:
                return s.status
            text = f"{s.status}: {s.detail}"
            return text if len(text) <= 60 else text[:57] + "..."

        rows = [("stage", "status", "digest", "time", "evidence")]
        rows.extend(
            (
                s.stage,
                status(s),
                s.digest or "-",
                f"{s.seconds:.1f}s" if s.seconds is not None else "-",
                s.evidence or "-",
            )
            for s in self.stages
        )
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        return [
            "  ".join([*(row[i].ljust(widths[i]) for i in range(4)), row[4]]).rstrip()
            for row in rows
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "registry": self.registry,
            "mirror": self.mirror,
            "ok": self.ok,
            "exit_code": self.exit_code,
            "final_reference": self.final_reference,
            "stages": [s.to_json() for s in self.stages],
            "evidence": str(self.evidence),
            "ledger_records": list(self.ledger_seqs),
            "error": self.error,
        }
