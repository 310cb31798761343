"""Every stage's result meets StageResult: ok, exit_code, evidence, ledger_seqs, to_json.

mypy holds the types where a flow chains them (imagekit.flows.pipeline hands each stage's
result on as a StageResult); this holds the members on every result type, including those no
flow chains yet, so a new member of the seam fails here for the result that lacks it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.audit.stage import AuditResult
from imagekit.builders.assemble import AssembleResult
from imagekit.builders.buildkit import BuildResult
from imagekit.builders.push import PushResult
from imagekit.flows.doctor import DoctorReport
from imagekit.flows.pipeline import PipelineResult
from imagekit.ledger.verify import VerifyReport
from imagekit.mirror import MirrorReport
from imagekit.pull import ContainerdPullResult, PullResult
from imagekit.result import StageResult

MEMBERS = [m for m in vars(StageResult) if not m.startswith("_")]


def test_the_seam_is_these_five() -> None:
    assert sorted(MEMBERS) == ["evidence", "exit_code", "ledger_seqs", "ok", "to_json"]


@pytest.mark.parametrize(
    "cls",
    [
        AuditResult,
        AssembleResult,
        BuildResult,
        PushResult,
        DoctorReport,
        PipelineResult,
        VerifyReport,
        MirrorReport,
        PullResult,
        ContainerdPullResult,
    ],
)
def test_every_stage_result_meets_it(cls: type) -> None:
    fields = getattr(cls, "__dataclass_fields__", {})
    missing = [m for m in MEMBERS if not hasattr(cls, m) and m not in fields]
    assert not missing, f"{cls.__name__} lacks {missing}"


def test_a_verify_report_says_what_it_read_and_appends_nothing() -> None:
    report = VerifyReport(path=Path("ledger.jsonl"), records=0, head=None, head_seq=None)
    assert isinstance(report, StageResult)
    assert (report.ok, report.exit_code, report.evidence, report.ledger_seqs) == (
        False,
        1,
        Path("ledger.jsonl"),
        (),
    )
