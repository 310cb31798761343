"""`imagekit pipeline NAME`: every stage for one plan, in order, stopping at the first no.

doctor -> build (with the plan's assertions) -> audit -> push to R -> mirror to M (copy, then
verify by diffID) -> final pull from M by digest -> GPU preflight of the pulled digest where
a GPU is visible (SKIPPED, saying why, where none is) -> ledger verify. The pipeline only chains
the stages: each one writes its own evidence and appends its own ledger record, exactly as
when it is run alone, so nothing here records twice.

With a signing key (``sign_key``) every stage that proves something about the image signs it
beside the image in the registry (imagekit/attest), as each does when run alone with
``--sign-key``: the push stage signs the build's SLSA provenance and the audit's verdict and
vulnerability scan onto the pushed digest (the audit ran before the push, on the engine's
image, whose config the pushed manifest names), the mirror signs its verdict binding the
mirror's digest to the pushed one (after copying the attestations across), and the final
pull signs what the target pulled. A key that cannot sign is exit 2 before any stage runs;
an attestation the registry refused stops the run there (exit 3), its stage's verdict,
evidence and record kept, the record saying "not attested".

A plan of several platforms (``base.platforms``, docs/multi-platform.md) runs as: doctor
(each platform runs here, the base resolves for each) -> build (imagekit.builders.platforms:
each platform built and asserted, one index pushed by digest to R) -> an audit stage a
platform (``audit linux/arm64``: that platform's image read from R by its digest, emulated
under qemu-user where it is not this host's) -> mirror the index to M (copied whole, every
platform's image verified by diffID) -> final pull from M of the index by digest (the engine
takes this host's platform) -> ledger verify. There is no push stage: the index is in R by
digest before any audit (the build pushes it; a failed audit leaves it there untagged, as a
rejected build does), and only an index whose every platform passed its audit is mirrored.
With ``sign_key`` the build signs the index's SLSA provenance (its subjects the index and
each platform's manifest), each platform's audit signs its verdict and scan onto that
platform's manifest, the mirror copies them and signs one binding of the whole index, and
the final pull signs the index and the manifest this host pulled.

Fail-closed: the first stage that says no (or cannot finish) stops the run; the stages after
it are reported as "not run", never as passed. The exit code is the failing stage's: 1 when a
check said no, 3 when something could not be finished, 2 for bad input.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from imagekit.errors import CheckFailed, CouldNotFinish, ImagekitError, UsageError
from imagekit.evidence import new_run_dir, write_json
from imagekit.flows.pipeline_result import (
    ERROR,
    FAILED,
    NOT_RUN,
    PASSED,
    SKIPPED,
    PipelineOptions,
    PipelineResult,
    StageOutcome,
    StageStatus,
)
from imagekit.flows.pipeline_stages import (
    PIPELINE,
    STAGES,
    Chained,
    Results,
    Run,
    Stage,
    StageRun,
    Step,
)
from imagekit.refs import repository_for
from imagekit.result import StageResult
from imagekit.workspace import Workspace

# The statuses, the options and the result (imagekit.flows.pipeline_result) and the rows
# (imagekit.flows.pipeline_stages) are named here too: the pipeline's face.
__all__ = [
    "ERROR",
    "FAILED",
    "NOT_RUN",
    "PASSED",
    "PIPELINE",
    "SKIPPED",
    "STAGES",
    "Chained",
    "PipelineOptions",
    "PipelineResult",
    "Results",
    "Run",
    "Stage",
    "StageOutcome",
    "StageRun",
    "StageStatus",
    "Step",
    "run_pipeline",
    "stages_for",
]


def _last_seq(workspace: Workspace) -> int:
    from imagekit.ledger import iter_records

    if not workspace.ledger_path.exists():
        return 0
    seq = 0
    with iter_records(workspace.ledger_path) as records:
        for record in records:
            seq = record.seq
    return seq


def _rel(workspace: Workspace, path: Path | str | None) -> str | None:
    if path is None:
        return None
    p = Path(path)
    try:
        return str(p.resolve().relative_to(workspace.root.resolve()))
    except ValueError:
        return str(p)


def stages_for(platforms: tuple[str, ...]) -> tuple[Stage, ...]:
    """The stages of one run: PIPELINE as it is for a plan of one image; for a plan of
    several platforms, each stage's index form, one stage a platform where it says so."""
    if not platforms:
        return tuple(stage for stage in PIPELINE if stage.run is not None)
    found: list[Stage] = []
    for stage in PIPELINE:
        needs = stage.index_needs if stage.index_needs is not None else stage.needs
        if stage.each_platform is not None:
            found += [
                Stage(f"{stage.name} {p}", needs, stage.each_platform(p), when=stage.when)
                for p in platforms
            ]
        elif stage.index is not None:
            found.append(Stage(stage.name, needs, stage.index, when=stage.when))
    return tuple(found)


def _plan_platforms(workspace: Workspace, name: str, base_override: str | None) -> tuple[str, ...]:
    """The platforms of a plan of several, else (): a plan that does not load is the build
    stage's to report, as for any plan."""
    from imagekit.plans.load import load_named_plan

    try:
        loaded = load_named_plan(workspace, name, base_override=base_override)
    except ImagekitError:
        return ()
    return tuple(loaded.plan.base.targets) if loaded.multi_platform else ()


def _outcome(name: str, step: Step) -> StageOutcome:
    """A stage's line in the table, judged from its result alone."""
    result = step.result
    if result.ok:
        status = PASSED
    else:
        status = ERROR if result.exit_code == CouldNotFinish.exit_code else FAILED
    return StageOutcome(
        name,
        status,
        step.detail,
        digest=step.digest,
        evidence=str(result.evidence) if result.evidence is not None else None,
        data=step.data,
    )


def run_pipeline(
    workspace: Workspace, name: str, options: PipelineOptions, *, echo: TextIO | None = None
) -> PipelineResult:
    """Run every stage for plan ``name``; a stage's no or failure stops the rest."""
    echo = echo or sys.stderr
    run = Run(
        workspace=workspace,
        name=name,
        options=options,
        push_repo=repository_for(options.registry, name),
        mirror_repo=repository_for(options.mirror, name),
        echo=echo,
    )
    if run.push_repo == run.mirror_repo:
        raise UsageError(
            f"--registry and --mirror both name {run.push_repo}",
            hint="a mirror is a second registry (or another repository)",
        )
    platforms = _plan_platforms(workspace, name, options.base_override)
    if options.sign_key is not None:  # a key that cannot sign: exit 2 before any stage
        from imagekit.attest.signer import KeyFileSigner

        KeyFileSigner.from_file(options.sign_key)
    run_dir = new_run_dir(workspace.evidence_dir, name, "pipeline")
    seq_before = _last_seq(workspace)
    outcomes: list[StageOutcome] = []
    results: dict[str, StageResult] = {}
    error: dict[str, Any] | None = None
    stopped = False
    for stage in stages_for(platforms):
        if stopped:
            outcomes.append(StageOutcome(stage.name, NOT_RUN))
            continue
        skipped = stage.when(run) if stage.when is not None else None
        if skipped is not None:
            outcomes.append(StageOutcome(stage.name, SKIPPED, skipped))
            echo.write(f"pipeline: {stage.name} {SKIPPED}: {skipped}\n")
            continue
        assert stage.run is not None  # noqa: S101 - stages_for keeps runnable stages
        echo.write(f"pipeline: {stage.name} ...\n")
        started = time.monotonic()
        try:
            step = stage.run(run, {need: results[need] for need in stage.needs if need in results})
        except ImagekitError as exc:
            status = FAILED if isinstance(exc, CheckFailed) else ERROR
            outcome = StageOutcome(stage.name, status, exc.message.splitlines()[0])
            error = {"stage": stage.name, **exc.to_json()}
        else:
            results[stage.name] = step.result
            outcome = _outcome(stage.name, step)
        outcome = replace(
            outcome,
            seconds=round(time.monotonic() - started, 1),
            evidence=_rel(workspace, outcome.evidence),
        )
        outcomes.append(outcome)
        echo.write(f"pipeline: {stage.name} {outcome.status} {outcome.detail}\n")
        if outcome.status not in (PASSED, SKIPPED):
            stopped = True
    result = PipelineResult(
        plan=name,
        registry=run.push_repo,
        mirror=run.mirror_repo,
        stages=tuple(outcomes),
        evidence=run_dir / "pipeline.json",
        ledger_seq_before=seq_before,
        ledger_seq_after=_last_seq(workspace),
        error=error,
    )
    write_json(result.evidence, result.to_json())
    return result
