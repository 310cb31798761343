"""`imagekit gpu-preflight REF --cluster` on the real cluster: the Job `--emit-job` renders,
created by imagekit, its pod waited for, its log taken back bound to the pod and recorded,
the Job gone afterwards.

The node's GPU is the STAND-IN status patch (Cluster.advertise_gpus), not NVIDIA's device
plugin: the scheduler places the pod, but no device reaches the container. This cluster has
no pod network, hence ``--host-network``. The session's base image has no torch, so the probe
itself runs (not torch's launcher) and reports INCOMPLETE: "torch is not importable".
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import pytest

from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.cluster import Cluster
from tests.support.tiny_image import run_imagekit

# Small requests: the test node has two cores; the Job's defaults are a GPU node's.
_SMALL = ("--gpus", "1", "--cpu", "500m", "--memory", "1Gi", "--host-network")


pytestmark = pytest.mark.usefixtures("as_a_user")  # KUBECONFIG, as a user's (conftest)


def _left(cluster: Cluster, job: str) -> list[str]:
    """Whatever of the Job is still on the cluster: the Job, its pods, its ConfigMap."""
    found = []
    for kind, selector in (("jobs", None), ("pods", f"job-name={job}"), ("configmaps", None)):
        args = ("get", kind, *(("-l", selector) if selector else ()))
        for item in cluster.kubectl_json(*args)["items"]:
            name = item["metadata"]["name"]
            if selector or name in (job, f"{job}-probe"):
                found.append(f"{kind}/{name}")
    return found


def test_no_node_with_a_gpu_ends_incomplete_at_the_deadline_with_the_schedulers_words(
    cluster: Cluster, base_image: BaseImage, workspace: Workspace
) -> None:
    cluster.advertise_gpus(0)
    job = f"preflight-{secrets.token_hex(3)}"
    started = time.monotonic()
    done = run_imagekit(
        "gpu-preflight", base_image.reference, "--cluster", *_SMALL,
        "--job-name", job, "--deadline", "8",
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr + cluster.tails()
    assert "gpu-preflight INCOMPLETE" in done.stderr
    assert "Insufficient nvidia.com/gpu" in done.stderr  # the scheduler's own words
    assert f"job default/{job} created" in done.stderr  # progress on stderr
    assert took < 8 + 60, took  # the deadline, then the clean-up; never a hang
    assert _left(cluster, job) == []
    assert not workspace.ledger_path.exists() or "gpu-preflight" not in (
        workspace.ledger_path.read_text()
    )


def test_the_job_runs_on_the_stand_in_gpu_node_and_its_verdict_is_bound_to_the_pod(
    cluster: Cluster, base_image: BaseImage, workspace: Workspace
) -> None:
    job = f"preflight-{secrets.token_hex(3)}"
    cluster.advertise_gpus(1)  # the stand-in for the device plugin (see above)
    try:
        done = run_imagekit(
            "gpu-preflight", base_image.reference, "--cluster", *_SMALL,
            "--job-name", job, "--deadline", "240", "--json",
        )  # fmt: skip
    finally:
        cluster.advertise_gpus(0)
    assert done.returncode == 1, done.stderr + cluster.tails()  # INCOMPLETE is exit 1
    document = json.loads(done.stdout)
    assert document["status"] == "GPU_PREFLIGHT_INCOMPLETE", document
    assert document["where"] == "pod"
    checks = {c["name"]: c for c in document["preflight"]["checks"]}
    assert "torch is not importable" in json.dumps(checks), checks
    evidence = Path(document["evidence"])
    pod = json.loads((evidence / "pod.json").read_text())
    meta = pod["metadata"]
    assert meta["labels"]["job-name"] == job
    assert document["pod"] == f"{meta['namespace']}/{meta['name']}"
    assert pod["spec"]["nodeName"] == cluster.node_name
    assert pod["status"]["phase"] == "Succeeded"
    [status] = [c for c in pod["status"]["containerStatuses"] if c["name"] == "gpu-preflight"]
    assert status["imageID"] == (
        f"{base_image.registry_host}/{base_image.repository}@{base_image.digest}"
    )
    assert b"@@IMAGEKIT_GPU_REPORT@@" in (evidence / "job.log").read_bytes()
    [record] = [
        json.loads(line)
        for line in workspace.ledger_path.read_text().splitlines()
        if json.loads(line)["kind"] == "gpu-preflight"
    ]
    assert record["status"] == "GPU_PREFLIGHT_INCOMPLETE"
    assert record["images"] == {"image": base_image.reference}
    details = record["details"]
    assert (details["where"], details["pod"], details["node"]) == (
        "pod", document["pod"], cluster.node_name,
    )  # fmt: skip
    assert details["pod_uid"] == meta["uid"] == document["pod_uid"]  # --json says it too
    assert f"pod {document['pod']}: Succeeded on {cluster.node_name}" in done.stderr
    assert _left(cluster, job) == []  # the Job deleted, its pod and ConfigMap with it
