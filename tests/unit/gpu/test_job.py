"""The Kubernetes Job `imagekit gpu-preflight --emit-job` prints."""

from __future__ import annotations

import json
from typing import Any

import pytest

from imagekit.errors import UsageError
from imagekit.gpu.job import JobOptions, job_manifest
from imagekit.gpu.launch import Expectations, ProbeOptions

REF = "registry.example/team/m3@sha256:" + "a" * 64


def _job(**given: object) -> dict[str, Any]:
    options = JobOptions(**given)  # type: ignore[arg-type]
    manifest = job_manifest(REF, ProbeOptions(expect=Expectations(gpus=8)), options, 8)
    return manifest


def test_the_job_runs_the_image_by_digest_on_eight_gpus_under_torch_s_launcher() -> None:
    manifest = _job(
        namespace="serving",
        node_selector=(("kubernetes.io/hostname", "gpu-node-07"),),
        tolerations=("nvidia.com/gpu:NoSchedule", "dedicated=inference:NoExecute"),
        priority_class="preflight-never-preempt",
    )
    config_map, job = manifest["items"]
    assert config_map["kind"] == "ConfigMap" and "def main" in config_map["data"]["probe.py"]
    assert job["kind"] == "Job" and job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == REF
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    command = container["command"]
    assert command[:5] == ["python3", "-m", "torch.distributed.run", "--nproc-per-node", "8"]
    assert command[5:8] == ["/imagekit-gpu/probe.py", "--out", "-"]
    assert json.loads(command[-1])["expect"] == {"count": 8}
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "gpu-node-07"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoExecute"},
    ]
    assert pod["priorityClassName"] == "preflight-never-preempt"
    assert "preemptionPolicy" not in pod  # admission sets it from the class
    assert pod["automountServiceAccountToken"] is False
    assert {v["name"] for v in pod["volumes"]} == {"probe", "dshm"}
    assert job["metadata"]["namespace"] == "serving"


def test_a_preemption_policy_without_its_class_is_refused_before_the_cluster_does() -> None:
    """The M3 field report: preemptionPolicy Never with no PriorityClass, refused by admission
    (it computed PreemptLowerPriority from the default priority)."""
    with pytest.raises(UsageError, match="admission sets a pod's preemptionPolicy"):
        _job(preemption_policy="Never")
    manifest = _job(preemption_policy="Never", priority_class="preflight-never-preempt")
    pod = manifest["items"][1]["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "preflight-never-preempt"
    assert "preemptionPolicy" not in pod


@pytest.mark.parametrize(
    ("reference", "gpus", "said"),
    [
        ("registry.example/team/m3:latest", 8, "by digest"),
        (REF, None, "GPU count"),
    ],
)
def test_a_tag_or_no_gpu_count_is_bad_input(reference: str, gpus: int | None, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        job_manifest(reference, ProbeOptions(), JobOptions(), gpus)


def test_a_toleration_that_is_not_key_value_effect_is_bad_input() -> None:
    with pytest.raises(UsageError, match="KEY\\[=VALUE\\]:EFFECT"):
        _job(tolerations=("nvidia.com/gpu",))
