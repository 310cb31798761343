"""imagekit.cluster (connection, runner) against the real API server, scheduler and kubelet,
and the field reports' cluster lessons as behaviour: the Priority admission plugin's refusal,
a Terminating pod that holds its name, a Pending pod's reason at the deadline, a node that
advertises GPUs (by the stand-in status patch)."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagekit.cluster import connection
from imagekit.cluster.connection import ClusterTarget, connect
from imagekit.cluster.runner import PodPlace, PodRunner, PodState
from imagekit.errors import ClusterError, UsageError
from imagekit.runners.seam import Runner
from tests.support.base_image import BaseImage
from tests.support.cluster import Cluster, host_network_pod

NOWHERE = {"imagekit.test/no-such-node": "true"}


def _name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


@pytest.fixture
def said() -> list[str]:
    return []


@pytest.fixture
def runner(cluster: Cluster, said: list[str]) -> Iterator[PodRunner]:
    with connect(ClusterTarget(kubeconfig=cluster.kubeconfig)) as found:
        yield PodRunner(found, progress=said.append)


def test_the_connection_is_found_as_kubectl_finds_it(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{cluster.kubeconfig}")
    with connect(ClusterTarget()) as found:
        assert (found.server, found.context, found.namespace) == (
            cluster.server, "imagekit-test", "default",
        )  # fmt: skip
    with connect(ClusterTarget(namespace="kube-system")) as other:
        assert other.namespace == "kube-system"
    with pytest.raises(UsageError, match="nope"):
        connect(ClusterTarget(context="nope"))
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setattr(connection, "SERVICE_ACCOUNT", tmp_path / "no-account")
    with pytest.raises(UsageError, match="no cluster is configured"):
        connect(ClusterTarget())


def test_inside_a_pod_the_service_account_is_used(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The in-cluster path, with a real token of a real service account (RBAC: view)."""
    account = _name("reader")
    assert cluster.kubectl("create", "serviceaccount", account).returncode == 0
    bound = cluster.kubectl(
        "create",
        "rolebinding",
        account,
        "--clusterrole=view",
        f"--serviceaccount=default:{account}",
    )
    assert bound.returncode == 0, bound.stderr
    token = cluster.kubectl("create", "token", account)
    assert token.returncode == 0, token.stderr
    folder = tmp_path / "serviceaccount"
    folder.mkdir()
    (folder / "token").write_text(token.stdout.strip())
    (folder / "namespace").write_text("default")
    (folder / "ca.crt").write_bytes(cluster.ca.read_bytes())
    monkeypatch.setattr(connection, "SERVICE_ACCOUNT", folder)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    host, _, port = cluster.server.removeprefix("https://").rpartition(":")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    with connect(ClusterTarget()) as found:
        assert (found.source, found.context, found.namespace) == (
            "in-cluster service account", None, "default",
        )  # fmt: skip
        assert PodRunner(found).get("default", "no-such-pod") is None  # may read pods
        with pytest.raises(ClusterError) as refused:  # and not write them
            PodRunner(found).submit(host_network_pod(_name("denied"), "unused", ["true"]))
    assert refused.value.status == 403


def test_a_pod_runs_and_says_what_it_ran(
    runner: PodRunner, base_image: BaseImage, said: list[str]
) -> None:
    manifest = host_network_pod(
        _name("runner"), base_image.reference, ["python3", "-c", "print('from the runner')"]
    )
    ref = runner.submit(manifest)
    state = runner.wait(ref, deadline_s=240)
    assert state.phase == "Succeeded", state.reason
    assert state.node is not None and state.node.startswith("imagekit-node-")
    assert state.image_ids == {
        "main": f"{base_image.registry_host}/{base_image.repository}@{base_image.digest}"
    }
    assert runner.logs(ref) == "from the runner\n"
    runner.delete(ref)
    assert runner.get(ref.namespace, ref.name) is None
    assert any("Succeeded on imagekit-node-" in line for line in said), said


def test_the_pod_place_answers_the_runner_seam(
    runner: PodRunner, base_image: BaseImage, tmp_path: Path
) -> None:
    """The same pod through the seam: submitted, waited for, its log, the image the kubelet
    ran (its status.imageID), cleaned up (again is harmless)."""
    place: Runner[dict[str, Any], PodState] = PodPlace(runner, "main", grace_period=0)
    manifest = host_network_pod(
        _name("seam"), base_image.reference, ["python3", "-c", "print('through the seam')"]
    )
    run = place.submit(manifest, tmp_path)
    assert run.image_id() is None  # nothing ran yet
    state = run.wait(240)
    assert state.phase == "Succeeded" and not state.timed_out, state.reason
    assert run.image_id() == (
        f"{base_image.registry_host}/{base_image.repository}@{base_image.digest}"
    )
    assert run.logs() == "through the seam\n"
    run.cleanup()
    assert runner.get(state.ref.namespace, state.ref.name) is None
    run.cleanup()


def test_a_pending_pod_ends_at_the_deadline_with_the_schedulers_reason(
    runner: PodRunner,
) -> None:
    ref = runner.submit(
        host_network_pod(_name("pending"), "unused", ["true"], nodeSelector=NOWHERE)
    )
    started = time.monotonic()
    state = runner.wait(ref, deadline_s=8)
    assert time.monotonic() - started < 20
    assert state.timed_out and state.phase == "Pending"
    assert state.reason is not None
    assert "not scheduled (Unschedulable)" in state.reason
    assert "didn't match Pod's node affinity/selector" in state.reason
    runner.delete(ref, grace_period=0)


def test_a_terminating_pod_holds_its_name_and_a_rerun_waits_for_it(
    cluster: Cluster, runner: PodRunner, said: list[str]
) -> None:
    name = _name("held")
    manifest = host_network_pod(name, "unused", ["true"], nodeSelector=NOWHERE)
    manifest["metadata"]["finalizers"] = ["imagekit.test/hold"]
    first = runner.submit(manifest)
    deleted = cluster.kubectl("delete", "pod", name, "--wait=false")
    assert deleted.returncode == 0, deleted.stderr
    # What the field report met: a new apply of the same pod while the old one terminates.
    again = cluster.kubectl("create", "-f", "-", input=json.dumps(manifest))
    assert again.returncode != 0
    assert "object is being deleted" in again.stderr
    # imagekit's runner waits instead; the finalizer goes a few seconds later.
    release = threading.Timer(
        3.0,
        lambda: cluster.kubectl(
            "patch",
            "pod",
            name,
            "--type=json",
            "-p",
            '[{"op": "remove", "path": "/metadata/finalizers"}]',
        ),
    )
    release.start()
    del manifest["metadata"]["finalizers"]
    started = time.monotonic()
    second = runner.submit(manifest, wait_gone_s=60)
    release.join()
    assert time.monotonic() - started >= 2.5
    assert second.uid != first.uid
    assert any("is still Terminating: waiting until it is gone" in line for line in said)
    runner.delete(second, grace_period=0)


def test_the_priority_plugin_refuses_a_preemption_policy_the_class_disagrees_with(
    cluster: Cluster, runner: PodRunner
) -> None:
    """The GPU preflight pod of the field report: preemptionPolicy Never under a class that
    preempts. The API server's Priority admission plugin refuses it and says why; imagekit
    refuses it before submitting, naming the class's value."""
    klass = _name("preempting")
    created = cluster.kubectl(
        "create", "priorityclass", klass, "--value=1000", "--preemption-policy=PreemptLowerPriority"
    )
    assert created.returncode == 0, created.stderr
    manifest = host_network_pod(
        _name("preflight"), "unused", ["true"], nodeSelector=NOWHERE,
        priorityClassName=klass, preemptionPolicy="Never",
    )  # fmt: skip
    by_kubectl = cluster.kubectl("create", "-f", "-", input=json.dumps(manifest))
    assert by_kubectl.returncode != 0
    assert (
        "the string value of PreemptionPolicy (Never) must not be provided in pod spec; priority "
        "admission controller computed PreemptLowerPriority from the given PriorityClass name"
    ) in by_kubectl.stderr
    with pytest.raises(UsageError) as refused:
        runner.submit(manifest)
    assert f"its PriorityClass {klass} (value 1000) says PreemptLowerPriority" in str(refused.value)
    assert runner.get("default", manifest["metadata"]["name"]) is None  # never submitted
    # A class that does not exist: the API server's own refusal, in its words.
    manifest["spec"]["priorityClassName"] = "no-such-class"
    with pytest.raises(ClusterError) as missing:
        runner.submit(manifest)
    assert missing.value.status == 403
    assert "no PriorityClass with name no-such-class was found" in str(missing.value)
    manifest["spec"]["priorityClassName"] = klass
    # The policy the class says is admitted (and defaulted from the class).
    del manifest["spec"]["preemptionPolicy"]
    ref = runner.submit(manifest)
    document = runner.get(ref.namespace, ref.name)
    assert document is not None
    assert document["spec"]["preemptionPolicy"] == "PreemptLowerPriority"
    assert document["spec"]["priority"] == 1000
    runner.delete(ref, grace_period=0)
    cluster.kubectl("delete", "priorityclass", klass)


def test_a_node_advertises_gpus_by_the_stand_in_status_patch(
    cluster: Cluster, runner: PodRunner, base_image: BaseImage
) -> None:
    """The status patch stands in for NVIDIA's device plugin: the scheduler counts the GPUs,
    the kubelet allocates none (no device reaches the container)."""
    cluster.advertise_gpus(2)
    node = cluster.kubectl_json("get", "node", cluster.node_name)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    gpus = {"resources": {"limits": {"nvidia.com/gpu": "3"}}}
    too_many = host_network_pod(_name("three-gpus"), base_image.reference, ["true"])
    too_many["spec"]["containers"][0].update(gpus)
    ref = runner.submit(too_many)
    state = runner.wait(ref, deadline_s=8)
    assert state.timed_out and state.reason is not None
    assert "Insufficient nvidia.com/gpu" in state.reason
    runner.delete(ref, grace_period=0)
    one = host_network_pod(
        _name("one-gpu"), base_image.reference,
        ["python3", "-c", "import os; print(os.environ.get('NVIDIA_VISIBLE_DEVICES'))"],
    )  # fmt: skip
    one["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    ref = runner.submit(one)
    state = runner.wait(ref, deadline_s=240)
    assert state.phase == "Succeeded", state.reason
    assert runner.logs(ref) == "None\n"  # scheduled for a GPU, given none
    runner.delete(ref)
