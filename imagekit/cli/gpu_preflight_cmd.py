"""`imagekit gpu-preflight`: the image on the GPU node that will serve it, before any weights."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from imagekit import jsondoc
from imagekit.cli.contract import run
from imagekit.cli.options import cluster_options, json_option, registry_options, sign_key_option
from imagekit.cli.output import echo_attested, echo_err
from imagekit.cluster.connection import ClusterTarget
from imagekit.errors import UsageError
from imagekit.gpu.stage import PreflightRequest, PreflightResult
from imagekit.kinds.gpu_preflight import PreflightLevel
from imagekit.workspace import Workspace

if TYPE_CHECKING:
    from imagekit.gpu.in_cluster import ClusterPreflightRequest
    from imagekit.gpu.multinode import Nodes


def _sizes(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[float, ...]:
    if value is None:
        from imagekit.gpu.launch import DEFAULT_SIZES_MIB

        return DEFAULT_SIZES_MIB
    try:
        return tuple(float(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a list of sizes in MiB: 1,16,128") from None


def _human(result: PreflightResult) -> None:
    where = {"host": "this host", "image": result.reference, "pod": result.pod}[result.where]
    click.echo(f"{where}: {result.verdict.status}")
    click.echo(f"  scope: {result.scope}")
    click.echo(f"  {result.verdict.sentence}")
    for check in result.verdict.checks:  # as imagekit decided each, from the numbers
        click.echo(f"  {check.state:<10} {check.name}: {check.sentence}")
    report = result.report
    if report is not None:
        for figure in result.predicate.all_reduce:
            click.echo(
                f"    all-reduce {figure.size_mib:g} MiB: {figure.slowest_rank_mean_us:.1f} us "
                f"(slowest rank), algbw {figure.algbw_gbps:.2f} GB/s, busbw "
                f"{figure.busbw_gbps:.2f} GB/s"
            )
        click.echo(f"  versions: {json.dumps(report.versions, sort_keys=True)}")
        click.echo(f"  NVLink multicast: {report.nvlink_multicast}")
        click.echo(f"  level: {report.level or 'none (a probe from before levels)'}")
    if result.seconds is not None:
        click.echo(f"  {result.seconds:.1f} s, launch included")
    click.echo(f"evidence: {result.evidence_dir}")
    if result.attestation is not None:
        echo_attested(result.attestation)


@click.command("gpu-preflight")
@click.argument("ref", required=False)
@click.option("--host", is_flag=True, help="This host's Python environment; no image claimed.")
@click.option(
    "--python", metavar="PATH", help="With --host: the interpreter holding torch (this one)."
)
@click.option("--plan", metavar="NAME", help="Expect the plan's gpu: section; record for it.")
@click.option(
    "--profile",
    metavar="NAME|FILE",
    help="Re-run the serving CLI checks this audit profile defers on CPU (default: the "
    "plan's profile).",
)
@click.option("--gpus", type=click.IntRange(min=1), metavar="N", help="GPUs the node must have.")
@click.option("--gpu-name", metavar="PATTERN", help="A pattern every GPU's name matches: H20.")
@click.option("--min-memory-gib", type=float, help="Each GPU's memory, GiB.")
@click.option("--min-capability", metavar="X.Y", help="Each GPU's compute capability: 9.0.")
@click.option("--sizes", callback=_sizes, metavar="MIB,...", help="All-reduce sizes [1,16,128].")
@click.option("--warmups", type=click.IntRange(min=0), default=5, show_default=True)
@click.option("--iterations", type=click.IntRange(min=1), default=20, show_default=True)
@click.option(
    "--min-busbw",
    type=float,
    metavar="GBPS",
    help="Fail below this bus bandwidth at the largest size.",
)
@click.option(
    "--nproc-per-node",
    type=click.IntRange(min=1),
    help="Processes (GPUs) a node; default: torch's count of the visible GPUs.",
)
@click.option(
    "--launcher-arg",
    "launcher_args",
    multiple=True,
    metavar="ARG",
    help="A rendezvous option passed to torch.distributed.run for several nodes "
    "(--nnodes=2, --node-rank=0, --rdzv-backend=c10d, --rdzv-endpoint=HOST:PORT).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=900.0,
    show_default=True,
    metavar="SECONDS",
    help="Wall-clock limit; past it every rank is killed and the verdict is INCOMPLETE.",
)
@click.option(
    "--device-request",
    "device_request",
    default="all",
    show_default=True,
    metavar="VALUE",
    help="The engine's --gpus value for the container (all, a count, device=0,1).",
)
@click.option("--cdi", "cdi_devices", multiple=True, metavar="NAME", help="A CDI device.")
@click.option("--shm-size", default="16g", show_default=True, help="The container's /dev/shm.")
@click.option("--env", "env", multiple=True, metavar="KEY=VALUE", help="Set in the probe's run.")
@click.option("--platform", metavar="OS/ARCH", help="The image of an index to pull.")
@click.option("--self-test", is_flag=True, help="gloo on CPU: the probe's logic, never a pass.")
@click.option("--report", "report_file", type=click.Path(path_type=Path), help="A Job's log.")
@click.option("--pod", "pod_file", type=click.Path(path_type=Path), help="Its pod's JSON.")
@click.option("--emit-job", is_flag=True, help="Print the Kubernetes Job and exit.")
@click.option("--job-name", metavar="NAME", help="The Job's name [from the image's digest].")
@click.option(
    "--cluster",
    is_flag=True,
    help="Create the --emit-job Job on the cluster (--kubeconfig, --context, -n), wait for "
    "its pod, take its log back bound to the pod, record it, delete the Job.",
)
@click.option("--keep", is_flag=True, help="With --cluster: keep the Job and its pod.")
@click.option(
    "--host-network",
    is_flag=True,
    help="The Job's pod on the node's network (a cluster without a pod network).",
)
@click.option("--node", metavar="NAME", help="The Job's pod on this node (its hostname label).")
@click.option(
    "--nodes",
    type=int,
    metavar="N",
    help="With --emit-job or --cluster: an Indexed Job of N pods (nodes) joined by torch's "
    "c10d rendezvous at pod 0, so the all-reduce crosses the nodes.",
)
@click.option(
    "--rendezvous-host",
    metavar="HOST",
    help="With --nodes: where pod 0's rendezvous listens [its name under a headless Service]"
    "; 127.0.0.1 for one node on the host's network.",
)
@click.option(
    "--rendezvous-port", type=int, default=29400, show_default=True, metavar="PORT",
    help="With --nodes: the rendezvous port.",
)  # fmt: skip
@click.option(
    "--all-nodes",
    is_flag=True,
    help="With --cluster: one Job per node that has every --node-selector label and --gpus "
    "allocatable nvidia.com/gpu; a verdict per node, then the pool's (PASS if all passed).",
)
@click.option(
    "--parallel",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    metavar="N",
    help="With --all-nodes: how many nodes' Jobs run at once.",
)
@click.option(
    "--deadline",
    "deadline_s",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="With --cluster: how long to wait for the pod to end [the Job's own deadline]; "
    "past it the preflight is INCOMPLETE with the pod's Pending reasons.",
)
@click.option("--cpu", metavar="QUANTITY", help="The Job's CPU request and limit [2 a GPU].")
@click.option(
    "--memory", metavar="QUANTITY", help="The Job's memory request and limit [16Gi + 8Gi a GPU]."
)
@click.option(
    "--pull-timeout",
    "pull_allowance_s",
    type=int,
    default=1800,
    show_default=True,
    metavar="SECONDS",
    help="The Job's allowance for pulling the image, before the probe's --timeout.",
)
@click.option(
    "--ttl", "ttl_s", type=int, default=86400, show_default=True, metavar="SECONDS",
    help="ttlSecondsAfterFinished: how long the finished Job is kept for its log.",
)  # fmt: skip
@click.option("--node-selector", multiple=True, metavar="KEY=VALUE")
@click.option("--toleration", multiple=True, metavar="KEY[=VALUE]:EFFECT")
@click.option("--priority-class", metavar="NAME")
@click.option(
    "--preemption-policy",
    type=click.Choice(["Never", "PreemptLowerPriority"]),
    help="Checked against --priority-class (admission sets it from the class).",
)
@click.option(
    "--level",
    type=click.Choice(["quick", "standard", "extended"]),
    help="quick: the read-only checks (seconds); standard: and the bandwidths and a short "
    "load (default); extended: a minute's load and larger all-reduces.",
)
@click.option("--gpu-profile", metavar="NAME|FILE", help="Thresholds of a GPU: H100, H200, ...")
@click.option(
    "--threshold", "thresholds", multiple=True, metavar="KEY=VALUE", help="min_h2d_gbps=52 ..."
)
@click.option(
    "--dcgm", type=click.IntRange(1, 4), metavar="LEVEL", help="Also run dcgmi diag -r LEVEL."
)
@click.option("--fault", hidden=True, help="Test the check itself: a fault for one rank (JSON).")
@sign_key_option(
    "Sign the verdict as an in-toto attestation beside the image in its registry (not for "
    "--host: there is no image); a registry that refuses it is exit 3, the record kept.",
)
@cluster_options
@registry_options
@json_option
def command(
    ref: str | None,
    host: bool,
    python: str | None,
    plan: str | None,
    profile: str | None,
    gpus: int | None,
    gpu_name: str | None,
    min_memory_gib: float | None,
    min_capability: str | None,
    sizes: tuple[float, ...],
    warmups: int,
    iterations: int,
    min_busbw: float | None,
    nproc_per_node: int | None,
    launcher_args: tuple[str, ...],
    timeout_s: float,
    device_request: str,
    cdi_devices: tuple[str, ...],
    shm_size: str,
    env: tuple[str, ...],
    platform: str | None,
    self_test: bool,
    report_file: Path | None,
    pod_file: Path | None,
    emit_job: bool,
    job_name: str | None,
    cluster: bool,
    keep: bool,
    host_network: bool,
    node: str | None,
    nodes: int | None,
    rendezvous_host: str | None,
    rendezvous_port: int,
    all_nodes: bool,
    parallel: int,
    deadline_s: float | None,
    target: ClusterTarget,
    cpu: str | None,
    memory: str | None,
    pull_allowance_s: int,
    ttl_s: int,
    node_selector: tuple[str, ...],
    toleration: tuple[str, ...],
    priority_class: str | None,
    preemption_policy: str | None,
    level: PreflightLevel | None,  # click's Choice of the same three
    gpu_profile: str | None,
    thresholds: tuple[str, ...],
    dcgm: int | None,
    fault: str | None,
    sign_key: Path | None,
    as_json: bool,
) -> None:
    """Check the GPUs of the node that will serve REF, before any weights are loaded.

    Each GPU's model, memory and capability against what is expected, the compiled arches, a
    BF16 product against FP32, NCCL all-reduce correctness and bandwidth at each size (the
    slowest rank's), the topology recorded. Runs in REF through the engine, from a
    Kubernetes Job (--emit-job, then --report and --pod; or --cluster, which does both), or
    in this host's Python (--host).
    Exit 0 GPU_PREFLIGHT_PASS, 1 GPU_PREFLIGHT_FAIL or _INCOMPLETE, 2 bad input, 3 when it
    could not be run."""
    from imagekit.gpu import job as jobs
    from imagekit.gpu import stage
    from imagekit.gpu.health import thresholds_for
    from imagekit.gpu.launch import Expectations, ProbeOptions
    from imagekit.gpu.stage import deferred_cli
    from imagekit.plans.load import load_named_plan

    def options() -> ProbeOptions:
        workspace = Workspace.from_env(Path.cwd())
        wanted = load_named_plan(workspace, plan).plan if plan else None
        section = wanted.gpu if wanted is not None else None
        expect = Expectations.of_plan(
            section,
            gpus=gpus,
            gpu_name=gpu_name,
            min_memory_gib=min_memory_gib,
            min_capability=min_capability,
        )
        chosen = profile or (wanted.audit_profile if wanted is not None else None)
        at = level or (section.level if section else None) or "standard"
        health = thresholds_for(
            at,
            gpu_profile or (section.profile if section else None),
            section.thresholds if section else None,
            thresholds,
        )
        return ProbeOptions(
            level=at,
            thresholds=health.for_probe(),
            dcgm=dcgm,
            expect=expect,
            sizes_mib=sizes,
            warmups=warmups,
            iterations=iterations,
            min_busbw=min_busbw,
            timeout_s=timeout_s,
            nproc_per_node=nproc_per_node,
            launcher_args=launcher_args,
            self_test=self_test,
            commands=deferred_cli(chosen) if chosen and not self_test else (),
            fault=_fault(fault),
        )

    def across() -> Nodes | None:
        if nodes is None:
            if rendezvous_host is not None:
                raise UsageError("--rendezvous-host is for a Job of several pods: give --nodes N")
            return None
        from imagekit.gpu.multinode import Nodes

        return Nodes(nodes, rendezvous_host, rendezvous_port)

    def emitted() -> jobs.EmittedJob:
        if ref is None or host:
            raise UsageError(
                "--emit-job and --cluster need the image REF@sha256:DIGEST, not --host"
            )
        selector = (*node_selector, *((f"kubernetes.io/hostname={node}",) if node else ()))
        job = jobs.JobOptions(
            name=job_name,
            namespace=target.namespace,
            node_selector=jobs.selector_pairs(selector),
            tolerations=toleration,
            priority_class=priority_class,
            preemption_policy=preemption_policy,
            env=jobs.env_pairs(env),
            cpu=cpu,
            memory=memory,
            pull_allowance_s=pull_allowance_s,
            ttl_s=ttl_s,
            host_network=host_network,
        )
        spread = across()
        if spread is not None:
            from imagekit.gpu.multinode import emit_across_nodes

            made = emit_across_nodes(Workspace.from_env(Path.cwd()), ref, options(), job, spread)
        else:
            made = jobs.emit_job(Workspace.from_env(Path.cwd()), ref, options(), job)
        for warning in made.warnings:
            echo_err(f"warning: {warning}")
        return made

    def request() -> PreflightRequest:
        return PreflightRequest(
            options=options(),
            reference=ref,
            host=host,
            python=python,
            report_file=report_file,
            pod_file=pod_file,
            plan=plan,
            platform=platform,
            gpus=device_request,
            cdi_devices=cdi_devices,
            shm_size=shm_size,
            env=jobs.env_pairs(env),
            sign_key=sign_key,
        )

    def in_cluster() -> ClusterPreflightRequest:
        from imagekit.gpu.in_cluster import ClusterPreflightRequest

        made = emitted()
        return ClusterPreflightRequest(
            manifest=made.manifest,
            job=made.name,
            preflight=request(),
            target=target,
            deadline_s=deadline_s,
            keep=keep,
        )

    if all_nodes:
        given = {"--node": node, "--emit-job": emit_job, "--report": report_file,
                 "--pod": pod_file, "--host": host, "--nodes": nodes}  # fmt: skip
        _all_nodes(cluster, [name for name, value in given.items() if value], as_json,
                   in_cluster, node_selector, parallel)  # fmt: skip
        return

    if emit_job:

        def emit() -> jobs.EmittedJob:
            made = emitted()
            echo_err(f"job: {made.name} (kubectl wait --for=condition=complete "
                     f"job/{made.name}; kubectl logs job/{made.name} > job.log)")  # fmt: skip
            return made

        run(
            emit,
            as_json=as_json,
            human=lambda e: click.echo(jobs.dumps(e.manifest)),
            to_json=lambda e: e.to_json(),
        )
        return

    def action() -> PreflightResult:
        workspace = Workspace.from_env(Path.cwd())
        if cluster:
            from imagekit.gpu.in_cluster import preflight_in_cluster

            if report_file or pod_file:
                raise UsageError("--cluster reads the log and the pod itself: no --report, --pod")
            wanted = in_cluster()
            spread = across()
            if spread is not None:
                from imagekit.gpu.multinode import preflight_across_nodes

                result = preflight_across_nodes(workspace, wanted, spread, progress=echo_err)
            else:
                result = preflight_in_cluster(workspace, wanted, progress=echo_err)
        else:
            if across() is not None:
                raise UsageError("--nodes is for a Job: give --emit-job or --cluster with it")
            result = stage.run(workspace, request())
        if as_json:
            echo_err(f"evidence: {result.evidence_dir}")
        return result

    run(action, as_json=as_json, human=_human, exit_code=lambda r: r.exit_code)


def _all_nodes(
    cluster: bool,
    conflicting: list[str],
    as_json: bool,
    made: Callable[[], ClusterPreflightRequest],
    node_selector: tuple[str, ...],
    parallel: int,
) -> None:
    """``--cluster --all-nodes``: a Job a matching node, a verdict each, the pool's summary
    (one line a node on stderr; with --json, one document of them all on stdout)."""
    from imagekit.gpu.all_nodes import AllNodesRequest, AllNodesResult, preflight_all_nodes
    from imagekit.gpu.job import selector_pairs

    def action() -> AllNodesResult:
        if not cluster:
            raise UsageError("--all-nodes runs a Job on each node: it needs --cluster")
        if "--node" in conflicting:
            raise UsageError(
                "--all-nodes and --node: one names every matching node, the other one node",
                hint="choose the nodes with --node-selector KEY=VALUE, or drop --all-nodes",
            )
        if conflicting:
            raise UsageError(
                f"--all-nodes creates, reads and records the Jobs itself: no {conflicting[0]}"
            )
        base = made()
        gpus = base.preflight.options.expect.gpus
        if gpus is None:  # the Job's manifest refused it first; for mypy
            raise UsageError("--all-nodes needs --gpus N (or a plan with gpu.count)")
        wanted = AllNodesRequest(
            base=base,
            selector=selector_pairs(node_selector),
            gpus=gpus,
            parallel=parallel,
        )
        result = preflight_all_nodes(Workspace.from_env(Path.cwd()), wanted, progress=echo_err)
        for line in result.lines():
            echo_err(line)
        return result

    def human(result: AllNodesResult) -> None:
        click.echo(f"{result.status}: {result.sentence}")
        for each in result.nodes:
            if each.result is not None:
                click.echo(f"  {each.node}: evidence {each.result.evidence_dir}")

    run(action, as_json=as_json, human=human, exit_code=lambda r: r.exit_code)


def _fault(text: str | None) -> dict[str, object] | None:
    if text is None:
        return None
    try:
        value = jsondoc.loads(text, limit=4096)
    except jsondoc.JsonRefused as exc:
        raise UsageError(f"--fault {text}: not JSON: {exc}") from None
    if not isinstance(value, dict) or not isinstance(value.get("rank"), int):
        raise UsageError('--fault: {"rank": N, ...}, for testing the check itself')
    return value
