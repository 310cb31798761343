"""`imagekit audit REF`: is the environment inside this image whole, before it gets a GPU."""

from __future__ import annotations

from pathlib import Path

import click

from imagekit.audit import stage
from imagekit.audit.runner import DEFAULT_TIMEOUT_S
from imagekit.audit.stage import AuditRequest, AuditResult
from imagekit.audit.vulns import VulnPolicy, fails
from imagekit.cli.contract import run
from imagekit.cli.options import (
    cluster_options,
    json_option,
    parsed,
    registry_options,
    sign_key_option,
    vuln_options,
)
from imagekit.cli.output import echo_attested, echo_err
from imagekit.cluster.audit import ClusterAuditRequest, ClusterAuditResult, audit_in_cluster
from imagekit.cluster.connection import ClusterTarget
from imagekit.errors import UsageError
from imagekit.workspace import Workspace

# What an audit in a cluster's pod does not do (the probe is the same; the rest is the
# engine's): refused with --cluster rather than silently ignored.
_NOT_WITH_CLUSTER = {
    "host": "--host",
    "platform": "--platform",
    "expected_paths": "--expect-overlay",
    "sign_key": "--sign-key",
}


def _human_cluster(result: ClusterAuditResult) -> None:
    pod = result.pod
    click.echo(f"{result.target}: {result.verdict.status} (final pull {result.final_pull})")
    click.echo(f"  pod: {pod.namespace}/{pod.name} uid {pod.uid} on {pod.node} ({result.cluster})")
    click.echo(f"  kubelet imageID: {pod.image_id}")
    click.echo(f"  final pull: {result.final_pull_reason}")
    for line in pod.isolation:
        click.echo(f"  isolation: {line}")
    for check in result.report.checks:
        click.echo(f"  {check.status:<8} {check.name}: {check.reason}")
    click.echo("  the pod was kept (--keep)" if result.kept else "  the pod was deleted")
    click.echo(f"evidence: {result.evidence_dir}")


def _human(result: AuditResult) -> None:
    resolution = (result.to_json()["image"] or {}).get("tag_resolution")
    if resolution:
        click.echo(resolution["sentence"])
    click.echo(f"{result.target}: {result.verdict.status}")
    click.echo(f"  scope: {result.scope}")
    if result.probe_note:
        click.echo(f"  note: {result.probe_note}")
    run = result.probe_run
    if run is not None and len(run.stdout.files) > 1:  # too long to keep whole
        click.echo(
            f"  note: the probe printed {run.stdout.total} bytes; its first and last parts are "
            f"kept ({', '.join(p.name for p in run.stdout.files)}), {run.stdout.cut} bytes cut"
        )
    for check in result.report.checks:
        click.echo(f"  {check.status:<8} {check.name}: {check.reason}")
    click.echo(f"  vulnerabilities: {result.vulns.status}: {result.vulns.reason}")
    if result.vulns.database:
        db = result.vulns.database
        click.echo(f"    database: {db['name']} {db['digest']}, {db['records']} records")
    for finding in result.vulns.findings:
        click.echo(f"    FINDING  {finding.line()}")
    for missing in result.vulns.not_audited:
        click.echo(f"    NOT AUDITED  {missing}")
    if fails(result.vulns, result.fail_on):
        click.echo(f"  --fail-on {result.fail_on}: the findings fail the audit")
    click.echo(f"evidence: {result.evidence_dir}")
    if result.attestation is not None:
        echo_attested(result.attestation, places=True)
    if result.vuln_attestation is not None and result.vuln_attestation.attestation is not None:
        click.echo(f"attested: {result.vuln_attestation.attestation.envelope_digest} (vuln)")


@click.command("audit")
@click.argument("ref", required=False)
@click.option(
    "--profile",
    metavar="NAME|FILE",
    help="generic, sglang, vllm (built in) or a profile YAML file; default: the plan's, "
    "else generic (hopper-host with --host).",
)
@click.option("--plan", metavar="NAME", help="Add the plan's find_spec modules and overlays.")
@click.option("--offline", is_flag=True, help="Skip the vulnerability service (said so).")
@click.option("--host", is_flag=True, help="Audit this Python environment, GPU included.")
@click.option(
    "--platform",
    metavar="OS/ARCH",
    help="The image of an index to pull (e.g. linux/arm64, run under qemu); default: the "
    "plan's base platform, else the engine's.",
)
@click.option(
    "--expect-overlay",
    "expected_paths",
    multiple=True,
    metavar="PATH",
    help="A file in the image expected to differ from its RECORD (repeatable).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    metavar="SECONDS",
    help="Wall-clock limit of the whole probe run; past it the container is removed and "
    "the audit ends TIMEOUT (exit 3).",
)
@click.option(
    "--cluster",
    is_flag=True,
    help="Run the probe in a pod of REF (by digest) on a Kubernetes cluster instead: no GPU "
    "requested, no service-account token; the kubelet's imageID must name the digest.",
)
@click.option("--keep", is_flag=True, help="With --cluster: keep the pod afterwards.")
@click.option(
    "--host-network",
    is_flag=True,
    help="With --cluster: the pod on the node's network (a cluster without a pod network).",
)
@click.option("--node", metavar="NAME", help="With --cluster: run the pod on this node.")
@cluster_options
@sign_key_option(
    "Sign the verdict as an in-toto attestation and store it beside the image in its "
    "registry (cosign's .att tag and an OCI referrer); a registry that refuses it is exit 3, "
    "the verdict and its record kept.",
)
@vuln_options
@registry_options
@json_option
def command(
    ref: str | None,
    profile: str | None,
    plan: str | None,
    offline: bool,
    host: bool,
    platform: str | None,
    expected_paths: tuple[str, ...],
    timeout_s: float,
    vulns: VulnPolicy,
    sign_key: Path | None,
    cluster: bool,
    keep: bool,
    host_network: bool,
    node: str | None,
    target: ClusterTarget,
    as_json: bool,
) -> None:
    """Run the CPU-only probe in REF (no network, no GPU) and report CPU_PASS,
    CPU_PASS_GPU_CLI_DEFERRED or CPU_CHECK_INCOMPLETE, and the vulnerabilities of its Python
    distributions (clean, findings, unknown, skipped). Exit 0 for the passes, 1 incomplete or
    findings under --fail-on, 2 bad input (a --vuln-db that is not an OSV export), 3 when the
    image could not be run."""
    if cluster:
        given = click.get_current_context().params

        def in_cluster() -> ClusterAuditResult:
            for name, flag in _NOT_WITH_CLUSTER.items():
                if given.get(name):
                    raise UsageError(f"{flag} does not go with --cluster")
            if not ref:
                raise UsageError("--cluster needs REF (REPO@sha256:...)")
            request = parsed(ClusterAuditRequest, target=target)
            return audit_in_cluster(Workspace.from_env(Path.cwd()), request, progress=echo_err)

        run(
            in_cluster,
            as_json=as_json,
            human=_human_cluster,
            exit_code=lambda r: r.exit_code,
        )
        return

    def action() -> AuditResult:
        if host == bool(ref):
            raise UsageError("give REF or --host (one of them)", hint="imagekit audit --help")
        request = parsed(AuditRequest, vulns=vulns)
        result = stage.run(Workspace.from_env(Path.cwd()), request)
        if as_json:  # stdout is the JSON document; the path and the note still reach the user
            echo_err(f"evidence: {result.evidence_dir}")
            if result.probe_note:
                echo_err(f"note: {result.probe_note}")
        return result

    run(
        action,
        as_json=as_json,
        human=_human,
        exit_code=lambda r: r.exit_code,
    )
