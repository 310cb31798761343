"""docs/ARCHITECTURE.md's "Adding a stage", held to the truth by adding one: a toy stage.

Everything the toy needs is in this module: its kind (a spec, registered by its line in
``KINDS``), its request and its run (``run(workspace, request)``, its process started
through the runner seam, ending through the one sign-record-attach function), its row in
the pipeline (one ``Stage`` in ``PIPELINE``, its run a ``Chained``) and its command in the
CLI's table (``_COMMANDS``, this module its command's module). No other file is touched:
the registrations are the lines the page names, made here for the length of a test, and
the ledger, the pipeline and ``imagekit --help`` take the stage in as they take the others.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import imagekit.cli
import imagekit.kinds
from imagekit import evidence
from imagekit.attest.seal import sign_record_attach
from imagekit.cli.contract import run as run_command
from imagekit.cli.options import json_option
from imagekit.flows import pipeline
from imagekit.flows.pipeline import PASSED, Chained, PipelineOptions, Stage, Step, run_pipeline
from imagekit.kinds.details import RecordDetails
from imagekit.kinds.spec import KindSpec
from imagekit.ledger import append_record, iter_records, verify
from imagekit.result import Runner, StageResult
from imagekit.runners.host import HostRunner
from imagekit.runners.seam import RunSpec, run_to_end
from imagekit.workspace import Workspace

# 1. the stage: its request, its result (meeting StageResult) and its run


GREET = "import sys; print('hello, ' + sys.argv[1])"


@dataclass(frozen=True)
class ToyRequest:
    """What the toy is asked: whom to greet, under which plan."""

    whom: str
    plan: str | None = None


@dataclass(frozen=True)
class ToyResult:
    whom: str
    said: str
    evidence: Path
    ledger_seqs: tuple[int, ...] = ()

    @property
    def ok(self) -> bool:
        return self.said == "said"

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def to_json(self) -> dict[str, Any]:
        return {"whom": self.whom, "status": self.said, "ledger_seqs": list(self.ledger_seqs)}


def run(workspace: Workspace, request: ToyRequest) -> ToyResult:
    """The toy stage: says hello to ``whom`` in a process the runner seam starts (this host's,
    as the audit's ``--host`` runs), writes what it said as evidence, and records it; "said"
    only when the process ended 0 and said exactly the greeting."""
    run_dir = evidence.new_run_dir(workspace.evidence_dir, request.plan or "toy", "toy")
    greet = RunSpec(argv=(sys.executable, "-c", GREET, request.whom), stage="toy")
    ended = run_to_end(HostRunner(), greet, run_dir, deadline_s=60)
    heard = ended.stdout.tail.decode(errors="replace")
    path = run_dir / "toy.json"
    evidence.write_json(path, {"hello": request.whom, "heard": heard, "exit": ended.exit_code})
    ok = ended.exit_code == 0 and not ended.timed_out and heard == f"hello, {request.whom}\n"
    result = ToyResult(request.whom, "said" if ok else "refused", path)

    def record(result: ToyResult, _: object) -> ToyResult:
        seq = append_record(
            workspace,
            "toy",
            plan=request.plan,
            images={},
            status=result.said,
            scope="a toy: it greets, and proves nothing about any image",
            evidence=path,
            details=ToyDetails(whom=request.whom),
        ).seq
        return replace(result, ledger_seqs=(seq,))

    return sign_record_attach(result, sign=None, record=record)


# 2. its kind: the details of its records, its statuses


class ToyDetails(RecordDetails):
    whom: str


TOY = KindSpec(name="toy", details=ToyDetails, statuses=("said", "refused"))


# 4. its row in the pipeline: its request from the results before it, its line


def _toy_request(run: pipeline.Run, results: pipeline.Results) -> ToyRequest:
    return ToyRequest(whom=run.name, plan=run.name)


def _toy_line(run: pipeline.Run, results: pipeline.Results, result: ToyResult) -> Step:
    return Step(result, f"{result.said} to {result.whom}")


TOY_ROW = Stage("toy", ("doctor",), Chained(_toy_request, run, _toy_line))


# 5. its command, this module being its command's module


@click.command("toy")
@click.argument("whom")
@json_option
def command(whom: str, as_json: bool) -> None:
    """Greet WHOM, and record it."""
    run_command(
        lambda: run(Workspace.from_env(), ToyRequest(whom)),
        as_json=as_json,
        human=lambda result: click.echo(f"{result.said} to {result.whom}"),
        exit_code=lambda result: result.exit_code,
    )


# 3., 4., 5.: the registrations, each the line the page names, made for a test's length


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Workspace:
    monkeypatch.setattr(imagekit.kinds, "KINDS", (*imagekit.kinds.KINDS, TOY))
    before_ledger = pipeline.PIPELINE[:-1]
    monkeypatch.setattr(pipeline, "PIPELINE", (*before_ledger, TOY_ROW, pipeline.PIPELINE[-1]))
    monkeypatch.setitem(imagekit.cli._COMMANDS, "toy", (__name__, "Greet WHOM, and record it."))
    root = tmp_path / "ws"
    (root / "manifests").mkdir(parents=True)
    monkeypatch.chdir(root)
    for name in ("IMAGEKIT_ROOT", "IMAGEKIT_PLANS_DIR", "IMAGEKIT_EVIDENCE_DIR", "IMAGEKIT_LEDGER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("IMAGEKIT_CRASH_DIR", str(tmp_path / "crashes"))
    return Workspace.at(root)


def test_the_toy_runs_as_every_stage_and_the_ledger_takes_its_kind(toy: Workspace) -> None:
    runner: Runner[ToyRequest, ToyResult] = run  # the one call shape, held by mypy
    result = runner(toy, ToyRequest("the house", plan="demo"))
    assert isinstance(result, StageResult) and result.ok
    # what the process the runner seam started said, kept as the run's evidence
    heard = json.loads(result.evidence.read_text())
    assert heard == {"hello": "the house", "heard": "hello, the house\n", "exit": 0}
    assert imagekit.kinds.kind("toy") is TOY
    [record] = list(_records(toy))
    assert (record.seq,) == result.ledger_seqs
    assert (record.kind, record.status, record.plan) == ("toy", "said", "demo")
    assert record.info == ToyDetails(whom="the house")
    assert verify(toy).ok


def test_the_pipeline_runs_the_toys_row_in_its_place(
    toy: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stages around it stand in (the real ones build images: the integration tests'),
    the toy's row is the one made above, run by the pipeline as any row is."""

    @dataclass(frozen=True)
    class Passed:
        evidence: Path | None = None
        ledger_seqs: tuple[int, ...] = ()
        ok: bool = True
        exit_code: int = 0

        def to_json(self) -> dict[str, Any]:
            return {}

    def stand_in(run: pipeline.Run, results: pipeline.Results) -> Step:
        return Step(Passed(), "stood in")

    rows = tuple(
        row if row is TOY_ROW else Stage(row.name, row.needs, stand_in) for row in pipeline.PIPELINE
    )
    monkeypatch.setattr(pipeline, "PIPELINE", rows)
    monkeypatch.setattr(pipeline, "_plan_platforms", lambda *_: ())
    done = run_pipeline(toy, "demo", PipelineOptions(registry="127.0.0.1:1", mirror="127.0.0.1:2"))
    names = [outcome.stage for outcome in done.stages]
    assert names[-2:] == ["toy", "ledger"]
    toy_outcome = done.stages[-2]
    assert (toy_outcome.status, toy_outcome.detail) == (PASSED, "said to demo")
    assert done.ok and [r.kind for r in _records(toy)] == ["toy"]


def test_the_cli_lists_and_runs_the_toys_command(toy: Workspace) -> None:
    listed = CliRunner().invoke(imagekit.cli.main, ["--help"])
    assert listed.exit_code == 0 and "Greet WHOM, and record it." in listed.output
    ran = CliRunner().invoke(imagekit.cli.main, ["toy", "--json", "you"])
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.stdout)["status"] == "said"
    shown = CliRunner().invoke(imagekit.cli.main, ["ledger", "show", "--json"])
    assert shown.exit_code == 0, shown.output
    assert [(r["kind"], r["details"]) for r in _shown(shown.stdout)] == [("toy", {"whom": "you"})]


def _shown(stdout: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = json.loads(stdout)["records"]
    return records


def _records(workspace: Workspace) -> list[Any]:
    with iter_records(workspace.ledger_path) as records:
        return list(records)
