"""The Job `imagekit gpu-preflight --emit-job` prints, on the real API server, scheduler,
Job controller and kubelet: admitted, held Pending while no node has a GPU (the scheduler's
reason read back), placed once the node advertises one, run by digest.

The node's GPU is the STAND-IN status patch (Cluster.advertise_gpus), not NVIDIA's device
plugin: no device reaches the container. This cluster has no pod network, so the test adds
``hostNetwork: true`` to the emitted pod template; nothing else of the manifest is changed.
The session's base image has no torch, so the container starts the probe alone (not torch's
launcher), which reports INCOMPLETE ("torch is not importable"): what is proved here is the
cluster's side (admission, scheduling, the pull by digest, the log), not the probe's GPU
checks, which the GPU tests run on the seed replica's real torch.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from imagekit.cluster.connection import ClusterTarget, connect
from imagekit.cluster.runner import PodRef, PodRunner, PodState
from tests.support.base_image import BaseImage
from tests.support.cluster import Cluster
from tests.support.tiny_image import run_imagekit


def _job_pod(cluster: Cluster, job: str, deadline_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        pods = cluster.kubectl_json("get", "pods", "-l", f"job-name={job}")["items"]
        if pods:
            return dict(pods[0])
        time.sleep(0.5)
    raise AssertionError(f"the Job controller made no pod for {job}:\n{cluster.tails()}")


def _refused_by_the_kubelet(state: PodState) -> bool:
    """A pod the kubelet rejected at admission: Failed before any container was made."""
    status = state.document.get("status", {})
    return state.phase == "Failed" and not status.get("containerStatuses")


def test_the_emitted_job_waits_for_a_gpu_node_then_runs_by_digest(
    cluster: Cluster, base_image: BaseImage
) -> None:
    name = f"preflight-{secrets.token_hex(3)}"
    emitted = run_imagekit(
        "gpu-preflight", base_image.reference, "--emit-job", "--gpus", "1", "--job-name", name,
        "--cpu", "500m", "--memory", "1Gi",  # the test node: two cores, under 24Gi allocatable
    )  # fmt: skip
    assert emitted.returncode == 0, emitted.stderr
    manifest = json.loads(emitted.stdout)
    [job] = [item for item in manifest["items"] if item["kind"] == "Job"]
    job["spec"]["template"]["spec"]["hostNetwork"] = True  # no pod network here (see above)
    cluster.advertise_gpus(0)
    applied = cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    assert applied.returncode == 0, applied.stderr
    try:
        with connect(ClusterTarget(kubeconfig=cluster.kubeconfig)) as found:
            runner = PodRunner(found)
            pod = _job_pod(cluster, name)
            meta = pod["metadata"]
            ref = PodRef(meta["namespace"], meta["name"], meta["uid"])
            pending = runner.wait(ref, deadline_s=6)
            assert pending.timed_out and pending.reason is not None
            assert "Insufficient nvidia.com/gpu" in pending.reason
            cluster.advertise_gpus(1)
            ended: PodState = runner.wait(ref, deadline_s=240)
            if _refused_by_the_kubelet(ended):
                # The stand-in's race: the scheduler placed the pod as soon as the patch landed,
                # and the kubelet, whose own copy of its node did not show the patched GPU yet,
                # refused it at admission (a device plugin reports capacity through the kubelet
                # itself, so a real node has no such window). The capacity has settled by now:
                # the same manifest once more.
                cluster.kubectl("delete", "-f", "-", "--cascade=foreground", "--wait=true",
                                input=json.dumps(manifest))  # fmt: skip
                applied = cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
                assert applied.returncode == 0, applied.stderr
                pod = _job_pod(cluster, name)
                meta = pod["metadata"]
                ref = PodRef(meta["namespace"], meta["name"], meta["uid"])
                ended = runner.wait(ref, deadline_s=240)
            assert ended.node == cluster.node_name, ended.document["status"]
            assert ended.finished, ended.document["status"]
            pulled = f"{base_image.registry_host}/{base_image.repository}@{base_image.digest}"
            assert ended.image_ids == {"pull": pulled, "gpu-preflight": pulled}
            assert ended.phase == "Succeeded"  # the probe alone: no torch in the base image
            log = runner.logs(ref)
            assert "@@IMAGEKIT_GPU_REPORT@@" in log and "torch is not importable" in log
            assert ended.document["spec"]["containers"][0]["resources"]["limits"] == {
                "cpu": "500m",
                "memory": "1Gi",
                "nvidia.com/gpu": "1",
            }
    finally:
        cluster.kubectl(
            "delete", "-f", "-", "--cascade=foreground", "--wait=true", "--timeout=60s",
            input=json.dumps(manifest),
        )  # fmt: skip
        cluster.advertise_gpus(0)
