"""`imagekit pull REF@DIGEST --record`: the final pull through the local engine."""

from __future__ import annotations

import click

from imagekit.cli._common import echo_err, json_option, run
from imagekit.pull import PullResult, final_pull
from imagekit.workspace import Workspace


@click.command("pull")
@click.argument("reference")
@click.option("--record", is_flag=True, help="Append a final-pull record to the ledger.")
@click.option("--plan", help="The plan the record belongs to.")
@click.option("--where", help="A label for this target (default: the host name).")
@click.option(
    "--expect-digest", help="For a tag: the manifest digest it must resolve to (sha256:...)."
)
@json_option
def command(
    reference: str,
    record: bool,
    plan: str | None,
    where: str | None,
    expect_digest: str | None,
    as_json: bool,
) -> None:
    """Pull by digest, check the engine's image ID and RepoDigests, and record what it holds."""

    def human(result: PullResult) -> None:
        for check in result.checks:
            mark = "ok      " if check.ok else "MISMATCH"
            click.echo(f"{mark} {check.name}: expected {check.expected}, got {check.actual}")
        click.echo(f"{result.status}: {result.scope}")
        if result.record is not None:
            echo_err(f"recorded seq {result.record.seq} in the ledger")

    run(
        lambda: final_pull(
            Workspace.from_env(),
            reference,
            expect_digest=expect_digest,
            record=record,
            plan=plan,
            where=where,
        ),
        as_json=as_json,
        human=human,
        to_json=PullResult.to_json,
        exit_code=lambda result: 0 if result.ok else 1,
    )
