"""`imagekit ledger record-pod` on pods the real kubelet ran: the imageID forms the CRI
plugin of containerd reports, not only written JSON.

The image is the session's base image, pushed to a loopback registry and named by digest; the
kubelet pulls it through its containerd (plain HTTP by the registry's hosts.toml) and runs a
host-network pod of it to Succeeded.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.cluster import Cluster, host_network_pod
from tests.support.tiny_image import run_imagekit

OTHER = "sha256:" + "9a" * 32


@pytest.fixture(scope="module")
def ran_pod(cluster: Cluster, base_image: BaseImage) -> Iterator[dict[str, Any]]:
    """A pod of the base image by digest, run to Succeeded; its JSON as kubectl prints it."""
    name = f"by-digest-{secrets.token_hex(3)}"
    manifest = host_network_pod(
        name, base_image.reference, ["python3", "-c", "print('ran on the kubelet')"]
    )
    created = cluster.kubectl("create", "-f", "-", input=json.dumps(manifest))
    assert created.returncode == 0, created.stderr
    done = cluster.kubectl(
        "wait", f"pod/{name}", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=240s",
        timeout=260,
    )  # fmt: skip
    assert done.returncode == 0, (
        done.stderr + cluster.kubectl("describe", "pod", name).stdout + cluster.tails()
    )
    pod = cluster.kubectl_json("get", "pod", name)
    logs = cluster.kubectl("logs", name)
    pod["_log_for_the_test"] = logs.stdout
    yield pod
    cluster.kubectl("delete", "pod", name, "--wait=true", "--timeout=60s")


def test_the_kubelet_reports_the_repository_digest_it_pulled_by(
    ran_pod: dict[str, Any], base_image: BaseImage
) -> None:
    status = ran_pod["status"]["containerStatuses"][0]
    assert ran_pod["status"]["phase"] == "Succeeded"
    assert ran_pod["_log_for_the_test"] == "ran on the kubelet\n"
    # containerd's CRI plugin: the repository digest the image was pulled by, no scheme
    assert status["imageID"] == (
        f"{base_image.registry_host}/{base_image.repository}@{base_image.digest}"
    )
    assert status["image"] == base_image.reference or status["image"].startswith("sha256:")
    assert ran_pod["spec"]["nodeName"].startswith("imagekit-node-")


def _record(pod: dict[str, Any], tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    path = tmp_path / "pod.json"
    path.write_text(json.dumps({k: v for k, v in pod.items() if not k.startswith("_")}))
    done = run_imagekit("ledger", "record-pod", str(path), *args, "--json")
    return done.returncode, json.loads(done.stdout)


def test_record_pod_verifies_what_the_kubelet_ran(
    ran_pod: dict[str, Any], base_image: BaseImage, workspace: Workspace, tmp_path: Path
) -> None:
    code, report = _record(ran_pod, tmp_path, "--expect", base_image.digest)
    assert code == 0, report
    [container] = report["containers"]
    assert container["status"] == "verified"
    assert container["form"] == "repo-digest"
    assert container["digest"] == base_image.digest
    assert container["node"] == ran_pod["spec"]["nodeName"]
    assert container["uid"] == ran_pod["metadata"]["uid"]
    [record] = [
        json.loads(line)
        for line in workspace.ledger_path.read_text().splitlines()
        if json.loads(line)["seq"] == container["record_seq"]
    ]
    assert record["kind"] == "final-pull"
    assert record["status"] == "verified"
    assert record["images"]["image"] == container["image_id"]
    assert record["details"]["image_id"] == base_image.digest
    assert record["details"]["image_id_form"] == "repo-digest"
    assert record["details"]["pod_uid"] == ran_pod["metadata"]["uid"]


def test_record_pod_says_mismatch_for_another_digest(
    ran_pod: dict[str, Any], workspace: Workspace, tmp_path: Path
) -> None:
    code, report = _record(ran_pod, tmp_path, "--expect", OTHER)
    assert code == 1
    assert report["containers"][0]["status"] == "mismatch"
