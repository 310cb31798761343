"""The Kubernetes Job `imagekit gpu-preflight --emit-job` prints."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from imagekit.errors import UsageError
from imagekit.gpu.job import START, JobOptions, emit_job, for_node, job_manifest, node_job_name
from imagekit.gpu.launch import Expectations, ProbeOptions
from imagekit.workspace import Workspace

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
    wanted = {"cpu": "16", "memory": "80Gi", "nvidia.com/gpu": "8"}
    assert container["resources"] == {"requests": wanted, "limits": wanted}
    command = container["command"]
    assert command[:3] == ["python3", "-c", START]
    launcher = command[3:]
    assert launcher[:5] == ["python3", "-m", "torch.distributed.run", "--nproc-per-node", "8"]
    assert launcher[5:8] == ["/imagekit-gpu/probe.py", "--out", "-"]
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
    assert "hostNetwork" not in pod  # the cluster's pod network unless asked


def test_host_network_puts_the_pod_on_the_nodes_network() -> None:
    manifest = job_manifest(REF, ProbeOptions(), JobOptions(host_network=True), gpus=1)
    assert manifest["items"][1]["spec"]["template"]["spec"]["hostNetwork"] is True


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


def test_the_pull_is_outside_the_probe_s_limit_and_the_deadline_covers_both() -> None:
    """An operator's Job: a 20 GB pull must not eat the probe's --timeout."""
    options = ProbeOptions(expect=Expectations(gpus=8), timeout_s=900)
    manifest = job_manifest(REF, options, JobOptions(pull_allowance_s=1800), 8)
    job = manifest["items"][1]
    assert job["spec"]["activeDeadlineSeconds"] == 1800 + 900 + 120
    pod = job["spec"]["template"]["spec"]
    [pull] = pod["initContainers"]
    assert pull["image"] == REF and pull["command"][0] == "python3"
    assert job["spec"]["ttlSecondsAfterFinished"] == 86400


def test_the_names_come_from_the_image_s_digest_so_two_images_never_collide() -> None:
    one = _job()
    other = job_manifest(
        REF.replace("a" * 64, "b" * 64), ProbeOptions(expect=Expectations(gpus=8)), JobOptions(), 8
    )
    names = {m["items"][1]["metadata"]["name"] for m in (one, other)}
    assert names == {"imagekit-gpu-preflight-aaaaaaaaaaaa", "imagekit-gpu-preflight-bbbbbbbbbbbb"}
    config_map, job = one["items"]
    volume = job["spec"]["template"]["spec"]["volumes"][0]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]


def test_cpu_and_memory_given_are_requests_and_limits() -> None:
    manifest = _job(cpu="32", memory="256Gi")
    [container] = manifest["items"][1]["spec"]["template"]["spec"]["containers"]
    wanted = {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}
    assert container["resources"] == {"requests": wanted, "limits": wanted}


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"name": "preflight\n"}, "--job-name"),
        ({"name": "Preflight"}, "--job-name"),
        ({"name": "p" * 53}, "--job-name"),
        ({"namespace": "ml\n"}, "--namespace"),
        ({"namespace": "ML"}, "--namespace"),
        ({"node_selector": (("kubernetes.io/hostname\n", "n"),)}, "not a label key"),
        ({"node_selector": (("kubernetes.io/hostname", "node 7"),)}, "not a label value"),
        ({"node_selector": (("kubernetes.io/hostname", "n\n"),)}, "not a label value"),
        ({"node_selector": (("zone", "a"), ("zone", "b"))}, "--node-selector zone is given twice"),
        ({"tolerations": ("dedicated=in ference:NoSchedule",)}, "not a taint value"),
        ({"tolerations": ("nvidia.com/gpu\n:NoSchedule",)}, "not a taint key"),
        ({"priority_class": "Never Preempt"}, "--priority-class"),
        ({"priority_class": "high\n"}, "--priority-class"),
        ({"cpu": "lots"}, "--cpu"),
        ({"memory": "64GB\n"}, "--memory"),
        ({"pull_allowance_s": -1}, "--pull-timeout"),
        ({"ttl_s": 10**9}, "--ttl"),
    ],
)
def test_every_value_is_refused_where_kubernetes_would_refuse_it(
    given: dict[str, Any], said: str
) -> None:
    with pytest.raises(UsageError, match=re.escape(said)):
        JobOptions(**given)


def test_a_short_timeout_never_emits_a_deadline_of_zero() -> None:
    with pytest.raises(UsageError, match="--timeout 0.1"):
        ProbeOptions(timeout_s=0.1)


def test_an_image_on_loopback_or_one_the_ledger_found_without_torch_is_warned_of(
    tmp_path: Path,
) -> None:
    from imagekit.kinds.audit import AuditStatus
    from imagekit.ledger.store import append_record

    workspace = Workspace.at(tmp_path)
    loopback = "127.0.0.1:5000/team/m3@sha256:" + "a" * 64
    options = ProbeOptions(expect=Expectations(gpus=8))
    emitted = emit_job(workspace, loopback, options, JobOptions())
    assert emitted.name == "imagekit-gpu-preflight-aaaaaaaaaaaa"
    [warning] = emitted.warnings
    assert "127.0.0.1:5000 is a loopback registry" in warning
    assert emit_job(workspace, REF, options, JobOptions()).warnings == ()
    append_record(
        workspace,
        "audit",
        plan=None,
        images={"image": REF},
        status=AuditStatus.CPU_CHECK_INCOMPLETE,
        scope="CPU-only checks",
        details={"report": {"versions": {"torch": None}}},
    )
    [warning] = emit_job(workspace, REF, options, JobOptions()).warnings
    assert "found no torch" in warning and "record 1" in warning


def test_each_node_s_job_is_pinned_to_it_by_node_affinity_and_named_for_it() -> None:
    manifest = _job(namespace="serving", node_selector=(("pool", "h100"),))
    pinned, name = for_node(manifest, "gpu-node-07")
    config_map, job = pinned["items"]
    assert name == "imagekit-gpu-preflight-aaaaaaaaaaaa-gpu-node-07" == job["metadata"]["name"]
    assert config_map["metadata"]["name"] == f"{name}-probe"
    spec = job["spec"]["template"]["spec"]
    assert {"name": "probe", "configMap": {"name": f"{name}-probe"}} in spec["volumes"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-07"]}]}
    ]
    assert spec["nodeSelector"] == {"pool": "h100"}  # the selector the node was chosen by
    assert "nodeName" not in spec  # the scheduler still places it (taints, free GPUs)
    assert job["metadata"]["namespace"] == "serving"
    untouched = manifest["items"][1]["spec"]["template"]["spec"]
    assert "affinity" not in untouched  # the template is not changed
    assert untouched["volumes"][0]["configMap"]["name"].endswith("aaaaaaaaaaaa-probe")


def test_a_long_or_dotted_node_name_gives_a_short_job_name_no_other_node_shares() -> None:
    base = "imagekit-gpu-preflight-aaaaaaaaaaaa"
    dotted = node_job_name(base, "ip-10-0-0-1.ec2.internal")
    long_a = node_job_name(base, "gpu-" + "a" * 60 + "-1")
    long_b = node_job_name(base, "gpu-" + "a" * 60 + "-2")
    for name in (dotted, long_a, long_b):
        assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
    assert dotted.startswith(f"{base}-ip-10-0-0-1")
    assert long_a != long_b
    assert len(node_job_name("x" * 63, "gpu-1")) <= 63
