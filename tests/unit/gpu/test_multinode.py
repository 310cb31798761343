"""The Job of several pods (`gpu-preflight --emit-job/--cluster --nodes N`) and the binding
of each pod's log to its ranks of the one report."""

from __future__ import annotations

import json
from typing import Any

import pytest

from imagekit.cluster.runner import PodRef, PodState
from imagekit.errors import CheckFailed, UsageError
from imagekit.gpu.job import JobOptions
from imagekit.gpu.launch import Expectations, ProbeOptions
from imagekit.gpu.multinode import (
    RANK_MARKER,
    Nodes,
    PodRun,
    bind_pods,
    multinode_manifest,
    rank_lines,
)
from imagekit.gpu.probe import RANK_MARKER as PROBE_RANK_MARKER
from imagekit.gpu.report import ProbeReport, parse_report
from imagekit.refs import Digest
from tests.support.gpu_reports import report as written_report

DIGEST = "sha256:" + "a" * 64
CONFIG = "sha256:" + "c" * 64
REF = f"registry.example/team/m3@{DIGEST}"


def _manifest(nodes: Nodes, **given: Any) -> dict[str, Any]:
    options = given.pop("options", ProbeOptions(expect=Expectations(gpus=8)))
    return multinode_manifest(REF, options, JobOptions(name="pf", **given), 8, nodes)


def _command(manifest: dict[str, Any]) -> list[str]:
    job = manifest["items"][-1]
    return list(job["spec"]["template"]["spec"]["containers"][0]["command"])


def test_a_pod_network_gets_an_indexed_job_and_a_headless_service_naming_pod_0() -> None:
    manifest = _manifest(Nodes(2))
    config_map, service, job = manifest["items"]
    assert (config_map["kind"], service["kind"], job["kind"]) == ("ConfigMap", "Service", "Job")
    assert service["metadata"]["name"] == "pf"
    assert service["spec"] == {
        "clusterIP": "None",
        "selector": {"job-name": "pf"},
        "publishNotReadyAddresses": True,
        "ports": [{"name": "rendezvous", "port": 29400, "targetPort": 29400}],
    }
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    assert spec["backoffLimit"] == 0
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == "pf" and "dnsPolicy" not in pod
    command = _command(manifest)
    at = command.index("--nproc-per-node")
    assert command[at + 1] == "8"  # one process a GPU of each pod
    assert command[at + 2 : at + 6] == [
        "--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=pf-0.pf:29400", "--rdzv-id=pf",
    ]  # fmt: skip
    assert not any(a.startswith("--local-addr") for a in command)  # each pod's own FQDN


def test_on_the_host_network_the_service_is_reached_through_the_cluster_dns() -> None:
    manifest = _manifest(Nodes(4, rendezvous_port=29500), host_network=True)
    job = manifest["items"][-1]
    pod = job["spec"]["template"]["spec"]
    assert pod["hostNetwork"] and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert job["spec"]["completions"] == 4
    assert "--rdzv-endpoint=pf-0.pf:29500" in _command(manifest)


def test_a_loopback_rendezvous_has_no_service_and_tells_the_pods_apart_by_address() -> None:
    options = ProbeOptions(expect=Expectations(gpus=1), self_test=True)
    manifest = _manifest(Nodes(2, "127.0.0.1", 31000), host_network=True, options=options)
    assert [item["kind"] for item in manifest["items"]] == ["ConfigMap", "Job"]
    command = _command(manifest)
    assert command[command.index("--nproc-per-node") + 1] == "1"  # the self-test: one a pod
    assert "--rdzv-endpoint=127.0.0.1:31000" in command
    assert "--local-addr=127.0.1.$(JOB_COMPLETION_INDEX)" in command
    assert "subdomain" not in manifest["items"][-1]["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"count": 1}, "--nodes 1"),
        ({"count": 65}, "--nodes 65"),
        ({"count": 2, "rendezvous_host": "a b"}, "--rendezvous-host"),
        ({"count": 2, "rendezvous_port": 0}, "--rendezvous-port 0"),
    ],
)
def test_bad_nodes_are_refused_naming_the_option(given: dict[str, Any], said: str) -> None:
    with pytest.raises(UsageError, match=said):
        Nodes(**given)


def test_launcher_args_are_refused_with_nodes_which_sets_the_rendezvous_itself() -> None:
    options = ProbeOptions(expect=Expectations(gpus=8), launcher_args=("--nnodes=3",))
    with pytest.raises(UsageError, match="no --launcher-arg"):
        _manifest(Nodes(2), options=options)


def test_the_probe_and_imagekit_agree_on_the_rank_marker() -> None:
    assert PROBE_RANK_MARKER.encode() == RANK_MARKER


# --------------------------------------------------------------------------- binding


def _report() -> ProbeReport:
    document = written_report(2, sizes=(1.0, 16.0), mode="self-test")
    return parse_report(json.dumps(document).encode(), "a test")


def _line(report: ProbeReport, rank: int, wrong: int = 0, world: int = 2) -> str:
    sizes = report.check("all_reduce")["sizes"]
    line = {
        "rank": rank, "group_rank": rank, "local_rank": 0, "world_size": world, "pid": 1,
        "all_reduce": [{"size_mib": s["size_mib"], "bytes": s["bytes"], "wrong": wrong}
                       for s in sizes],
    }  # fmt: skip
    return "launcher noise\n" + RANK_MARKER.decode() + json.dumps(line) + "\n"


def _pod(index: int, log: str, image_id: str = f"registry.example/team/m3@{DIGEST}",
         phase: str = "Succeeded") -> PodRun:  # fmt: skip
    document = {
        "metadata": {"name": f"pf-{index}-x", "namespace": "ns", "uid": f"uid-{index}"},
        "spec": {"nodeName": f"node-{index}"},
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "gpu-preflight", "imageID": image_id}],
        },
    }
    return PodRun(PodState(PodRef("ns", f"pf-{index}-x", f"uid-{index}"), document), log, index)


def test_every_pod_is_bound_to_its_ranks_of_the_one_report() -> None:
    report = _report()
    bound = bind_pods(report, [_pod(0, _line(report, 1)), _pod(1, _line(report, 0))],
                      Digest(DIGEST), Digest(CONFIG))  # fmt: skip
    assert [(b["pod"], b["index"], b["ranks"], b["node"], b["uid"]) for b in bound] == [
        ("ns/pf-0-x", 0, [1], "node-0", "uid-0"),
        ("ns/pf-1-x", 1, [0], "node-1", "uid-1"),
    ]  # the rendezvous, not the completion index, gives the ranks
    assert {b["image_id"] for b in bound} == {f"registry.example/team/m3@{DIGEST}"}


def test_a_pod_s_wrong_elements_are_kept_for_the_report_s_verdict_not_a_binding_failure() -> None:
    report = _report()
    bound = bind_pods(report, [_pod(0, _line(report, 0)), _pod(1, _line(report, 1, wrong=3))],
                      Digest(DIGEST), Digest(CONFIG))  # fmt: skip
    assert [b["wrong"] for b in bound] == [0, 6]  # 3 at each of the two sizes


@pytest.mark.parametrize(
    ("second", "said"),
    [
        (lambda r: _pod(1, "no rank here\n"), "shows no rank of the probe"),
        (lambda r: _pod(1, _line(r, 0)), "rank 0 is also in ns/pf-0-x's log"),
        (lambda r: _pod(1, _line(r, 1, world=3)), "saw world size 3"),
        (lambda r: _pod(1, _line(r, 5)), "rank 5 is not a rank of the report's world"),
        (lambda r: _pod(1, _line(r, 1), phase="Failed"), "ns/pf-1-x ended Failed"),
        (
            lambda r: _pod(1, _line(r, 1), image_id="registry.example/team/m3@sha256:" + "b" * 64),
            "not the expected",
        ),
    ],
)
def test_a_pod_not_bound_is_incomplete_and_says_why(second: Any, said: str) -> None:
    report = _report()
    with pytest.raises(CheckFailed, match="not bound to the report") as caught:
        bind_pods(report, [_pod(0, _line(report, 0)), second(report)],
                  Digest(DIGEST), Digest(CONFIG))  # fmt: skip
    assert said in caught.value.message


def test_rank_lines_read_only_the_marked_lines_and_strictly() -> None:
    report = _report()
    log = (
        _line(report, 1) + "@@IMAGEKIT_GPU_REPORT@@ {}\n" + RANK_MARKER.decode() + '{"rank": "1"}\n'
    )
    lines, refused = rank_lines(log)
    assert [line.rank for line in lines] == [1]
    assert len(refused) == 1 and "not the probe's" in refused[0]


def test_a_marked_line_that_is_not_the_probe_s_is_a_binding_failure() -> None:
    report = _report()
    second = _pod(1, _line(report, 1) + RANK_MARKER.decode() + "not json\n")
    with pytest.raises(CheckFailed, match="a rank line that is not the probe's"):
        bind_pods(report, [_pod(0, _line(report, 0)), second], Digest(DIGEST), Digest(CONFIG))


# --------------------------------------------------------------------------- the command line


def _cli(*args: str) -> Any:
    from click.testing import CliRunner

    from imagekit.cli import main

    return CliRunner().invoke(main, ["gpu-preflight", *args])


def test_emit_job_with_nodes_prints_the_indexed_job() -> None:
    done = _cli(REF, "--emit-job", "--nodes", "3", "--gpus", "4", "--job-name", "pf", "--json")
    assert done.exit_code == 0, done.output
    manifest = json.loads(done.stdout)
    assert [item["kind"] for item in manifest["items"]] == ["ConfigMap", "Service", "Job"]
    assert manifest["items"][-1]["spec"]["completions"] == 3


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--emit-job", "--gpus", "1", "--rendezvous-host", "127.0.0.1"), "give --nodes N"),
        (("--self-test", "--nodes", "2"), "--nodes is for a Job"),
        (("--emit-job", "--gpus", "1", "--nodes", "1"), "--nodes 1: 2 to 64"),
    ],
)
def test_nodes_options_out_of_place_are_bad_input_exit_2(args: tuple[str, ...], said: str) -> None:
    done = _cli(REF, *args)
    assert done.exit_code == 2, done.output
    assert said in done.output
