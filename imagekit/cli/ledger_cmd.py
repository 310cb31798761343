"""`imagekit ledger show|verify|repair|lock|record-pod`: parse, call the ledger, render."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from imagekit.cli.contract import run, unless_ok
from imagekit.cli.options import (
    FILE_PATH,
    json_option,
    parsed,
    registry_options,
    trusted_key_option,
)
from imagekit.cli.output import StreamedDocument, echo_err
from imagekit.cluster.pods import PodOptions, PodReport, record_pod
from imagekit.ledger import (
    KINDS,
    LedgerRecord,
    ShowSummary,
    VerifyReport,
    repair,
    show_each,
    verify,
)
from imagekit.ledger.lockfile import LockResult, encode_lock, write_lock
from imagekit.progress import plural
from imagekit.workspace import Workspace

ledger_option = click.option(
    "--ledger",
    "ledger",
    type=FILE_PATH,
    help="The ledger file (default: $IMAGEKIT_LEDGER or manifests/ledger.jsonl).",
)


def _workspace(ledger: Path | None) -> Workspace:
    workspace = Workspace.from_env()
    if ledger is not None:
        workspace = dataclasses.replace(workspace, ledger_path=ledger)
    return workspace


@click.group("ledger")
def command() -> None:
    """The append-only record of every build, audit, verification and final pull."""


@command.command("show")
@click.option("--plan", help="Only records of this plan.")
@click.option("--image", help="Only records that mention this digest or reference.")
@click.option("--kind", type=click.Choice(KINDS), help="Only records of this kind.")
@ledger_option
@json_option
def show_cmd(
    plan: str | None, image: str | None, kind: str | None, ledger: Path | None, as_json: bool
) -> None:
    """List records, oldest first, as they are read (a ledger of any length)."""
    workspace = _workspace(ledger)
    path = str(workspace.ledger_path)
    document = StreamedDocument({"ledger": path}, "records")

    headed: list[bool] = []

    def each(rec: LedgerRecord) -> None:
        if as_json:
            document.add(rec.to_json())
            return
        if not headed:
            headed.append(True)
            click.echo(
                f"{'SEQ':>5}  {'TIME':<{len(rec.time)}}  {'KIND':<18} {'PLAN':<16} "
                f"{'STATUS':<26} IMAGES"
            )
        images = " ".join(f"{k}={v}" for k, v in sorted(rec.images.items()))
        click.echo(
            f"{rec.seq:>5}  {rec.time}  {rec.kind:<18} {rec.plan or '-':<16} "
            f"{rec.status:<26} {images}"
        )
        if rec.scope:
            click.echo(f"       {rec.scope}")

    def human(result: ShowSummary) -> None:
        for line in result.skipped:
            echo_err(
                f"skipped line {line.line} ({line.length} bytes at offset {line.offset}): "
                + ("torn, without a newline" if line.why == "torn" else "not a ledger record")
            )
        if result.skipped_not_listed:
            echo_err(f"and {result.skipped_not_listed} more skipped lines, not listed")
        echo_err(f"{result.shown} record(s) in {result.path}")
        if result.skipped:
            echo_err("hint: `imagekit ledger verify` says what is wrong with the skipped lines")

    run(
        lambda: show_each(workspace, each, plan=plan, image=image, kind=kind),
        as_json=as_json,
        human=human,
        # The records were printed as they were read; this closes the document after them.
        to_json=lambda result: {
            "ledger": path,
            "records": [],
            "skipped": [line.to_json() for line in result.skipped],
            "skipped_not_listed": result.skipped_not_listed,
        },
        # Records were left out of what is shown: a check (reading the ledger) said no.
        exit_code=lambda result: 1 if result.skipped else 0,
    )


@command.command("verify")
@click.option("--head", help="The sha256 the newest record must hash to.")
@click.option(
    "--lock",
    type=FILE_PATH,
    help="A lock file (`imagekit ledger lock`): the record it was written from must still be "
    "there, with the same bytes.",
)
@ledger_option
@json_option
def verify_cmd(head: str | None, lock: Path | None, ledger: Path | None, as_json: bool) -> None:
    """Recompute the hash chain and evidence hashes; exit 1 when anything broke, and when
    the ledger is empty (nothing verified)."""

    def human(report: VerifyReport) -> None:
        for problem in report.problems:
            click.echo(f"BROKEN  {problem.kind}: {problem.message}")
        if report.problems_not_listed:
            click.echo(f"BROKEN  and {report.problems_not_listed} more problems, not listed")
        if report.status == "empty":
            click.echo(f"ledger empty: nothing verified (0 records in {report.path})")
        elif report.ok:
            click.echo(
                f"ledger ok: {report.records} records, {report.evidence_checked} evidence files "
                f"checked, head seq {report.head_seq} {report.head}"
            )
        else:
            first = report.first
            assert first is not None  # noqa: S101 - not ok means a problem exists
            click.echo(f"ledger broken: first problem at line {first.line}: {first.kind}")

    run(
        lambda: verify(_workspace(ledger), head=head, lock=lock),
        as_json=as_json,
        human=human,
        exit_code=unless_ok,
    )


@command.command("repair")
@ledger_option
@json_option
def repair_cmd(ledger: Path | None, as_json: bool) -> None:
    """Complete a torn last line that is a whole record, else move it into a quarantine file."""
    run(
        lambda: repair(_workspace(ledger)),
        as_json=as_json,
        human=lambda report: click.echo(report.message),
    )


@command.command("sync")
@trusted_key_option("A public key whose attestations are imported. Repeatable.")
@click.option("--plans", "plans", multiple=True, metavar="NAME", help="Only these plans' images.")
@click.option(
    "--from",
    "pieces",
    multiple=True,
    type=FILE_PATH,
    metavar="PIECE",
    help="Merge the records another copy of this ledger appended (a CI job's ledger.jsonl, "
    "its evidence/ unpacked here); it must verify here. Repeatable.",
)
@registry_options
@ledger_option
@json_option
def sync_cmd(
    key_paths: tuple[Path, ...],
    plans: tuple[str, ...],
    pieces: tuple[Path, ...],
    ledger: Path | None,
    as_json: bool,
) -> None:
    """Append the signed attestations attached to the ledger's images that it lacks (a
    final pull on a node, an audit on a CI runner), each verified and marked as imported;
    and, with --from, the records other copies of the ledger appended (a CI matrix's jobs)."""
    from imagekit.ledger.sync import SyncResult, sync_ledger

    def human(result: SyncResult) -> None:
        for merged in result.merged:
            click.echo(
                f"merged seq {merged.seq} {merged.kind} {merged.status} ({merged.piece} "
                f"seq {merged.piece_seq})"
            )
        if pieces:
            click.echo(
                f"{len(result.merged)} merged, {result.already_merged} already in the ledger"
            )
        for item in result.imported:
            click.echo(f"imported seq {item.seq} {item.kind} {item.image} ({item.key})")
        if key_paths:
            click.echo(
                f"{len(result.imported)} imported, {result.already} already in the ledger, "
                f"{len(result.images)} image(s) read"
            )
        for line in result.skipped:
            click.echo(f"skipped {line}")

    run(
        lambda: sync_ledger(_workspace(ledger), key_paths, plans, pieces=pieces),
        as_json=as_json,
        human=human,
    )


@command.command("lock")
@click.option(
    "-o",
    "--output",
    type=FILE_PATH,
    help="Write the lock to this file (e.g. manifests/images.lock.json), atomically; without "
    "it the lock is printed on stdout and no file is written.",
)
@ledger_option
@json_option
def lock_cmd(output: Path | None, ledger: Path | None, as_json: bool) -> None:
    """Render the current state of every plan from the ledger, deterministically; refused
    (exit 1) unless the ledger verifies."""

    def human(result: LockResult) -> None:
        loose = len(result.document.get("not_in_a_plan", {}).get("images", {}))
        said = f"{plural(len(result.plans), 'plan')}" + (
            f"; {plural(loose, 'image')} recorded without a plan, listed under not_in_a_plan"
            if loose
            else ""
        )
        if result.path is None:
            click.echo(encode_lock(result.document).decode(), nl=False)
            echo_err(f"{said}; printed only: `-o manifests/images.lock.json` writes it")
        else:
            click.echo(f"wrote {result.path} ({said})")
        if not result.plans:
            echo_err(
                "hint: no plan has records yet: the lock's images are a plan's "
                "(manifests/NAME.yaml, `imagekit build NAME`); `--plan NAME` on audit, pull "
                "and gpu-preflight ties their records to a plan"
            )

    run(
        lambda: write_lock(_workspace(ledger), output),
        as_json=as_json,
        human=human,
    )


@command.command("record-pod")
@click.argument("pod_json", type=FILE_PATH)
@click.option("--plan", help="The plan; its newest push record gives the expected digest.")
@click.option("--expect", help="The expected manifest digest (sha256:...).")
@click.option("--expect-config", help="The expected config digest, for bare image IDs.")
@click.option("--container", help="Only this container (init containers included).")
@click.option("--where", help="A label for the cluster (default: the pod's node).")
@click.option(
    "--against-final-pull",
    is_flag=True,
    help="Match against the newest containerd final pull of the pod's node (--where) and image.",
)
@ledger_option
@json_option
def record_pod_cmd(
    pod_json: Path,
    plan: str | None,
    expect: str | None,
    expect_config: str | None,
    container: str | None,
    where: str | None,
    against_final_pull: bool,
    ledger: Path | None,
    as_json: bool,
) -> None:
    """Record each container's status.imageID from `kubectl get pod -o json` output."""

    def human(report: PodReport) -> None:
        for check in report.checks:
            click.echo(
                f"{check.status:<9} {check.namespace}/{check.pod} {check.container}: "
                f"{check.image_id_raw or '(no imageID)'}"
            )
            click.echo(f"          {check.reason}")
        seqs = [c.record.seq for c in report.checks if c.record]
        echo_err(f"recorded seq {seqs[0]}..{seqs[-1]}" if seqs else "nothing recorded")

    run(
        lambda: record_pod(_workspace(ledger), pod_json, parsed(PodOptions)),
        as_json=as_json,
        human=human,
        exit_code=unless_ok,
    )
