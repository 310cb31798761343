"""`imagekit gpu-preflight REF --cluster --all-nodes` on the real cluster: a Job per node that
matches the selector and advertises the GPUs, a verdict per node bound to its pod and
recorded, the pool's summary, no Job left behind; a selector that matches nothing ends at
once in one line.

The cluster has one node, and its GPU is the STAND-IN status patch (Cluster.advertise_gpus),
not NVIDIA's device plugin; several nodes are not started here (two kubelets on one machine
would share the kubelet's host folders), so the pool of one is what is run, and the summary of
several nodes' verdicts is tested in tests/unit/gpu/test_all_nodes.py. No pod network, hence
``--host-network``; the base image has no torch, so each node's verdict is INCOMPLETE.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.cli import MAIN
from tests.support.cluster import Cluster, missing_host_dirs, tidy_host_dirs
from tests.support.tiny_image import run_imagekit

# Small requests: the test node has two cores; the Job's defaults are a GPU node's.
_SMALL = ("--gpus", "1", "--cpu", "500m", "--memory", "1Gi", "--host-network")
# How a pod the kubelet refused at admission ends: its status' reason.
_REFUSED_BY_THE_KUBELET = ("UnexpectedAdmissionError", "OutOfnvidia.com/gpu")


pytestmark = pytest.mark.usefixtures("as_a_user")  # KUBECONFIG, as a user's (conftest)


def _ours(cluster: Cluster, prefix: str) -> list[str]:
    """Every Job, pod and ConfigMap on the cluster whose name starts with ``prefix``."""
    return [
        f"{kind}/{item['metadata']['name']}"
        for kind in ("jobs", "pods", "configmaps")
        for item in cluster.kubectl_json("get", kind)["items"]
        if item["metadata"]["name"].startswith(prefix)
    ]


def _records(workspace: Workspace) -> list[dict[str, Any]]:
    if not workspace.ledger_path.exists():
        return []
    lines = workspace.ledger_path.read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "gpu-preflight"]


def test_every_matching_gpu_node_gets_a_job_a_verdict_bound_to_its_pod_and_the_pool_a_summary(
    cluster: Cluster, base_image: BaseImage, workspace: Workspace
) -> None:
    base = f"pool-{secrets.token_hex(3)}"
    job = f"{base}-{cluster.node_name}"  # the node's Job: the base name, then the node's
    argv = (
        "gpu-preflight", base_image.reference, "--cluster", "--all-nodes", *_SMALL,
        "--node-selector", "kubernetes.io/os=linux", "--job-name", base,
        "--deadline", "240", "--json",
    )  # fmt: skip
    cluster.advertise_gpus(1)  # the stand-in for the device plugin (see above)
    try:
        done = run_imagekit(*argv)
        if any(word in done.stderr for word in _REFUSED_BY_THE_KUBELET):
            # The stand-in's race (test_gpu_job.py says it): the kubelet's own copy of its
            # node did not show the patched GPU yet and refused the pod at admission; the
            # Job was deleted and nothing recorded, so the same command once more.
            done = run_imagekit(*argv)
    finally:
        cluster.advertise_gpus(0)
    assert done.returncode == 1, done.stderr + cluster.tails()  # INCOMPLETE is exit 1
    document = json.loads(done.stdout)
    assert document["status"] == "GPU_PREFLIGHT_INCOMPLETE", document
    assert document["node_selector"] == {"kubernetes.io/os": "linux"}
    [node] = document["nodes"]
    assert (node["node"], node["job"], node["status"]) == (
        cluster.node_name, job, "GPU_PREFLIGHT_INCOMPLETE",
    )  # fmt: skip
    assert "torch is not importable" in json.dumps(node["result"]["preflight"]["checks"])
    evidence = Path(node["evidence"])
    pod = json.loads((evidence / "pod.json").read_text())
    meta = pod["metadata"]
    assert meta["labels"]["job-name"] == job
    assert node["pod"] == f"{meta['namespace']}/{meta['name']}"
    assert node["pod_uid"] == meta["uid"] == node["result"]["pod_uid"]
    assert pod["spec"]["nodeName"] == cluster.node_name
    assert pod["spec"]["affinity"]["nodeAffinity"]  # pinned through the scheduler
    [status] = [c for c in pod["status"]["containerStatuses"] if c["name"] == "gpu-preflight"]
    assert status["imageID"] == (
        f"{base_image.registry_host}/{base_image.repository}@{base_image.digest}"
    )
    [record] = _records(workspace)  # one node, one record
    assert node["ledger_seqs"] == [record["seq"]]
    details = record["details"]
    assert (details["pod"], details["pod_uid"], details["node"]) == (
        node["pod"], meta["uid"], cluster.node_name,
    )  # fmt: skip
    lines = done.stderr.splitlines()
    assert f"[{cluster.node_name}] job default/{job} created" in lines  # progress, by node
    assert any(
        line.startswith(f"{cluster.node_name}: GPU_PREFLIGHT_INCOMPLETE (pod {node['pod']}, "
                        f"record {record['seq']})")
        for line in lines
    ), done.stderr  # fmt: skip
    assert lines[-1].startswith(
        "GPU_PREFLIGHT_INCOMPLETE: 0 of 1 node(s) passed, 0 failed, 1 incomplete"
    ), lines[-1]  # (the CLI's `evidence:` line of a single run is not printed here)
    assert _ours(cluster, base) == []  # the Job deleted, its pod and ConfigMap with it


@pytest.mark.parametrize(
    ("selector", "gpus", "said"),
    [
        ("pool=none-such", 1, "no node is labelled pool=none-such: nothing was checked"),
        (
            "kubernetes.io/os=linux",
            0,  # the node is there, but advertises no GPU
            "none of the 1 node(s) labelled kubernetes.io/os=linux advertises 1 allocatable "
            "nvidia.com/gpu and takes new pods: nothing was checked",
        ),
    ],
)
def test_a_selector_that_matches_no_gpu_node_ends_at_once_in_one_line(
    cluster: Cluster, base_image: BaseImage, workspace: Workspace, selector: str, gpus: int,
    said: str,
) -> None:  # fmt: skip
    base = f"none-{secrets.token_hex(3)}"
    cluster.advertise_gpus(gpus)
    started = time.monotonic()
    done = run_imagekit(
        "gpu-preflight", base_image.reference, "--cluster", "--all-nodes", *_SMALL,
        "--node-selector", selector, "--job-name", base, "--deadline", "240", "--json",
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    assert took < 30, took  # listed, not waited for
    assert f"GPU_PREFLIGHT_INCOMPLETE: {said}" in done.stderr.splitlines()
    document = json.loads(done.stdout)
    assert (document["status"], document["nodes"]) == ("GPU_PREFLIGHT_INCOMPLETE", [])
    assert document["sentence"] == said
    if gpus == 0:
        assert document["skipped"] == [
            {"node": cluster.node_name, "why": "allocatable nvidia.com/gpu 0 < 1"}
        ]
    assert _ours(cluster, base) == []
    assert _records(workspace) == []


def test_ctrl_c_while_a_node_s_pod_waits_deletes_its_job_and_exits_130(
    cluster: Cluster, base_image: BaseImage, workspace: Workspace
) -> None:
    base = f"intr-{secrets.token_hex(3)}"
    cluster.advertise_gpus(1)
    # More memory than the node has: the node is chosen (it has the GPU) and its pod stays
    # Pending ("Insufficient memory") until the interrupt.
    child = subprocess.Popen(  # noqa: S603 - the CLI as a user runs it
        [*MAIN, "gpu-preflight", base_image.reference, "--cluster", "--all-nodes",
         "--gpus", "1", "--cpu", "100m", "--memory", "4000Gi", "--host-network",
         "--job-name", base, "--deadline", "240"],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ,
    )  # fmt: skip
    said: list[str] = []
    try:
        assert child.stderr is not None
        for line in child.stderr:
            said.append(line.rstrip("\n"))
            if "Insufficient memory" in line:
                break
        else:
            pytest.fail("the pod never said why it waits:\n" + "\n".join(said))
        child.send_signal(signal.SIGINT)
        _, rest = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
        cluster.advertise_gpus(0)
    said += rest.splitlines()
    assert child.returncode == 130, "\n".join(said)
    assert any("interrupted by SIGINT" in line for line in said), said
    assert _ours(cluster, base) == []  # the Job, its pod and its ConfigMap gone
    assert _records(workspace) == []


def test_the_kubelet_s_host_folders_are_tidied_when_empty_and_made_by_the_cluster() -> None:
    """Cluster.stop's part for the folders the kubelet does not take from its root: a stale
    socket removed, a live one (another kubelet's) kept, a folder removed only if made and
    empty. Here on folders of the test's own, in place of the host's: a short folder of /tmp,
    since a socket's path may be 107 bytes at most and pytest's tmp_path under xdist can be
    longer (seen in CI: "AF_UNIX path too long")."""
    with tempfile.TemporaryDirectory(prefix="ik-") as short:
        _tidy_in(Path(short))


def _tidy_in(tmp_path: Path) -> None:
    root = tmp_path / "cluster"
    plugins, logs = tmp_path / "var" / "lib" / "kubelet" / "device-plugins", tmp_path / "logs"
    dirs = (plugins, logs)
    logs.mkdir()  # there before: never removed
    made = missing_host_dirs(dirs)
    assert made == (plugins, plugins.parent, plugins.parent.parent, plugins.parent.parent.parent)
    plugins.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(plugins / "kubelet.sock"))
    # its kubelet stopped: nobody listens
    (logs / "pod_x_c.log").symlink_to(root / "pod-logs" / "x" / "c" / "0.log")
    (logs / "other.log").symlink_to(tmp_path / "elsewhere.log")  # not this cluster's
    tidy_host_dirs(root, made, dirs)
    assert not (tmp_path / "var").exists()
    assert sorted(p.name for p in logs.iterdir()) == ["other.log"]

    plugins.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as live:  # another cluster's kubelet, still running
        live.bind(str(plugins / "kubelet.sock"))
        live.listen()
        tidy_host_dirs(root, made, dirs)
        assert (plugins / "kubelet.sock").exists()
