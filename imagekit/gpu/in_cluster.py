"""`imagekit gpu-preflight REF --cluster`: the Job `--emit-job` prints, run by imagekit itself.

The manifest is the one ``--emit-job`` renders (imagekit.gpu.job.job_manifest: what is applied
is what is emitted): its ConfigMap (the probe) and its Job are created, the Job's pod is
waited for with progress and a deadline, its log read back, and the report taken exactly as
``--report LOG --pod POD`` takes it (imagekit.gpu.stage.gpu_preflight): the pod document the
API server gave IS the pod file, the log imagekit read from that pod IS the report file. The
binding (imagekit.gpu.bind) holds it to the pod: Succeeded, the Job's container, its node,
the kubelet's imageID naming the digest.

A pod the scheduler cannot place (no node with ``nvidia.com/gpu``, a selector nothing
matches, a taint not tolerated), an image the kubelet cannot pull, or a Job whose pod the
API server's admission refuses (the Job controller's FailedCreate event) ends INCOMPLETE at
the deadline in the cluster's own words, exit 1, never a hang. The Job is deleted afterwards
(propagation Background: its pod goes with it, and is waited for), with its ConfigMap,
unless ``keep``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from imagekit import evidence
from imagekit.cluster.connection import ClusterTarget, Connection, connect
from imagekit.cluster.runner import PodRef, PodRun, PodRunner, PodState, Progress, api_errors
from imagekit.errors import CheckFailed, ClusterError
from imagekit.gpu.bind import REPORT_MARKER
from imagekit.gpu.job import CONTAINER
from imagekit.gpu.stage import PreflightRequest, PreflightResult, gpu_preflight
from imagekit.workspace import Workspace

_GONE_S = 120.0  # how long a deleted Job's pod may take to go
_TAIL_LINES = 5


@dataclass(frozen=True)
class ClusterPreflightRequest:
    """The emitted manifest (a List: the probe's ConfigMap and the Job), where to run it,
    how long to wait, and the preflight it is taken back as (its options, plan, key)."""

    manifest: dict[str, Any]
    job: str  # the Job's name
    preflight: PreflightRequest  # reference and options; report and pod are filled here
    target: ClusterTarget = field(default_factory=ClusterTarget)
    deadline_s: float | None = None  # from creating the Job to its pod's end [the Job's]
    keep: bool = False


def preflight_in_cluster(
    workspace: Workspace, request: ClusterPreflightRequest, progress: Progress | None = None
) -> PreflightResult:
    """Create the Job, wait for its pod, take its report back bound to the pod, record it;
    delete the Job (and its pod and ConfigMap) unless ``keep``."""
    say = progress or (lambda _line: None)
    with connect(request.target) as connection:
        return run_job(workspace, request, connection, PodRunner(connection, say), say)


def submitted_items(manifest: dict[str, Any], namespace: str) -> tuple[dict[str, Any], ...]:
    """The emitted List's items (the probe's ConfigMap, the Job) exactly as ``--cluster``
    creates them in NAMESPACE: what a dry run or an offline judge should be given."""
    items = tuple(dict(item) for item in manifest["items"])
    for item in items:
        item["metadata"] = {**item["metadata"], "namespace": namespace}
    return items


def run_job(
    workspace: Workspace,
    request: ClusterPreflightRequest,
    connection: Connection,
    runner: PodRunner,
    say: Callable[[str], None],
) -> PreflightResult:
    """One Job on one connection (``preflight_in_cluster``'s, or one node's of
    ``gpu-preflight --all-nodes``): created, waited for, taken back, cleaned up."""
    from lightkube.resources.batch_v1 import Job
    from lightkube.resources.core_v1 import ConfigMap

    namespace = str(
        request.manifest["items"][1]["metadata"].get("namespace") or connection.namespace
    )
    config_map, job = submitted_items(request.manifest, namespace)
    template = job["spec"]["template"]
    runner.check_priority({"metadata": {"name": request.job}, "spec": template["spec"]})
    allowed = request.deadline_s or float(job["spec"]["activeDeadlineSeconds"])
    deadline = time.monotonic() + allowed
    created: list[tuple[type[Any], str]] = []
    pods: list[PodRef] = []
    try:
        kinds = {"ConfigMap": ConfigMap, "Job": Job}
        create_items(connection, namespace, (config_map, job), kinds, created)
        say(f"job {namespace}/{request.job} created")
        pods = job_pods(runner, namespace, request.job, 1, deadline)
        state, log = pod_ended(runner, pods[0], request.job, deadline, allowed)
        return _taken(workspace, request, state, log)
    finally:
        if not request.keep:
            clean(runner, namespace, created, pods, say)


def create_items(
    connection: Connection,
    namespace: str,
    items: tuple[dict[str, Any], ...] | list[dict[str, Any]],
    kinds: dict[str, type[Any]],
    created: list[tuple[type[Any], str]],
) -> None:
    """Create each item in order, appending it to ``created`` as soon as it exists (so the
    caller's cleanup deletes what was made even when a later one is refused)."""
    for item in items:
        name = str(item["metadata"]["name"])
        kind = kinds[item["kind"]]
        with api_errors(f"creating {item['kind']} {namespace}/{name}"):
            connection.client.create(kind.from_dict(item), namespace=namespace)
        created.append((kind, name))


def job_pods(
    runner: PodRunner, namespace: str, job: str, count: int, deadline: float
) -> list[PodRef]:
    """The Job's COUNT pods once the Job controller made them; at the deadline, INCOMPLETE
    with why it made none or too few (its FailedCreate events: an admission refusal)."""
    from lightkube.resources.core_v1 import Pod

    while True:
        with api_errors(f"listing the pods of job {namespace}/{job}"):
            listed = list(
                runner.connection.client.list(Pod, namespace=namespace, labels={"job-name": job})
            )
        found = []
        for pod in listed:
            meta = pod.metadata
            assert meta is not None and meta.name and meta.uid  # noqa: S101 - the API's
            found.append(PodRef(namespace, meta.name, meta.uid))
        if len(found) >= count:
            return found
        if time.monotonic() >= deadline:
            why = _failed_creates(runner, namespace, job)
            made = "no pod" if not found else f"{len(found)} of its {count} pods"
            raise CheckFailed(
                f"gpu-preflight INCOMPLETE: job {namespace}/{job} made {made} in time: "
                + ("; ".join(why) if why else "no reason given"),
                hint="see `kubectl describe job`; an admission refusal names its plugin",
            )
        runner.pause()


def pod_ended(
    runner: PodRunner,
    ref: PodRef,
    job: str,
    deadline: float,
    allowed: float,
    index: int | None = None,
) -> tuple[PodState, str]:
    """One pod of the Job waited for until it ended, and its log; INCOMPLETE in the
    cluster's words (its phase, the scheduler's or kubelet's reason) if it had not ended by
    the deadline. The Job's pod: the Job deletes it (``clean``)."""
    run = PodRun(runner, ref, CONTAINER)
    state = run.wait(max(0.0, deadline - time.monotonic()))
    if state.timed_out or not state.finished:
        which = f"pod {ref.namespace}/{ref.name}" + ("" if index is None else f" (index {index})")
        raise CheckFailed(
            f"gpu-preflight INCOMPLETE: {which} of job {job} was still {state.phase} after "
            f"{allowed:g} s: {state.reason or 'no reason given'}",
            hint="see `kubectl describe pod`; --keep keeps the Job to look at",
        )
    return state, run.logs()


def _failed_creates(runner: PodRunner, namespace: str, job: str) -> list[str]:
    from lightkube.resources.core_v1 import Event

    with api_errors(f"reading the events of job {namespace}/{job}"):
        events = runner.connection.client.list(
            Event, namespace=namespace, fields={"involvedObject.name": job}
        )
        return [f"{e.reason}: {e.message}" for e in events if e.type == "Warning"]


def _taken(
    workspace: Workspace, request: ClusterPreflightRequest, state: PodState, log: str
) -> PreflightResult:
    """The log and the pod as ``--report LOG --pod POD`` takes them, both kept as evidence."""
    data = log.encode()
    if REPORT_MARKER not in data:
        tail = " | ".join(log.strip().splitlines()[-_TAIL_LINES:]) or "an empty log"
        raise CheckFailed(
            f"gpu-preflight INCOMPLETE: pod {state.ref.namespace}/{state.ref.name} ended "
            f"{state.phase} without a probe report ({state.reason or 'no reason given'}): {tail}",
            hint="the image needs python3 on its PATH; --keep keeps the Job for kubectl logs",
        )
    with tempfile.TemporaryDirectory(prefix="imagekit-preflight-") as scratch:
        log_file, pod_file = Path(scratch) / "job.log", Path(scratch) / "pod.json"
        log_file.write_bytes(data)
        evidence.write_json(pod_file, state.document)
        taken = replace(
            request.preflight,
            report_file=log_file,
            pod_file=pod_file,
            log_read_from=f"{state.ref.namespace}/{state.ref.name}",
        )
        result = gpu_preflight(workspace, taken)
    evidence.write_bytes(result.evidence_dir / "job.log", data)
    evidence.write_json(result.evidence_dir / "pod.json", state.document)
    return result


def clean(
    runner: PodRunner,
    namespace: str,
    created: list[tuple[type[Any], str]],
    pods: list[PodRef],
    say: Callable[[str], None],
) -> None:
    """Delete what was created (the Job with propagation Background, so its pods go), then
    wait until every pod of it is gone (one Terminating still holds its name)."""
    from lightkube.types import CascadeType

    for kind, name in reversed(created):
        try:
            with api_errors(f"deleting {kind.__name__} {namespace}/{name}"):
                runner.connection.client.delete(
                    kind, name, namespace=namespace, cascade=CascadeType.BACKGROUND
                )
        except ClusterError as exc:
            if exc.status != 404:
                raise
    for ref in pods:
        runner.wait_gone(namespace, ref.name, _GONE_S)
    if created:
        say(f"job {namespace}/{created[-1][1]} deleted, with its {_pods(len(pods))}")


def _pods(count: int) -> str:
    return "pod" if count <= 1 else f"{count} pods"
