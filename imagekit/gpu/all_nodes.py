"""`imagekit gpu-preflight REF --cluster --all-nodes`: the health check a pool of GPU nodes
gets before it serves, one Job per node.

The nodes are those the API server lists that carry every ``--node-selector`` label and
advertise at least the asked ``--gpus`` as allocatable ``nvidia.com/gpu``, less those
cordoned (imagekit.cluster.nodes says why each was set aside). Each node gets the List
``--emit-job`` renders, pinned to it (imagekit.gpu.job.for_node: a Job of its own, named for
the node, with a required node affinity on the node's name), and the Jobs run at once, at
most ``parallel`` at a time, each exactly as ``--cluster`` runs one
(imagekit.gpu.in_cluster.run_job): created, waited for with its progress on stderr (each
line led by its node), its log bound to its pod (namespace, name, uid, node, the kubelet's
imageID) and recorded, one ledger record per node, then deleted unless ``keep``.

The summary (``summarize``): PASS only if every chosen node passed; FAIL if any failed;
INCOMPLETE otherwise, which covers a node whose Job ended without a verdict (its deadline,
a pod that printed no report, a refusal) and a node whose verdict could not be recorded. No
chosen node at all is INCOMPLETE at once, in one line that says what the selector matched:
nothing is checked, so never a pass, and never a wait.

Ctrl-C or SIGTERM (or a deadline) in the middle: each worker stops waiting, deletes its Job
and waits for its pod to go; the interrupt then goes on up, naming the nodes already
recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from imagekit.cluster.connection import Connection, connect
from imagekit.cluster.nodes import NodeChoice, choose, list_nodes, said
from imagekit.cluster.runner import PodRunner, Progress
from imagekit.errors import ImagekitError, UsageError
from imagekit.gpu.in_cluster import ClusterPreflightRequest, run_job
from imagekit.gpu.job import for_node
from imagekit.gpu.stage import PreflightResult
from imagekit.interrupt import Stop, interrupted, wait_all
from imagekit.kinds.gpu_preflight import GpuPreflightStatus
from imagekit.workspace import Workspace

PASS, FAIL, INCOMPLETE = GpuPreflightStatus
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_PARALLEL = 8


@dataclass(frozen=True)
class AllNodesRequest:
    """The single-node request (its manifest is the template every node's Job is made from;
    its target, deadline and ``keep`` apply to each), the node selector, the GPUs a node must
    advertise, and how many Jobs run at once."""

    base: ClusterPreflightRequest
    selector: tuple[tuple[str, str], ...]
    gpus: int
    parallel: int = DEFAULT_PARALLEL

    def __post_init__(self) -> None:
        if self.parallel < 1:
            raise UsageError(f"--parallel {self.parallel}: at least 1")


@dataclass(frozen=True)
class NodeResult:
    """One node's end: its verdict (``result``, recorded), or why there is none (``error``);
    a verdict whose record the ledger refused carries both."""

    node: str
    job: str
    result: PreflightResult | None = None
    error: ImagekitError | None = None

    @property
    def status(self) -> GpuPreflightStatus:
        """The node's verdict, or INCOMPLETE where it reached none."""
        return self.result.status if self.result is not None else INCOMPLETE

    @property
    def counted(self) -> GpuPreflightStatus:
        """What the node counts as in the summary: a verdict not recorded is no pass."""
        if self.error is not None and self.status is PASS:
            return INCOMPLETE
        return self.status

    @property
    def sentence(self) -> str:
        said_here = self.result.verdict.sentence if self.result is not None else ""
        if self.error is None:
            return said_here
        return f"{said_here}; {self.error.message}" if said_here else self.error.message

    def line(self) -> str:
        """The node's summary line: its status, its pod and record, why."""
        where = []
        if self.result is not None:
            where.append(f"pod {self.result.pod}" if self.result.pod else f"job {self.job}")
            where += [f"record {seq}" for seq in self.result.ledger_seqs] or ["not recorded"]
        else:
            where.append(f"job {self.job}, nothing recorded")
        return f"{self.node}: {self.counted} ({', '.join(where)}): {self.sentence}"

    def to_json(self) -> dict[str, Any]:
        result = self.result
        return {
            "node": self.node,
            "job": self.job,
            "status": str(self.counted),
            "sentence": self.sentence,
            "pod": result.pod if result is not None else None,
            "pod_uid": result.pod_uid if result is not None else None,
            "image_id": result.image_id if result is not None else None,
            "ledger_seqs": list(result.ledger_seqs) if result is not None else [],
            "evidence": str(result.evidence_dir) if result is not None else None,
            "error": self.error.to_json() if self.error is not None else None,
            "result": result.to_json() if result is not None else None,
        }


def summarize(statuses: Iterable[GpuPreflightStatus]) -> GpuPreflightStatus:
    """The pool's status from its nodes': PASS only if every node passed (and there is at
    least one), FAIL if any failed, else INCOMPLETE."""
    seen = list(statuses)
    if any(status is FAIL for status in seen):
        return FAIL
    if seen and all(status is PASS for status in seen):
        return PASS
    return INCOMPLETE


@dataclass(frozen=True)
class AllNodesResult:
    selector: tuple[tuple[str, str], ...]
    gpus: int
    nodes: tuple[NodeResult, ...]
    skipped: tuple[tuple[str, str], ...] = ()  # nodes the selector matched, set aside: why
    why_none: str | None = None  # when no node was chosen

    @property
    def status(self) -> GpuPreflightStatus:
        return summarize(node.counted for node in self.nodes)

    @property
    def ok(self) -> bool:
        return self.status is PASS

    @property
    def exit_code(self) -> int:
        """0 for PASS; 1 for FAIL and INCOMPLETE, as one node's verdict is."""
        return 0 if self.ok else 1

    @property
    def sentence(self) -> str:
        if self.why_none is not None:
            return self.why_none
        count = dict.fromkeys(GpuPreflightStatus, 0)
        for node in self.nodes:
            count[node.counted] += 1
        return (
            f"{count[PASS]} of {len(self.nodes)} node(s) passed, {count[FAIL]} failed, "
            f"{count[INCOMPLETE]} incomplete"
            + (f"; {len(self.skipped)} set aside" if self.skipped else "")
        )

    def lines(self) -> list[str]:
        """The summary: one line a node (those set aside too), then the pool's."""
        return [
            *(node.line() for node in self.nodes),
            *(f"{node}: set aside: {why}" for node, why in self.skipped),
            f"{self.status}: {self.sentence}",
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "status": str(self.status),
            "ok": self.ok,
            "sentence": self.sentence,
            "where": "nodes",
            "node_selector": dict(self.selector),
            "gpus": self.gpus,
            "nodes": [node.to_json() for node in self.nodes],
            "skipped": [{"node": node, "why": why} for node, why in self.skipped],
        }


def preflight_all_nodes(
    workspace: Workspace, request: AllNodesRequest, progress: Progress | None = None
) -> AllNodesResult:
    """Choose the nodes, run one Job on each (bounded parallel), summarize."""
    say = progress or (lambda _line: None)
    with connect(request.base.target) as connection:
        choice = choose(list_nodes(connection, dict(request.selector)), GPU_RESOURCE,
                        request.gpus)  # fmt: skip
        for node, why in choice.skipped:
            say(f"[{node}] set aside: {why}")
        if not choice.chosen:
            return AllNodesResult(
                request.selector, request.gpus, (), choice.skipped, _none_chosen(request, choice)
            )
        template = request.base.manifest["items"][1]["spec"]["template"]
        PodRunner(connection, say).check_priority(
            {"metadata": {"name": request.base.job}, "spec": template["spec"]}
        )  # once, before any Job: the same refusal would come from every node
        say(f"{len(choice.chosen)} node(s): {', '.join(choice.chosen)}")
        done = _run_all(workspace, request, connection, choice.chosen, say)
    return AllNodesResult(request.selector, request.gpus, done, choice.skipped)


def _none_chosen(request: AllNodesRequest, choice: NodeChoice) -> str:
    labelled = f"labelled {said(dict(request.selector))}" if request.selector else "at all"
    if not choice.matched:
        return f"no node is {labelled}: nothing was checked"
    return (
        f"none of the {choice.matched} node(s) {labelled} advertises {request.gpus} "
        f"allocatable {GPU_RESOURCE} and takes new pods: nothing was checked"
    )


def _run_all(
    workspace: Workspace,
    request: AllNodesRequest,
    connection: Connection,
    nodes: tuple[str, ...],
    say: Callable[[str], None],
) -> tuple[NodeResult, ...]:
    stop = Stop()
    with ThreadPoolExecutor(max_workers=min(request.parallel, len(nodes))) as pool:
        futures: dict[str, Future[NodeResult]] = {
            node: pool.submit(_one, workspace, request, connection, node, stop, say)
            for node in nodes
        }
        try:
            wait_all(futures.values(), stop)
        except KeyboardInterrupt as exc:
            finished = _finished(futures)
            recorded = [seq for r in finished if r.result for seq in r.result.ledger_seqs]
            raise interrupted(exc).keeping(
                {
                    "summary": f"{len(finished)} of {len(nodes)} node(s) finished"
                    + (f", recorded as ledger records {recorded}" if recorded else ""),
                    "nodes": [r.to_json() for r in finished],
                    "ledger_seqs": recorded,
                },
                None,
            ) from None
    return tuple(futures[node].result() for node in nodes)


def _finished(futures: Mapping[str, Future[NodeResult]]) -> list[NodeResult]:
    return [
        future.result()
        for future in futures.values()
        if future.done() and not future.cancelled() and future.exception() is None
    ]


def _one(
    workspace: Workspace,
    request: AllNodesRequest,
    connection: Connection,
    node: str,
    stop: Stop,
    say: Callable[[str], None],
) -> NodeResult:
    """One node's Job, run as ``--cluster`` runs one; its end whatever it is."""
    stop.check()
    manifest, job = for_node(request.base.manifest, node)

    def said_here(line: str) -> None:
        say(f"[{node}] {line}")

    mine = replace(request.base, manifest=manifest, job=job)
    runner = PodRunner(connection, said_here, stop)
    try:
        result = run_job(workspace, mine, connection, runner, said_here)
    except ImagekitError as exc:
        # No verdict (the deadline, no report, a refusal), or a verdict whose record or
        # attestation was refused (RecordRefused and NotAttested carry it as ``result``).
        kept = getattr(exc, "result", None)
        return NodeResult(node, job, kept if isinstance(kept, PreflightResult) else None, exc)
    said_here(f"{result.status}")
    return NodeResult(node, job, result)
