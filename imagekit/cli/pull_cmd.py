"""`imagekit pull REF@DIGEST --record [--runtime containerd]`: the final pull on a target."""

from __future__ import annotations

from pathlib import Path

import click

from imagekit import pull
from imagekit.cli.contract import run, unless_ok
from imagekit.cli.options import json_option, parsed, registry_options, sign_key_option
from imagekit.cli.output import echo_err
from imagekit.pull import ContainerdPullRequest, ContainerdPullResult, PullRequest, PullResult
from imagekit.runtime.containerd import K8S_NAMESPACE
from imagekit.workspace import Workspace


@click.command("pull")
@click.argument("reference")
@click.option("--record", is_flag=True, help="Append a final-pull record to the ledger.")
@click.option("--plan", help="The plan the record belongs to.")
@click.option("--where", help="A label for this target (default: the host name).")
@click.option(
    "--expect-digest", help="For a tag: the manifest digest it must resolve to (sha256:...)."
)
@click.option(
    "--runtime",
    type=click.Choice(["engine", "containerd"]),
    default="engine",
    show_default=True,
    help="Pull through the Docker engine, or through containerd as a Kubernetes node does.",
)
@click.option(
    "--address",
    help="containerd's socket (default: $CONTAINERD_ADDRESS or /run/containerd/containerd.sock).",
)
@click.option(
    "--namespace", help=f"containerd namespace (default: {K8S_NAMESPACE}, the kubelet's)."
)
@registry_options
@sign_key_option(
    "With --record: sign the verified pull (runtime, store, image ID, namespace, node) "
    "and store it beside the image.",
)
@json_option
def command(
    reference: str,
    record: bool,
    plan: str | None,
    where: str | None,
    expect_digest: str | None,
    runtime: str,
    address: str | None,
    namespace: str | None,
    sign_key: Path | None,
    as_json: bool,
) -> None:
    """Pull by digest, check the store's image ID against the registry, record what it holds."""
    if runtime == "engine" and (address is not None or namespace is not None):
        raise click.UsageError("--address and --namespace go with --runtime containerd")

    def human(result: PullResult | ContainerdPullResult) -> None:
        for check in result.checks:
            mark = "ok      " if check.ok else "MISMATCH"
            click.echo(f"{mark} {check.name}: expected {check.expected}, got {check.actual}")
        click.echo(f"{result.status}: {result.scope}")
        if result.record is not None:
            echo_err(f"recorded seq {result.record.seq} in the ledger")

    def action() -> PullResult | ContainerdPullResult:
        request = (
            parsed(ContainerdPullRequest, namespace=namespace or K8S_NAMESPACE)
            if runtime == "containerd"
            else parsed(PullRequest)
        )
        return pull.run(Workspace.from_env(), request)

    run(
        action,
        as_json=as_json,
        human=human,
        exit_code=unless_ok,
    )
