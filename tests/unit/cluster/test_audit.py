"""imagekit.cluster.audit's pod: the probe by digest, locked down, no GPU, no token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagekit.audit.runner import PROBE_IN_CONTAINER
from imagekit.cluster.audit import (
    ClusterAuditRequest,
    audit_in_cluster,
    audit_pod_manifest,
    render_audit_pod,
)
from imagekit.errors import UsageError
from imagekit.workspace import Workspace

REF = "127.0.0.1:5000/demo@sha256:" + "ab" * 32


def test_the_audit_pod_is_locked_down_and_asks_for_no_gpu() -> None:
    manifest = audit_pod_manifest("p", REF, "{}", ClusterAuditRequest(ref=REF, timeout_s=600))
    spec = manifest["spec"]
    [container] = spec["containers"]
    assert container["image"] == REF
    assert container["command"] == ["python3", PROBE_IN_CONTAINER, "--spec-json", "{}"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["hostNetwork"] is False and spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 600
    assert "nvidia.com/gpu" not in str(container["resources"])
    assert container["resources"]["limits"] == {"cpu": "2.0", "memory": "4Gi"}
    assert container["securityContext"] == {
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert {"name": "probe", "configMap": {"name": "p"}} in spec["volumes"]


def test_a_tag_is_refused_before_any_cluster(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="names no digest"):
        audit_in_cluster(Workspace.at(tmp_path), ClusterAuditRequest(ref="r.example/x:1"))


def test_the_rendered_manifests_are_the_probe_and_its_pod_under_one_name(
    tmp_path: Path,
) -> None:
    """render_audit_pod is what audit_in_cluster submits: the probe's ConfigMap and the pod
    that mounts it, the probe's spec on the pod's command line."""
    workspace = Workspace.at(tmp_path)
    rendered = render_audit_pod(ClusterAuditRequest(ref=REF), workspace, name="imagekit-audit-x")
    assert rendered.config_map["metadata"]["name"] == "imagekit-audit-x"
    assert "imagekit's in-image probe" in rendered.config_map["data"]["probe.py"]
    assert rendered.pod == audit_pod_manifest(
        "imagekit-audit-x", REF, json.dumps(rendered.spec, sort_keys=True),
        ClusterAuditRequest(ref=REF),
    )  # fmt: skip
    assert rendered.profile == "generic" and rendered.spec["expected_paths"] == []
    named = render_audit_pod(ClusterAuditRequest(ref=REF), workspace).name
    assert named.startswith("imagekit-audit-abababababab-") and len(named) == 34
    with pytest.raises(UsageError, match="names no digest"):
        render_audit_pod(ClusterAuditRequest(ref="r.example/x:1"), workspace)


def test_a_plan_adds_its_overlays_and_modules_as_the_engine_audit_does(
    workspace: Workspace,
) -> None:
    """--plan with --cluster: the demo plan's overlay (PyAV's about.py, which differs from
    its RECORD on purpose) is expected, and its find_spec modules are checked."""
    rendered = render_audit_pod(ClusterAuditRequest(ref=REF, plan="demo"), workspace)
    assert rendered.spec["expected_paths"] == [
        "/usr/lib/python3/dist-packages/av/about.py", "/usr/local/bin/imagekit-demo-hello",
    ]  # fmt: skip
    assert {"six", "av", "numpy"} <= set(rendered.spec["profile"]["modules"])
    assert rendered.profile == "generic"
    assert json.loads(rendered.pod["spec"]["containers"][0]["command"][-1]) == rendered.spec
