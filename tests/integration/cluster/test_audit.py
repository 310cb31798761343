"""`imagekit audit REF --cluster` on the real cluster: the probe in a pod of the image by
digest, the kubelet's imageID checked against that digest, both records bound to the pod,
the pod and its ConfigMap gone afterwards (kept with --keep); a pod that cannot be placed
ends at the deadline naming the scheduler's reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.cluster import Cluster
from tests.support.tiny_image import run_imagekit


@pytest.fixture(autouse=True)
def kubeconfig(cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The cluster reached as a user reaches theirs: KUBECONFIG, nothing in HOME."""
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    monkeypatch.setenv("HOME", str(tmp_path))


def _records(workspace: Workspace) -> list[dict[str, object]]:
    return [json.loads(line) for line in workspace.ledger_path.read_text().splitlines()]


def test_the_audit_runs_in_a_pod_and_the_kubelet_ran_the_digest_it_named(
    cluster: Cluster, base_image: BaseImage, workspace: Workspace
) -> None:
    done = run_imagekit("audit", base_image.reference, "--cluster", "--host-network", "--json")
    assert done.returncode == 0, done.stderr + cluster.tails()
    document = json.loads(done.stdout)
    assert document["status"] == "CPU_PASS", document
    pod = document["pod"]
    # the kubelet's imageID beside the digest the audit named
    assert pod["image_id"] == (
        f"{base_image.registry_host}/{base_image.repository}@{base_image.digest}"
    )
    assert document["digest"] == base_image.digest
    assert document["final_pull"]["status"] == "verified"
    assert pod["node"] == cluster.node_name and pod["namespace"] == "default"
    assert any("NOT `--network none`" in line for line in pod["isolation"])
    assert "no service-account token" in document["scope"]
    assert f"pod {pod['namespace']}/{pod['name']}: Succeeded" in done.stderr  # progress
    # deleted afterwards, with the probe's ConfigMap
    assert cluster.kubectl("get", "pod", pod["name"]).returncode != 0
    assert cluster.kubectl("get", "configmap", pod["name"]).returncode != 0
    audit, final_pull = _records(workspace)[-2:]
    assert audit["kind"] == "audit" and audit["status"] == "CPU_PASS"
    assert audit["details"]["pod"]["uid"] == pod["uid"]  # type: ignore[index]
    assert final_pull["kind"] == "final-pull" and final_pull["status"] == "verified"
    details = final_pull["details"]
    assert isinstance(details, dict)
    assert (details["pod"], details["pod_uid"], details["node"]) == (
        pod["name"], pod["uid"], cluster.node_name,
    )  # fmt: skip
    assert details["image_id"] == base_image.digest
    assert document["ledger"]["seqs"] == [audit["seq"], final_pull["seq"]]


def test_keep_keeps_the_pod(cluster: Cluster, base_image: BaseImage, workspace: Workspace) -> None:
    done = run_imagekit(
        "audit", base_image.reference, "--cluster", "--host-network", "--keep", "--json"
    )
    assert done.returncode == 0, done.stderr
    name = json.loads(done.stdout)["pod"]["name"]
    kept = cluster.kubectl_json("get", "pod", name)
    assert kept["status"]["phase"] == "Succeeded"
    assert kept["spec"]["automountServiceAccountToken"] is False
    assert kept["spec"]["enableServiceLinks"] is False
    owned = cluster.kubectl_json("get", "configmap", name)
    assert owned["metadata"]["ownerReferences"][0]["uid"] == kept["metadata"]["uid"]
    cluster.kubectl("delete", "pod", name, "--wait=true")


def test_a_pod_nothing_can_place_ends_at_the_deadline_with_the_reason(
    cluster: Cluster, base_image: BaseImage, workspace: Workspace
) -> None:
    done = run_imagekit(
        "audit", base_image.reference, "--cluster", "--host-network",
        "--node", "no-such-node", "--timeout", "6",
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "audit INCOMPLETE" in done.stderr
    assert "didn't match Pod's node affinity/selector" in done.stderr
    left = cluster.kubectl_json("get", "pods", "-l", "app.kubernetes.io/managed-by=imagekit")
    assert [p for p in left["items"] if p["metadata"]["name"].startswith("imagekit-audit-")] == []


def test_a_tag_is_refused(cluster: Cluster, base_image: BaseImage, workspace: Workspace) -> None:
    tagged = f"{base_image.registry_host}/{base_image.repository}:bookworm"
    done = run_imagekit("audit", tagged, "--cluster", "--json")
    assert done.returncode == 2
    assert "names no digest" in json.loads(done.stdout)["error"]["message"]
