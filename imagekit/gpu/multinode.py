"""The GPU preflight across nodes: an Indexed Job of N pods joined by torch's c10d rendezvous.

``gpu-preflight REF --emit-job --nodes N`` (and ``--cluster --nodes N``) turns the one-pod
Job of imagekit.gpu.job into the form a multi-node serving deployment needs checked: the
all-reduce crosses the nodes' network, not only one node's GPUs.

- The Job is Indexed (``completionMode: Indexed``, ``completions = parallelism = N``): the
  Job controller makes N pods at once, each with its ``JOB_COMPLETION_INDEX`` and the host
  name ``JOB-INDEX``. Each pod starts torch's launcher with ``--nnodes N --rdzv-backend c10d
  --rdzv-endpoint HOST:PORT --rdzv-id JOB``: the c10d rendezvous gathers the N launchers and
  gives each node its rank (GROUP_RANK) and each process its global rank itself; it does not
  follow the completion index.
- The rendezvous host is pod 0. On a cluster with a pod network (what a real one has) that is
  its DNS name ``JOB-0.JOB``: a headless Service named as the Job (``clusterIP: None``,
  selecting the Job's pods, publishing them before they are ready) and the pods'
  ``subdomain`` give each pod of an Indexed Job a DNS record; torch's c10d handler finds that
  the name resolves to its own address in pod 0 and hosts its TCP store there. On the node's
  network (``--host-network``) the same Service works through the cluster's DNS
  (``dnsPolicy: ClusterFirstWithHostNet``).
- ``--rendezvous-host HOST`` names the host instead (no Service is made): on one node with
  host networking, 127.0.0.1, which is what the tests' cluster (no pod network, no DNS) runs.
  There every pod matches the host, the first to bind the port hosts the store and the
  others join it as clients (torch's own fallback).

Only global rank 0 writes the report, into the log of whichever pod it ran in; every rank
prints its own marked line (imagekit/gpu/probe.py, rank_line). ``--cluster`` reads every pod's
log and binds it: each pod Succeeded, ran the image by digest (its kubelet's imageID), and
its log's rank lines are ranks of the report's world at the report's sizes (their counts of
wrong elements kept: the report's all-reduce check judges those); together the pods hold
every rank exactly once. Then the report is taken as ``--report LOG --pod POD`` takes it,
bound to the pod whose log carried it, and recorded with every pod (the record's ``pods``).
A pod that is not bound is INCOMPLETE (exit 1) with nothing recorded.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from imagekit import evidence, jsondoc
from imagekit.cluster.connection import Connection, connect
from imagekit.cluster.pods import judge_image_id, parse_image_id
from imagekit.cluster.runner import PodRef, PodRunner, PodState, Progress
from imagekit.errors import CheckFailed, UsageError
from imagekit.gpu.bind import REPORT_MARKER
from imagekit.gpu.in_cluster import (
    ClusterPreflightRequest,
    clean,
    create_items,
    job_pods,
    pod_ended,
)
from imagekit.gpu.job import CONTAINER, EmittedJob, JobOptions, emit_job, job_manifest
from imagekit.gpu.judges import StrictModel
from imagekit.gpu.launch import ProbeOptions, launcher_argv
from imagekit.gpu.report import ProbeReport
from imagekit.gpu.stage import PreflightResult, gpu_preflight
from imagekit.refs import Digest, parse_reference
from imagekit.registry.transport import is_loopback
from imagekit.runtime.cri import FinalPullStatus
from imagekit.workspace import Workspace

#: torch.distributed.run's own default port for the c10d rendezvous.
DEFAULT_RENDEZVOUS_PORT = 29400
MAX_NODES = 64
RANK_MARKER = b"@@IMAGEKIT_GPU_RANK@@ "
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
INDEX_VARIABLE = "JOB_COMPLETION_INDEX"  # the Job controller sets it in each pod
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[?[0-9A-Fa-f:.]+\]?")


@dataclass(frozen=True)
class Nodes:
    """How many pods (nodes) the Job spans and where their rendezvous is."""

    count: int
    rendezvous_host: str | None = None  # None: pod 0 by its DNS name (the headless Service)
    rendezvous_port: int = DEFAULT_RENDEZVOUS_PORT

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not 2 <= self.count <= MAX_NODES:
            raise UsageError(
                f"--nodes {self.count}: 2 to {MAX_NODES} (one node is the Job without --nodes)",
                hint="--nodes 2",
            )
        host = self.rendezvous_host
        if host is not None and not _HOST.fullmatch(host):
            raise UsageError(f"--rendezvous-host {host!r}: not a host name or an address")
        port = self.rendezvous_port
        if isinstance(port, bool) or not 1 <= port <= 65535:
            raise UsageError(f"--rendezvous-port {port}: 1 to 65535")

    def endpoint(self, job: str) -> str:
        host = self.rendezvous_host or f"{job}-0.{job}"
        return f"{host}:{self.rendezvous_port}"


def _launcher(options: ProbeOptions, gpus: int, nodes: Nodes, job: str) -> list[str]:
    """torch's launcher for one pod of N: its processes (one a GPU; one for the CPU
    self-test, so the world is N), then the c10d rendezvous options."""
    nproc = options.nproc_per_node or (1 if options.self_test else gpus)
    argv = launcher_argv("python3", "/imagekit-gpu/probe.py", "-",
                         replace(options, nproc_per_node=nproc))  # fmt: skip
    at = argv.index("--nproc-per-node") + 2
    rendezvous = [
        f"--nnodes={nodes.count}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={nodes.endpoint(job)}",
        f"--rdzv-id={job}",
    ]
    if nodes.rendezvous_host is not None and is_loopback(nodes.rendezvous_host):
        # Pods on one node's network share its name, and each runs the launcher as its pid 1:
        # the rendezvous, which tells nodes apart by (address, pid), would see one node. Each
        # pod's own loopback address (127.0.1.INDEX; all of 127/8 is the loopback) tells them
        # apart and is where its rank-0 store, if it is rank 0's, is reached.
        rendezvous.append(f"--local-addr=127.0.1.$({INDEX_VARIABLE})")
    return [*argv[:at], *rendezvous, *argv[at:]]


def multinode_manifest(
    reference: str, options: ProbeOptions, job: JobOptions, gpus: int | None, nodes: Nodes
) -> dict[str, Any]:
    """The List ``--emit-job --nodes N`` prints: the probe's ConfigMap, the headless Service
    (unless a rendezvous host is given) and the Indexed Job."""
    if options.launcher_args:
        raise UsageError(
            "--nodes sets the launcher's rendezvous itself: no --launcher-arg with it",
            hint="--rendezvous-host and --rendezvous-port say where pod 0's store listens",
        )
    manifest = job_manifest(reference, options, job, gpus)
    config_map, job_doc = manifest["items"]
    name = str(job_doc["metadata"]["name"])
    assert gpus is not None  # noqa: S101 - job_manifest refused None
    spec = job_doc["spec"]
    spec.update(completionMode="Indexed", completions=nodes.count, parallelism=nodes.count)
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    container["command"] = [*container["command"][:3], *_launcher(options, gpus, nodes, name)]
    items = [config_map]
    if nodes.rendezvous_host is None:
        pod["subdomain"] = name
        if pod.get("hostNetwork"):
            pod["dnsPolicy"] = "ClusterFirstWithHostNet"
        items.append(_service(name, job_doc["metadata"], nodes.rendezvous_port))
    items.append(job_doc)
    return {**manifest, "items": items}


def _service(name: str, metadata: dict[str, Any], port: int) -> dict[str, Any]:
    """The headless Service that gives each pod of the Job its DNS name (JOB-INDEX.JOB)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**metadata, "name": name},
        "spec": {
            "clusterIP": "None",
            "selector": {"job-name": name},
            "publishNotReadyAddresses": True,  # the rendezvous starts before any is ready
            "ports": [{"name": "rendezvous", "port": port, "targetPort": port}],
        },
    }


# --------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class PodRun:
    """One pod of the Job as it ended: its state, its log, its completion index."""

    state: PodState
    log: str
    index: int


def preflight_across_nodes(
    workspace: Workspace,
    request: ClusterPreflightRequest,
    nodes: Nodes,
    progress: Progress | None = None,
) -> PreflightResult:
    """Create the Service (if any), the ConfigMap and the Indexed Job; wait for its N pods;
    bind every pod's log; take the report back bound to its pod and record it with every
    pod; delete what was made unless ``keep``."""
    say = progress or (lambda _line: None)
    with connect(request.target) as connection:
        return _run(workspace, request, nodes, connection, PodRunner(connection, say), say)


def _kinds() -> dict[str, type[Any]]:
    from lightkube.resources.batch_v1 import Job
    from lightkube.resources.core_v1 import ConfigMap, Service

    return {"ConfigMap": ConfigMap, "Service": Service, "Job": Job}


def _run(
    workspace: Workspace,
    request: ClusterPreflightRequest,
    nodes: Nodes,
    connection: Connection,
    runner: PodRunner,
    say: Callable[[str], None],
) -> PreflightResult:
    items = [dict(item) for item in request.manifest["items"]]
    job = next(item for item in items if item["kind"] == "Job")
    namespace = str(job["metadata"].get("namespace") or connection.namespace)
    for item in items:
        item["metadata"] = {**item["metadata"], "namespace": namespace}
    runner.check_priority(
        {"metadata": {"name": request.job}, "spec": job["spec"]["template"]["spec"]}
    )
    allowed = request.deadline_s or float(job["spec"]["activeDeadlineSeconds"])
    deadline = time.monotonic() + allowed
    created: list[tuple[type[Any], str]] = []
    pods: list[PodRef] = []
    try:
        create_items(connection, namespace, items, _kinds(), created)
        say(f"job {namespace}/{request.job} created: {nodes.count} pods, rendezvous "
            f"{nodes.endpoint(request.job)}")  # fmt: skip
        pods = job_pods(runner, namespace, request.job, nodes.count, deadline)
        ran = []
        for ref, index in pods_with_index(runner, pods):
            state, log = pod_ended(runner, ref, request.job, deadline, allowed, index)
            ran.append(PodRun(state, log, index))
        return _taken(workspace, request, ran)
    finally:
        if not request.keep:
            clean(runner, namespace, created, pods, say)


def pods_with_index(runner: PodRunner, pods: list[PodRef]) -> list[tuple[PodRef, int]]:
    """Each pod with its completion index (the Job controller's annotation), by index."""
    indexed = []
    for ref in pods:
        document = runner.get(ref.namespace, ref.name) or {}
        annotations = document.get("metadata", {}).get("annotations") or {}
        indexed.append((ref, int(annotations.get(INDEX_ANNOTATION, "-1"))))
    return sorted(indexed, key=lambda pair: pair[1])


class RankSize(StrictModel):
    size_mib: float
    bytes: int = Field(ge=0)
    wrong: int = Field(ge=0)


class RankLine(StrictModel):
    """One rank's own line in its pod's log (probe.rank_line), read strictly."""

    rank: int = Field(ge=0)
    group_rank: int = Field(ge=0)
    local_rank: int = Field(ge=0)
    world_size: int = Field(ge=1)
    pid: int = Field(ge=0)
    all_reduce: list[RankSize]


_LINE_LIMIT = 64 * 1024


def rank_lines(log: str) -> tuple[list[RankLine], list[str]]:
    """The probe's rank lines in one pod's log, and what is wrong with any marked line that is
    not one (not JSON, or not the probe's shape)."""
    found: list[RankLine] = []
    refused: list[str] = []
    for line in log.encode().splitlines():
        if not line.startswith(RANK_MARKER):
            continue
        try:
            found.append(
                RankLine.model_validate(jsondoc.loads(line[len(RANK_MARKER) :], limit=_LINE_LIMIT))
            )
        except (jsondoc.JsonRefused, ValidationError) as exc:
            refused.append(f"a rank line that is not the probe's: {str(exc).splitlines()[0]}")
    return found, refused


def bind_pods(
    report: ProbeReport, ran: list[PodRun], manifest: Digest, config: Digest
) -> list[dict[str, Any]]:
    """Every pod bound to its ranks of REPORT, or CheckFailed naming what each lacks: each
    Succeeded and ran the image (its kubelet's imageID), each log's rank lines ranks of the
    report's world at the report's sizes, every rank held once. A wrong element is the
    report's all-reduce FAIL, recorded, not a binding's failure: each pod's count is kept."""
    problems: list[str] = []
    bound: list[dict[str, Any]] = []
    held: dict[int, str] = {}
    sizes = [s.get("bytes") for s in report.check("all_reduce").get("sizes") or []]
    pids = {r.rank: (r.model_extra or {}).get("pid") for r in report.ranks}
    for pod in ran:
        name = f"{pod.state.ref.namespace}/{pod.state.ref.name}"
        image_id = pod.state.image_ids.get(CONTAINER, "")
        verdict, said = judge_image_id(parse_image_id(image_id), manifest, config, image_id)
        if verdict is not FinalPullStatus.VERIFIED:
            problems.append(f"{name}: {said}")
        if pod.state.phase != "Succeeded":
            problems.append(f"{name} ended {pod.state.phase}: {pod.state.reason or 'no reason'}")
        lines, refused = rank_lines(pod.log)
        problems.extend(f"{name}: {said}" for said in refused)
        if not lines:
            problems.append(f"{name}: its log shows no rank of the probe")
        for line in lines:
            rank = line.rank
            if rank >= report.world_size:
                problems.append(f"{name}: rank {rank} is not a rank of the report's world")
                continue
            if rank in held:
                problems.append(f"{name}: rank {rank} is also in {held[rank]}'s log")
            held[rank] = name
            if line.world_size != report.world_size:
                problems.append(f"{name}: rank {rank} saw world size {line.world_size}, "
                                f"the report {report.world_size}")  # fmt: skip
            if pids.get(rank) is not None and line.pid != pids[rank]:
                problems.append(f"{name}: rank {rank}'s pid {line.pid} is not the "
                                f"report's {pids[rank]}")  # fmt: skip
            if [size.bytes for size in line.all_reduce] != sizes:
                problems.append(f"{name}: rank {rank}'s all-reduce sizes are not the report's")
        meta = pod.state.document.get("metadata", {})
        bound.append(
            {
                "pod": name,
                "uid": meta.get("uid"),
                "node": pod.state.node,
                "index": pod.index,
                "image_id": image_id,
                "group_rank": lines[0].group_rank if lines else None,
                "ranks": sorted(line.rank for line in lines),
                # its own count of wrong elements (the report's all-reduce check judges them)
                "wrong": sum(size.wrong for line in lines for size in line.all_reduce),
            }
        )  # fmt: skip
    missing = sorted(set(range(report.world_size)) - set(held))
    if missing:
        problems.append(f"ranks {missing} of the report's world are in no pod's log")
    if problems:
        raise CheckFailed(
            "gpu-preflight INCOMPLETE: the pods of the Job are not bound to the report: "
            + "; ".join(problems),
            hint="nothing was recorded; --keep keeps the Job for kubectl logs",
        )
    return bound


def _taken(
    workspace: Workspace, request: ClusterPreflightRequest, ran: list[PodRun]
) -> PreflightResult:
    """The report from the one pod whose log carries it, every pod bound to it, then taken as
    ``--report LOG --pod POD`` takes it and recorded with every pod."""
    from imagekit.gpu.bind import report_from_log
    from imagekit.registry.client import RegistryClient

    carrying = [pod for pod in ran if REPORT_MARKER in pod.log.encode()]
    if len(carrying) != 1:
        said = "; ".join(
            f"{p.state.ref.name}: {p.state.phase}, "
            + (" | ".join(p.log.strip().splitlines()[-3:]) or "an empty log")
            for p in ran
        )
        raise CheckFailed(
            f"gpu-preflight INCOMPLETE: {len(carrying)} of the Job's {len(ran)} pods printed "
            f"a probe report, not one: {said}",
            hint="the image needs python3 and torch; --keep keeps the Job for kubectl logs",
        )
    [first] = carrying
    data = first.log.encode()
    ref_name = f"{first.state.ref.namespace}/{first.state.ref.name}"
    report, _ = report_from_log(data, f"the log of pod {ref_name}")
    reference = request.preflight.reference
    assert reference is not None  # noqa: S101 - --cluster needs REF
    ref = parse_reference(reference)
    with RegistryClient() as registry:
        resolved = registry.resolve(ref, None)
    bound = bind_pods(report, ran, Digest(str(ref.digest)), Digest(str(resolved.config_digest)))
    with tempfile.TemporaryDirectory(prefix="imagekit-preflight-") as scratch:
        log_file, pod_file = Path(scratch) / "job.log", Path(scratch) / "pod.json"
        log_file.write_bytes(data)
        evidence.write_json(pod_file, first.state.document)
        taken = replace(
            request.preflight,
            report_file=log_file,
            pod_file=pod_file,
            log_read_from=ref_name,
            pods=tuple(bound),
        )
        result = gpu_preflight(workspace, taken)
    for pod in ran:
        evidence.write_bytes(result.evidence_dir / f"pod-{pod.index}.log", pod.log.encode())
        evidence.write_json(result.evidence_dir / f"pod-{pod.index}.json", pod.state.document)
    return result


def emit_across_nodes(
    workspace: Workspace, reference: str, options: ProbeOptions, job: JobOptions, nodes: Nodes
) -> EmittedJob:
    """``--emit-job --nodes N``: the one-pod Job's warnings, the manifest across N pods."""
    made = emit_job(workspace, reference, options, job)
    manifest = multinode_manifest(reference, options, job, options.expect.gpus, nodes)
    return EmittedJob(manifest, made.name, made.warnings)
