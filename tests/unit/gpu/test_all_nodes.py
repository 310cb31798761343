"""The pool's summary of `gpu-preflight --cluster --all-nodes`: each node's end, what it
counts as, and the pool's status and exit code from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.errors import CheckFailed, ClusterError, RecordRefused
from imagekit.gpu.all_nodes import AllNodesResult, NodeResult, summarize
from imagekit.gpu.launch import ProbeOptions
from imagekit.gpu.report import Verdict
from imagekit.gpu.stage import PreflightResult
from imagekit.kinds.gpu_preflight import GpuPreflightPredicate, GpuPreflightStatus
from imagekit.version import __version__

PASS, FAIL, INCOMPLETE = GpuPreflightStatus
SELECTOR = (("pool", "h100"),)


def _result(status: GpuPreflightStatus, node: str, seq: int | None) -> PreflightResult:
    pod = f"default/preflight-{node}-x7k2p"
    predicate = GpuPreflightPredicate(
        status=status, scope="a Job's pod", where="pod", node=node, image_id=None, pod=pod,
        world_size=0, gpus=[], expected=ProbeOptions().expected(), checks=[], failing=[],
        all_reduce=[], versions={}, preflight_at="2026-12-07T18:00:00Z",
        imagekit_version=__version__,
    )  # fmt: skip
    return PreflightResult(
        verdict=Verdict(status, f"{status} said so", ()),
        where="pod",
        scope="a Job's pod",
        reference="registry.example/m3@sha256:" + "a" * 64,
        image_id="registry.example/m3@sha256:" + "a" * 64,
        pod=pod,
        report=None,
        predicate=predicate,
        evidence_dir=Path("/evidence") / node,
        result_path=Path("/evidence") / node / "gpu-preflight.json",
        report_path=None,
        ledger_seqs=(seq,) if seq is not None else (),
        pod_uid=f"uid-{node}",
    )


def _node(name: str, status: GpuPreflightStatus, seq: int) -> NodeResult:
    return NodeResult(name, f"job-{name}", _result(status, name, seq))


@pytest.mark.parametrize(
    ("statuses", "pool"),
    [
        ((PASS, PASS, PASS), PASS),
        ((PASS,), PASS),
        ((PASS, FAIL, PASS), FAIL),
        ((INCOMPLETE, FAIL), FAIL),  # a failed node is a failed pool, whatever else
        ((PASS, INCOMPLETE, PASS), INCOMPLETE),
        ((INCOMPLETE, INCOMPLETE), INCOMPLETE),
        ((), INCOMPLETE),  # nothing checked is never a pass
    ],
)
def test_the_pool_passes_only_if_every_node_passed_and_fails_if_any_failed(
    statuses: tuple[GpuPreflightStatus, ...], pool: GpuPreflightStatus
) -> None:
    assert summarize(statuses) is pool


def test_each_node_gets_its_line_and_the_pool_its_status_and_exit_code() -> None:
    nodes = (
        _node("gpu-a", PASS, 11),
        _node("gpu-b", FAIL, 12),
        NodeResult(
            "gpu-c",
            "job-gpu-c",
            error=CheckFailed("gpu-preflight INCOMPLETE: pod default/p was still Pending"),
        ),  # fmt: skip
    )
    result = AllNodesResult(SELECTOR, 8, nodes, skipped=(("gpu-d", "cordoned"),))
    assert (result.status, result.exit_code, result.ok) == (FAIL, 1, False)
    lines = result.lines()
    assert lines == [
        "gpu-a: GPU_PREFLIGHT_PASS (pod default/preflight-gpu-a-x7k2p, record 11): "
        "GPU_PREFLIGHT_PASS said so",
        "gpu-b: GPU_PREFLIGHT_FAIL (pod default/preflight-gpu-b-x7k2p, record 12): "
        "GPU_PREFLIGHT_FAIL said so",
        "gpu-c: GPU_PREFLIGHT_INCOMPLETE (job job-gpu-c, nothing recorded): gpu-preflight "
        "INCOMPLETE: pod default/p was still Pending",
        "gpu-d: set aside: cordoned",
        "GPU_PREFLIGHT_FAIL: 1 of 3 node(s) passed, 1 failed, 1 incomplete; 1 set aside",
    ]
    document = result.to_json()
    assert document["status"] == "GPU_PREFLIGHT_FAIL"
    assert document["node_selector"] == {"pool": "h100"}
    by_node = {entry["node"]: entry for entry in document["nodes"]}
    assert by_node["gpu-a"]["pod_uid"] == "uid-gpu-a"
    assert by_node["gpu-a"]["ledger_seqs"] == [11]
    assert by_node["gpu-a"]["result"]["pod_uid"] == "uid-gpu-a"  # the single-node document
    assert by_node["gpu-c"]["error"]["type"] == "CheckFailed"
    assert by_node["gpu-c"]["ledger_seqs"] == []
    assert document["skipped"] == [{"node": "gpu-d", "why": "cordoned"}]


def test_every_node_passed_is_exit_0() -> None:
    result = AllNodesResult(SELECTOR, 8, (_node("gpu-a", PASS, 1), _node("gpu-b", PASS, 2)))
    assert (result.status, result.exit_code) == (PASS, 0)
    assert result.lines()[-1] == "GPU_PREFLIGHT_PASS: 2 of 2 node(s) passed, 0 failed, 0 incomplete"


def test_a_pass_whose_record_was_refused_counts_as_incomplete() -> None:
    refused = RecordRefused(
        "the ledger refused the record: its last line does not verify",
        hint="imagekit ledger verify",
        ledger="ledger.jsonl",
        problem="line 3's hash",
    )
    kept = _result(PASS, "gpu-b", None)  # the verdict reached, no record
    nodes = (_node("gpu-a", PASS, 1), NodeResult("gpu-b", "job-b", kept, refused))
    result = AllNodesResult(SELECTOR, 8, nodes)
    assert nodes[1].status is PASS and nodes[1].counted is INCOMPLETE
    assert (result.status, result.exit_code) == (INCOMPLETE, 1)
    assert result.lines()[1] == (
        "gpu-b: GPU_PREFLIGHT_INCOMPLETE (pod default/preflight-gpu-b-x7k2p, not recorded): "
        "GPU_PREFLIGHT_PASS said so; the ledger refused the record: its last line does not verify"
    )


def test_an_api_refusal_on_one_node_leaves_the_pool_incomplete() -> None:
    refused = ClusterError("creating Job default/x: admission webhook denied", status=403)
    nodes = (_node("gpu-a", PASS, 1), NodeResult("gpu-b", "job-b", error=refused))
    result = AllNodesResult(SELECTOR, 8, nodes)
    assert (result.status, result.exit_code) == (INCOMPLETE, 1)


def test_no_node_chosen_is_incomplete_in_one_line() -> None:
    result = AllNodesResult(SELECTOR, 8, (), why_none="no node is labelled pool=h100")
    assert (result.status, result.exit_code) == (INCOMPLETE, 1)
    assert result.lines() == ["GPU_PREFLIGHT_INCOMPLETE: no node is labelled pool=h100"]
    assert result.to_json()["nodes"] == []
