"""`imagekit audit REF --cluster`: the audit's probe in a pod of the image, by digest.

The seeds' zero-GPU pod, run by imagekit itself: the probe (imagekit/audit/probe.py, in a
ConfigMap the pod mounts read-only, owned by the pod so the cluster removes it with the pod)
runs under the image's python3 with the docker audit's environment (no GPU visible, the
Hugging Face libraries offline), no GPU requested, no service-account token, no service
links, a read-only root filesystem, every capability dropped, no privilege escalation, CPU
and memory limits. The pod's log is the probe's report, decided as the docker audit decides
it (imagekit.audit.report). The kubelet's ``status.imageID`` of the container is the final
pull on that cluster: it must name the digest the audit named (imagekit.cluster.pods judges
it), or the audit does not pass whatever the probe said.

Two records, each bound to the pod (namespace, name, uid, node): the audit (its details'
``pod``) and the final pull (``imagekit ledger record-pod``'s, from the pod's JSON, kept in
the evidence folder: the pod is imagekit's own, it carries no secret).

The pod's network is not ``--network none``: a pod has the cluster's pod network (or, with
``--host-network``, the node's), and the report says which. The pod is deleted afterwards
unless ``keep``. A pod still Pending at the deadline ends the audit as CouldNotFinish naming
the scheduler's or the kubelet's reason.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from imagekit import evidence
from imagekit.audit.profiles import load_profile, probe_spec
from imagekit.audit.report import SCOPE, AuditVerdict, ProbeReport, decide, parse_probe_output
from imagekit.audit.runner import ENVIRONMENT as AUDIT_ENVIRONMENT
from imagekit.audit.runner import HOME_IN_CONTAINER, PROBE_IN_CONTAINER, Limits
from imagekit.audit.stage import plan_inputs
from imagekit.cluster.connection import ClusterTarget, Connection, connect
from imagekit.cluster.pods import VERIFIED, PodOptions, record_pod
from imagekit.cluster.runner import (
    PodPlace,
    PodRef,
    PodRun,
    PodRunner,
    PodState,
    Progress,
    api_errors,
)
from imagekit.errors import ClusterError, CouldNotFinish, UsageError
from imagekit.kinds.audit import AuditPod
from imagekit.ledger import AuditDetails, AuditSummary, append_record
from imagekit.refs import parse_reference
from imagekit.workspace import Workspace

CONTAINER = "probe"
DEFAULT_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class ClusterAuditRequest:
    ref: str  # REPO@sha256:... (a tag is refused: the pod must run what the audit names)
    target: ClusterTarget = field(default_factory=ClusterTarget)
    profile: str | None = None
    plan: str | None = None
    keep: bool = False
    host_network: bool = False
    node: str | None = None  # run on this node (its kubernetes.io/hostname label)
    timeout_s: float = DEFAULT_TIMEOUT_S  # from submission to the pod's end
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True)
class ClusterAuditResult:
    target: str
    digest: str
    cluster: str
    pod: AuditPod
    verdict: AuditVerdict
    report: ProbeReport
    final_pull: str  # verified, mismatch or unknown
    final_pull_reason: str
    scope: str
    evidence_dir: Path
    report_path: Path
    ledger_seqs: tuple[int, ...]
    kept: bool

    @property
    def ok(self) -> bool:
        return self.verdict.status.accepted and self.final_pull == VERIFIED

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def evidence(self) -> Path:
        return self.report_path

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "digest": self.digest,
            "cluster": self.cluster,
            "pod": self.pod.to_json(),
            "status": self.verdict.status,
            "status_sentence": self.verdict.sentence,
            "scope": self.scope,
            "failing_checks": list(self.verdict.failing),
            "deferred_checks": list(self.verdict.deferred),
            "final_pull": {"status": self.final_pull, "reason": self.final_pull_reason},
            "ok": self.ok,
            "kept": self.kept,
            "evidence": {"dir": str(self.evidence_dir), "report": str(self.report_path)},
            "ledger": {"seqs": list(self.ledger_seqs)},
        }


def isolation(host_network: bool) -> list[str]:
    """What the audit pod is given and denied, in words (the report and the record say it)."""
    network = (
        "the node's host network (hostNetwork: true)"
        if host_network
        else "the cluster's pod network"
    )
    return [
        f"network: {network}; NOT `--network none`: the probe could reach what such a pod reaches",
        "no GPU requested (no nvidia.com/gpu), CUDA_VISIBLE_DEVICES empty, "
        "NVIDIA_VISIBLE_DEVICES=void",
        "no service-account token (automountServiceAccountToken: false), no service links",
        "read-only root filesystem, every capability dropped, no privilege escalation",
    ]


def _probe_source() -> str:
    return resources.files("imagekit.audit").joinpath("probe.py").read_text()


def audit_pod_manifest(
    name: str, image: str, spec_json: str, request: ClusterAuditRequest
) -> dict[str, Any]:
    """The audit pod: the probe from the ConfigMap ``name``, locked down, never restarted."""
    limits = request.limits
    volume_dir = PROBE_IN_CONTAINER.rpartition("/")[0]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": request.host_network,
        "activeDeadlineSeconds": max(1, int(request.timeout_s)),
        "terminationGracePeriodSeconds": 5,
        "containers": [
            {
                "name": CONTAINER,
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", PROBE_IN_CONTAINER, "--spec-json", spec_json],
                "env": [{"name": k, "value": v} for k, v in AUDIT_ENVIRONMENT.items()],
                "resources": {
                    "requests": {"cpu": "100m", "memory": "256Mi"},
                    "limits": {"cpu": str(limits.cpus), "memory": _quantity(limits.memory)},
                },
                "securityContext": {
                    "readOnlyRootFilesystem": True,
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [
                    {"name": "probe", "mountPath": volume_dir, "readOnly": True},
                    {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 - the pod's /tmp
                    {"name": "home", "mountPath": HOME_IN_CONTAINER},
                ],
            }
        ],
        "volumes": [
            {"name": "probe", "configMap": {"name": name}},
            {"name": "tmp", "emptyDir": {"sizeLimit": _quantity(limits.tmp_size)}},
            {"name": "home", "emptyDir": {"sizeLimit": _quantity(limits.home_size)}},
        ],
    }
    if request.node is not None:  # through the scheduler, which says why it cannot
        pod_spec["nodeSelector"] = {"kubernetes.io/hostname": request.node}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "imagekit"}},
        "spec": pod_spec,
    }


def _quantity(docker_size: str) -> str:
    """Docker's 4g/256m as Kubernetes' 4Gi/256Mi."""
    units = {"k": "Ki", "m": "Mi", "g": "Gi"}
    unit = docker_size[-1:].lower()
    return docker_size[:-1] + units[unit] if unit in units else docker_size


@dataclass(frozen=True)
class AuditPodManifests:
    """What ``audit_in_cluster`` submits, in order: the probe's ConfigMap, then the pod (both
    in the connection's namespace, which neither names). The spec is the probe's own."""

    name: str
    profile: str
    spec: dict[str, Any]
    config_map: dict[str, Any]
    pod: dict[str, Any]


def render_audit_pod(
    request: ClusterAuditRequest, workspace: Workspace, name: str | None = None
) -> AuditPodManifests:
    """The manifests the audit submits for REQUEST, rendered without a cluster: the submit
    path uses exactly these (a name of its own, unless NAME is given). A plan adds what the
    engine audit takes from it: its profile (unless one is given), its find_spec modules and
    its overlays' destinations (files expected to differ from their RECORD)."""
    reference = parse_reference(request.ref)
    if reference.digest is None:
        raise UsageError(
            f"{request.ref} names no digest: the pod must run the image the audit names",
            hint="pass REPO@sha256:... (`imagekit inspect REF` prints the digest)",
        )
    digest = str(reference.digest)
    if name is None:
        name = f"imagekit-audit-{digest.removeprefix('sha256:')[:12]}-{secrets.token_hex(3)}"
    profile_name = request.profile
    modules: list[str] = []
    expected: list[str] = []
    if request.plan:
        plan_profile, modules, expected, _platform = plan_inputs(workspace, request.plan)
        profile_name = profile_name or plan_profile
    profile_name = profile_name or "generic"
    profile = load_profile(profile_name).with_modules(modules)
    spec = probe_spec(profile, expected_paths=expected, host=False)
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "imagekit"}},
        "data": {PROBE_IN_CONTAINER.rpartition("/")[2]: _probe_source()},
    }
    pod = audit_pod_manifest(name, request.ref, json.dumps(spec, sort_keys=True), request)
    return AuditPodManifests(name, profile_name, spec, config_map, pod)


def _put_probe(runner: PodRunner, namespace: str, config_map: dict[str, Any]) -> None:
    from lightkube.resources.core_v1 import ConfigMap

    name = config_map["metadata"]["name"]
    with api_errors(f"creating ConfigMap {namespace}/{name} (the probe)"):
        runner.connection.client.create(
            ConfigMap.from_dict(config_map),  # type: ignore[no-untyped-call]
            namespace=namespace,
        )


def _own_probe(runner: PodRunner, ref: PodRef) -> None:
    """The probe's ConfigMap belongs to the pod: the cluster removes it with the pod."""
    from lightkube.resources.core_v1 import ConfigMap
    from lightkube.types import PatchType

    owner = {"apiVersion": "v1", "kind": "Pod", "name": ref.name, "uid": ref.uid}
    with api_errors(f"giving ConfigMap {ref.namespace}/{ref.name} to its pod"):
        runner.connection.client.patch(
            ConfigMap,
            ref.name,
            {"metadata": {"ownerReferences": [owner]}},
            namespace=ref.namespace,
            patch_type=PatchType.MERGE,
        )


def _drop_probe(runner: PodRunner, namespace: str, name: str) -> None:
    from lightkube.resources.core_v1 import ConfigMap

    with api_errors(f"deleting ConfigMap {namespace}/{name}"):
        runner.connection.client.delete(ConfigMap, name, namespace=namespace)


def audit_in_cluster(
    workspace: Workspace, request: ClusterAuditRequest, progress: Progress | None = None
) -> ClusterAuditResult:
    """Run the probe in a pod of REF on the cluster, decide, check the kubelet's imageID,
    record both; the pod deleted afterwards unless ``keep``."""
    rendered = render_audit_pod(request, workspace)
    with connect(request.target) as connection:
        return _audit_in_pod(workspace, request, connection, rendered, progress)


def _audit_in_pod(
    workspace: Workspace,
    request: ClusterAuditRequest,
    connection: Connection,
    rendered: AuditPodManifests,
    progress: Progress | None,
) -> ClusterAuditResult:
    digest = str(parse_reference(request.ref).digest)
    runner = PodRunner(connection, progress)
    name = rendered.name
    namespace = connection.namespace
    run_dir = evidence.new_run_dir(workspace.evidence_dir, request.plan or "cluster-audit", digest)
    evidence.write_json(run_dir / "spec.json", rendered.spec)
    evidence.write_json(run_dir / "pod-manifest.json", rendered.pod)
    _put_probe(runner, namespace, rendered.config_map)
    run: PodRun | None = None
    try:
        run = PodPlace(runner, CONTAINER, grace_period=0).submit(rendered.pod, run_dir)
        _own_probe(runner, run.ref)
        state = run.wait(request.timeout_s)
        if state.timed_out or not state.finished:
            raise CouldNotFinish(
                f"audit INCOMPLETE: pod {namespace}/{name} was still {state.phase} after "
                f"{request.timeout_s:g} s: {state.reason or 'no reason given'}",
                hint="see `kubectl describe pod`; --keep keeps the pod to look at",
            )
        log = run.logs()
        evidence.write_bytes(run_dir / "probe-log.txt", log.encode())
        return _decide_and_record(
            workspace, request, rendered.profile, connection.server, state, log, digest, run_dir
        )
    finally:
        if not request.keep:
            if run is not None:
                run.cleanup()
            _drop_probe_quietly(runner, namespace, name)


def _drop_probe_quietly(runner: PodRunner, namespace: str, name: str) -> None:
    try:
        _drop_probe(runner, namespace, name)
    except ClusterError as exc:  # gone with its pod already (404) is the usual case
        if exc.status != 404:
            raise


def _decide_and_record(
    workspace: Workspace,
    request: ClusterAuditRequest,
    profile: str,
    cluster: str,
    state: PodState,
    log: str,
    digest: str,
    run_dir: Path,
) -> ClusterAuditResult:
    lines = [line for line in log.splitlines() if line.startswith("{")]
    try:
        report = parse_probe_output(lines[-1] if lines else log)
    except CouldNotFinish as exc:
        raise CouldNotFinish(
            f"pod {state.ref.namespace}/{state.ref.name} ended {state.phase} without a probe "
            f"report ({state.reason or 'no reason given'}); its log is kept in {run_dir}",
            hint="the image needs python3 (3.8+) on its PATH",
        ) from exc
    verdict = decide(report)
    pod_json = run_dir / "pod.json"
    evidence.write_json(pod_json, state.document)
    where = [
        f"in pod {state.ref.namespace}/{state.ref.name} (uid {state.ref.uid}) on node "
        f"{state.node} of the cluster at {cluster}",
        *isolation(request.host_network),
    ]
    binding = AuditPod(
        cluster=cluster,
        namespace=state.ref.namespace,
        name=state.ref.name,
        uid=state.ref.uid,
        node=state.node,
        image_id=state.image_ids.get(CONTAINER, ""),
        isolation=isolation(request.host_network),
    )
    scope = f"{SCOPE}; " + "; ".join(where)
    report_path = run_dir / "audit-report.json"
    evidence.write_json(
        report_path,
        {
            "target": request.ref,
            "status": verdict.status,
            "status_sentence": verdict.sentence,
            "scope": scope,
            "pod": binding.to_json(),
            "checks": [c.model_dump(mode="json") for c in report.checks],
        },
    )
    audit_record = append_record(
        workspace,
        "audit",
        plan=request.plan,
        images={"image": request.ref},
        status=verdict.status,
        scope=scope,
        evidence=report_path,
        details=AuditDetails(
            profile=profile,
            image_id=digest,
            pod=binding,
            report=AuditSummary(
                checks={c.name: c.status for c in report.checks},
                failing=list(verdict.failing),
                deferred=list(verdict.deferred),
                skipped=list(verdict.skipped),
            ),
        ),
    )
    pulled = record_pod(
        workspace,
        pod_json,
        PodOptions(plan=request.plan, expect=digest, container=CONTAINER, where=state.node),
    )
    [check] = pulled.checks
    seqs = (audit_record.seq, *(c.record.seq for c in pulled.checks if c.record is not None))
    return ClusterAuditResult(
        target=request.ref,
        digest=digest,
        cluster=cluster,
        pod=binding,
        verdict=verdict,
        report=report,
        final_pull=check.status,
        final_pull_reason=check.reason,
        scope=scope,
        evidence_dir=run_dir,
        report_path=report_path,
        ledger_seqs=seqs,
        kept=request.keep,
    )
