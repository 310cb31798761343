"""The manifests imagekit submits, before three judges: Kyverno's CLI, the sigstore
policy-controller's tester, and the real API server (a server-side dry run).

What is judged is what imagekit creates, rendered by the functions its submit paths use
(never a copy written here): the audit's ConfigMap and pod (imagekit.cluster.audit's
``render_audit_pod``, what ``imagekit audit REF --cluster --host-network`` creates) and the
preflight's ConfigMap and Job (``gpu-preflight --emit-job``, as ``--cluster`` creates it:
imagekit.gpu.in_cluster's ``submitted_items``). The offline judges run the project's
policies: the docs' ClusterPolicy and ClusterImagePolicy (docs/ATTESTATIONS.md: an image
with a passing audit signed by CI's key) and the preflight Job's ClusterPolicy
(tests/integration/gpu/test_job_admission.py).

Where they disagree, the API server wins: the field report's preflight pod, ``preemptionPolicy:
Never`` under a PriorityClass that preempts. Kyverno's and the policy-controller's policies
judge the image, and accept it; a dry run of the Job is accepted too (the Job API does not
run the Priority plugin on a template); but the Priority admission plugin refuses the pod,
the Job's or a bare one, in its own words. The test asserts that refusal as the verdict.
imagekit refuses such a manifest before submitting it (imagekit.cluster.runner), so the
case is the rendered Job edited by that one field, created here through lightkube.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from imagekit.attest.keys import KeyPairFiles
from imagekit.cli import main
from imagekit.cluster.audit import ClusterAuditRequest, render_audit_pod
from imagekit.cluster.connection import ClusterTarget, Connection, connect
from imagekit.cluster.runner import api_errors
from imagekit.errors import ClusterError
from imagekit.gpu.in_cluster import submitted_items
from imagekit.refs import parse_reference
from imagekit.workspace import Workspace
from tests.integration.gpu.test_job_admission import POLICY as PREFLIGHT_JOB_POLICY
from tests.support.admission import (
    docs_image_policy,
    docs_policy,
    kyverno_judge,
    policy_tester,
)
from tests.support.cluster import Cluster
from tests.support.gate import audit_predicate, sign_onto
from tests.support.images import Pushed
from tests.support.registries import RunningRegistry
from tests.support.signing import make_image, pair

__all__ = ["make_image", "pair"]  # the fixtures, from tests/support/signing.py

NAMESPACE = "default"
#: The Priority admission plugin's words for the field report's pod.
PRIORITY_REFUSAL = (
    "the string value of PreemptionPolicy (Never) must not be provided in pod spec; priority "
    "admission controller computed PreemptLowerPriority from the given PriorityClass name"
)


@pytest.fixture
def api(cluster: Cluster) -> Iterator[Connection]:
    with connect(ClusterTarget(kubeconfig=cluster.kubeconfig)) as found:
        yield found


@pytest.fixture
def audited(make_image: Callable[[str], Pushed], pair: KeyPairFiles) -> str:
    """An image with a passing audit signed by CI's key: the docs' policies admit it."""
    image = parse_reference(make_image("cluster/admission").reference)
    sign_onto(image, pair, audit_predicate())
    return str(image)


def _rendered(image: str, workspace: Workspace) -> list[dict[str, Any]]:
    """What imagekit submits for IMAGE, in order: the audit's ConfigMap and pod, the
    preflight's ConfigMap and Job (the test node's sizes: one GPU, small requests)."""
    audit = render_audit_pod(ClusterAuditRequest(ref=image, host_network=True), workspace)
    emitted = CliRunner().invoke(
        main, ["gpu-preflight", image, "--emit-job", "--gpus", "1", "--cpu", "500m",
               "--memory", "1Gi", "--host-network", "--json"],
    )  # fmt: skip
    assert emitted.exit_code == 0, emitted.output
    return [audit.config_map, audit.pod, *submitted_items(json.loads(emitted.stdout), NAMESPACE)]


def _images(resource: dict[str, Any]) -> list[str]:
    spec = resource["spec"]
    pod_spec = spec["template"]["spec"] if resource["kind"] == "Job" else spec
    return [c["image"] for c in pod_spec.get("initContainers", []) + pod_spec["containers"]]


def _dry_run(api: Connection, resource: dict[str, Any]) -> dict[str, Any]:
    """The API server's answer to creating RESOURCE with dryRun=All: every admission plugin
    runs, nothing is stored. The object as it would be stored; ClusterError when refused."""
    from lightkube.resources.batch_v1 import Job
    from lightkube.resources.core_v1 import ConfigMap, Pod

    kind = {"ConfigMap": ConfigMap, "Pod": Pod, "Job": Job}[resource["kind"]]
    with api_errors(f"dry run of {resource['kind']} {resource['metadata']['name']}"):
        created = api.client.create(
            kind.from_dict(resource),  # type: ignore[attr-defined]
            namespace=NAMESPACE,
            dry_run=True,
        )
    return dict(created.to_dict())


def _offline(
    resource: dict[str, Any], registry: RunningRegistry, pair: KeyPairFiles, workdir: Path
) -> dict[str, str]:
    """Each offline judge's verdict on RESOURCE: "pass", or what it said."""
    verdicts: dict[str, str] = {}
    policies = {"docs ClusterPolicy": docs_policy(f"{registry.host}/*", pair.public)}
    if resource["kind"] == "Job":
        policies["preflight Job ClusterPolicy"] = PREFLIGHT_JOB_POLICY
    for name, policy in policies.items():
        said = kyverno_judge(policy, resource, workdir / name.replace(" ", "-"))
        verdicts[f"kyverno, {name}"] = "pass" if said.admitted else said.output[-2000:]
    image_policy = docs_image_policy(f"{registry.host}/**", pair.public)
    for number, image in enumerate(_images(resource)):
        tested = policy_tester(image_policy, image, workdir / f"tester-{number}")
        verdicts[f"policy-tester, {image}"] = "pass" if tested.admitted else tested.output[-2000:]
    return verdicts


def test_what_imagekit_submits_is_accepted_by_kyverno_the_tester_and_the_api_server(
    api: Connection,
    audited: str,
    registry: RunningRegistry,
    pair: KeyPairFiles,
    workspace: Workspace,
    tmp_path: Path,
) -> None:
    rendered = _rendered(audited, workspace)
    assert [r["kind"] for r in rendered] == ["ConfigMap", "Pod", "ConfigMap", "Job"]
    for resource in rendered:
        kind, name = resource["kind"], resource["metadata"]["name"]
        if kind != "ConfigMap":  # no policy of the project is about ConfigMaps
            verdicts = _offline(resource, registry, pair, tmp_path / f"{kind}-{name}")
            assert len(verdicts) >= 2 and set(verdicts.values()) == {"pass"}, (kind, verdicts)
        stored = _dry_run(api, resource)
        assert stored["metadata"]["name"] == name
        assert stored["metadata"]["namespace"] == NAMESPACE
        assert "uid" in stored["metadata"]  # the server made it, then kept none of it
    pod, job = rendered[1], rendered[3]
    # The images are the digest the audit names, in every container.
    assert set(_images(pod)) == {audited} and set(_images(job)) == {audited}
    # A dry run stores nothing.
    for resource in rendered:
        kind, name = resource["kind"], resource["metadata"]["name"]
        assert not _exists(api, kind, name), f"{kind} {name} was stored"


def _exists(api: Connection, kind: str, name: str) -> bool:
    from lightkube.resources.batch_v1 import Job
    from lightkube.resources.core_v1 import ConfigMap, Pod

    resource = {"ConfigMap": ConfigMap, "Pod": Pod, "Job": Job}[kind]
    try:
        with api_errors(f"reading {kind} {name}"):
            api.client.get(resource, name, namespace=NAMESPACE)
    except ClusterError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _failed_creates(cluster: Cluster, job: str, deadline_s: float = 60) -> list[str]:
    """The Job controller's FailedCreate events for JOB (its pod refused by admission)."""
    deadline = time.monotonic() + deadline_s
    while True:
        events = cluster.kubectl_json(
            "get", "events", "--field-selector", f"involvedObject.name={job}"
        )["items"]
        said = [e["message"] for e in events if e.get("reason") == "FailedCreate"]
        if said or time.monotonic() >= deadline:
            return said
        time.sleep(0.5)


def test_where_the_offline_judges_and_the_api_server_disagree_the_api_server_wins(
    api: Connection,
    cluster: Cluster,
    audited: str,
    registry: RunningRegistry,
    pair: KeyPairFiles,
    workspace: Workspace,
    tmp_path: Path,
) -> None:
    """The field report's preflight pod: ``preemptionPolicy: Never`` under a class that
    preempts. Every offline judge of the project's image policies accepts it; the API
    server's Priority admission plugin refuses its pod. The API server decides."""
    klass = f"preempting-{secrets.token_hex(3)}"
    made = cluster.kubectl(
        "create", "priorityclass", klass, "--value=1000", "--preemption-policy=PreemptLowerPriority"
    )
    assert made.returncode == 0, made.stderr
    try:
        _, pod, _, job = _rendered(audited, workspace)
        suffix = secrets.token_hex(3)
        for resource in (pod, job):
            spec = resource["spec"]["template"]["spec"] if resource is job else resource["spec"]
            spec["priorityClassName"] = klass
            spec["preemptionPolicy"] = "Never"
            resource["metadata"]["name"] = f"{resource['metadata']['name'][:40]}-{suffix}"
        # The image policies (Kyverno's and the policy-controller's) accept both. The
        # preflight Job's own policy forbids the field and sides with the server here.
        for resource in (pod, job):
            verdicts = _offline(resource, registry, pair, tmp_path / resource["kind"])
            job_policy = verdicts.pop("kyverno, preflight Job ClusterPolicy", None)
            assert len(verdicts) >= 2 and set(verdicts.values()) == {"pass"}, verdicts
            assert job_policy != "pass" and (job_policy is None) == (resource is pod)
        # The API server: the pod is refused by the Priority plugin, in its words.
        with pytest.raises(ClusterError) as refused:
            _dry_run(api, pod)
        assert PRIORITY_REFUSAL in str(refused.value), str(refused.value)
        # The Job is admitted as a Job (dry run and real), but its pod never exists: the Job
        # controller's every attempt is refused by the same plugin.
        assert _dry_run(api, job)["spec"]["template"]["spec"]["preemptionPolicy"] == "Never"
        job_name = job["metadata"]["name"]
        created = cluster.kubectl("create", "-f", "-", input=json.dumps(job))
        assert created.returncode == 0, created.stderr
        try:
            failed = _failed_creates(cluster, job_name)
            assert failed and all(PRIORITY_REFUSAL in message for message in failed), failed
            pods = cluster.kubectl_json("get", "pods", "-l", f"job-name={job_name}")["items"]
            assert pods == []  # the API server won: no pod, whatever the offline judges said
        finally:
            cluster.kubectl("delete", "job", job_name, "--wait=true")
    finally:
        cluster.kubectl("delete", "priorityclass", klass)
