"""The GPU preflight as a Kubernetes Job: the manifest ``--emit-job`` prints.

On a cluster the preflight runs where the image will serve: a Job whose one pod asks for the
node's GPUs (``nvidia.com/gpu: N``), is placed by the node selector and tolerations given,
runs the image by digest, and starts the probe (from a ConfigMap, mounted read-only) under
torch's own launcher, one process a GPU. The probe prints its report as one marked line of
the log, so ``kubectl logs job/NAME > job.log`` carries it back, and ``kubectl get pods -l
job-name=NAME -o json > pod.json`` says which image the kubelet ran; ``imagekit
gpu-preflight REF --report job.log --pod pod.json`` checks the one against the other and
records the verdict.

Priority and preemption: a pod's ``preemptionPolicy`` is set by admission from its
PriorityClass; a pod that sets it to a value its class does not have is refused (the M3
field report's first preflight pod was refused for exactly that: ``preemptionPolicy: Never``
with no class, admission computing PreemptLowerPriority). So the Job never sets
``preemptionPolicy`` itself: ``--priority-class`` names a class the cluster's administrators
made (one with ``preemptionPolicy: Never`` for a preflight that must not evict anything), and
asking for a policy without a class is refused here, before the cluster refuses it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imagekit.errors import UsageError
from imagekit.gpu.launch import ProbeOptions, launcher_argv, probe_path
from imagekit.refs import Reference, parse_reference
from imagekit.registry.transport import is_loopback
from imagekit.workspace import Workspace

PROBE_MOUNT = "/imagekit-gpu"
#: The Job's container, which ``--report --pod`` holds the pod's statuses to.
CONTAINER = "gpu-preflight"
PULL_CONTAINER = "pull"
JOB_PREFIX = "imagekit-gpu-preflight"
#: How long the image may take to pull before the probe's own limit starts: serving images
#: are 10-30 GB, and a node's first pull of one takes minutes.
DEFAULT_PULL_ALLOWANCE_S = 1800
#: Kept a day after it ends, for `kubectl logs`; then the cluster deletes it.
DEFAULT_TTL_S = 86400
_SLACK_S = 120  # the launcher's start and the report's printing, past the probe's limit
#: The container's entry: torch's launcher when the image has torch; without torch, the probe
#: alone, so that the log still carries its report ("torch is not importable": INCOMPLETE)
#: instead of the launcher's import error and no report.
START = (
    "import importlib.util, os, sys; a = sys.argv[1:]; "
    f"p = a.index({PROBE_MOUNT + '/probe.py'!r}); "
    "os.execvp(a[0], a if importlib.util.find_spec('torch') else [a[0], *a[p:]])"
)

# Kubernetes' own validation (apimachinery's validation.go), anchored with \Z and fullmatch:
# a ``$`` would let a trailing newline through.
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"
_NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_QUANTITY = r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?"
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _label(text: str, limit: int = 63) -> bool:
    return len(text) <= limit and re.fullmatch(_DNS_LABEL, text) is not None


def _subdomain(text: str) -> bool:
    return len(text) <= 253 and re.fullmatch(_DNS_SUBDOMAIN, text) is not None


def _qualified_name(text: str) -> bool:
    """A label or taint key: an optional DNS subdomain prefix and ``/``, then a name."""
    prefix, slash, name = text.rpartition("/")
    if slash and not _subdomain(prefix):
        return False
    return len(name) <= 63 and re.fullmatch(_NAME_PART, name) is not None


def _label_value(text: str) -> bool:
    return text == "" or (len(text) <= 63 and re.fullmatch(_NAME_PART, text) is not None)


def _quantity(text: str) -> bool:
    return len(text) <= 32 and re.fullmatch(_QUANTITY, text) is not None


@dataclass(frozen=True)
class JobOptions:
    """The Job's own settings, each checked as the API server would check it."""

    name: str | None = None  # None: derived from the image's digest
    namespace: str | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[str, ...] = ()  # KEY[=VALUE]:EFFECT, or KEY:EFFECT (Exists)
    priority_class: str | None = None
    preemption_policy: str | None = None  # only checked against the class: never set
    shm_size: str = "16Gi"
    env: tuple[tuple[str, str], ...] = ()
    cpu: str | None = None  # None: two a GPU
    memory: str | None = None  # None: the shared memory and 8Gi a GPU
    pull_allowance_s: int = DEFAULT_PULL_ALLOWANCE_S
    ttl_s: int = DEFAULT_TTL_S
    host_network: bool = False  # the node's network: a cluster without a pod network

    def __post_init__(self) -> None:
        if self.name is not None and not _label(self.name, 52):
            raise UsageError(
                f"--job-name {self.name!r}: a DNS label (a-z, 0-9, -) of at most 52 characters",
                hint="--job-name preflight-m3",
            )
        if self.namespace is not None and not _label(self.namespace):
            raise UsageError(f"--namespace {self.namespace!r}: not a namespace (a DNS label)")
        keys = [key for key, _ in self.node_selector]
        for key, value in self.node_selector:
            if not _qualified_name(key):
                raise UsageError(f"--node-selector {key!r}: not a label key")
            if not _label_value(value):
                raise UsageError(f"--node-selector {key}={value!r}: not a label value")
            if keys.count(key) > 1:
                raise UsageError(
                    f"--node-selector {key} is given twice: a node has one value a label",
                    hint="give each label key once",
                )
        for text in self.tolerations:
            _toleration(text)
        if self.priority_class is not None and not _subdomain(self.priority_class):
            raise UsageError(f"--priority-class {self.priority_class!r}: not a PriorityClass name")
        quantities: tuple[tuple[str, str | None], ...] = (
            ("--cpu", self.cpu), ("--memory", self.memory), ("--shm-size", self.shm_size),
        )  # fmt: skip
        for what, given in quantities:
            if given is not None and not _quantity(given):
                raise UsageError(f"{what} {given!r}: not a Kubernetes quantity (16, 500m, 64Gi)")
        for what, seconds in (("--pull-timeout", self.pull_allowance_s), ("--ttl", self.ttl_s)):
            if isinstance(seconds, bool) or not 0 <= seconds <= 7 * 86400:
                raise UsageError(f"{what} {seconds}: 0 to 604800 seconds")


def _toleration(text: str) -> dict[str, Any]:
    """``KEY=VALUE:EFFECT`` (operator Equal) or ``KEY:EFFECT`` (operator Exists)."""
    head, sep, effect = text.rpartition(":")
    if not sep or effect not in _EFFECTS:
        raise UsageError(
            f"--toleration {text}: not KEY[=VALUE]:EFFECT with EFFECT one of {', '.join(_EFFECTS)}",
            hint="--toleration nvidia.com/gpu:NoSchedule",
        )
    key, eq, value = head.partition("=")
    if not _qualified_name(key):
        raise UsageError(f"--toleration {text}: {key!r} is not a taint key")
    if eq:
        if not _label_value(value):
            raise UsageError(f"--toleration {text}: {value!r} is not a taint value")
        return {"key": key, "operator": "Equal", "value": value, "effect": effect}
    return {"key": key, "operator": "Exists", "effect": effect}


def job_name(reference: Reference, job: JobOptions) -> str:
    """The Job's name: given, or derived from the image's digest (two images never share a
    Job; the same image's Job applied again is the same object)."""
    if job.name is not None:
        return job.name
    assert reference.digest is not None  # noqa: S101 - job_manifest's contract
    return f"{JOB_PREFIX}-{str(reference.digest).partition(':')[2][:12]}"


def deadline_s(options: ProbeOptions, job: JobOptions) -> int:
    """activeDeadlineSeconds: it counts from the Job's start, the image's pull included, so
    it is the pull allowance, the probe's own limit and a little for the launcher."""
    return job.pull_allowance_s + int(options.timeout_s) + _SLACK_S


def _resources(gpus: int, job: JobOptions) -> dict[str, Any]:
    """Requests equal to limits (CPU, memory, GPUs): the pod is Guaranteed, never evicted
    first; the memory covers the shared memory (an emptyDir in memory counts against it)."""
    shm_gi = _gibibytes(job.shm_size)
    cpu = job.cpu or str(2 * gpus)
    memory = job.memory or f"{shm_gi + 8 * gpus}Gi"
    wanted = {"cpu": cpu, "memory": memory}
    return {
        "requests": {**wanted, "nvidia.com/gpu": str(gpus)},
        "limits": {**wanted, "nvidia.com/gpu": str(gpus)},
    }


def _gibibytes(quantity: str) -> int:
    match = re.fullmatch(r"([0-9]+)(Gi|G)?", quantity)
    if match is None:
        return 16
    return int(match.group(1)) if match.group(2) else max(1, int(match.group(1)) >> 30)


def job_manifest(
    reference: str, options: ProbeOptions, job: JobOptions, gpus: int | None
) -> dict[str, Any]:
    """The ConfigMap holding the probe and the Job that runs it, as one List."""
    ref = parse_reference(reference)
    if ref.digest is None:
        raise UsageError(
            f"{reference}: a Job runs the image by digest, never a tag that can move",
            hint="name it REGISTRY/REPO@sha256:DIGEST (imagekit inspect REF prints it)",
        )
    if gpus is None:
        raise UsageError(
            "--emit-job needs the node's GPU count: --gpus N, or a plan with gpu.count",
            hint="the Job asks the scheduler for nvidia.com/gpu: N",
        )
    if job.preemption_policy is not None and job.priority_class is None:
        raise UsageError(
            f"--preemption-policy {job.preemption_policy} without --priority-class: admission "
            "sets a pod's preemptionPolicy from its PriorityClass and refuses a pod that says "
            "otherwise",
            hint="name a PriorityClass whose preemptionPolicy is what you want "
            "(kubectl get priorityclass), e.g. --priority-class preflight-never-preempt",
        )
    name = job_name(ref, job)
    pinned = str(ref.pinned_only(ref.digest))
    with probe_path() as path:
        probe = path.read_text()
    argv = launcher_argv("python3", f"{PROBE_MOUNT}/probe.py", "-", _sized(options, gpus))
    metadata: dict[str, Any] = {
        "labels": {"app.kubernetes.io/name": JOB_PREFIX,
                   "app.kubernetes.io/managed-by": "imagekit"},
    }  # fmt: skip
    if job.namespace:
        metadata["namespace"] = job.namespace
    small = {"cpu": "100m", "memory": "128Mi"}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        # The pull happens before this container starts (the image is pulled once for the
        # pod): it proves the image is on the node and its python3 starts, so the probe's
        # own limit is never spent on a pull.
        "initContainers": [
            {
                "name": PULL_CONTAINER,
                "image": pinned,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "-c", "import sys; print('image present:', sys.version)"],
                "resources": {"requests": small, "limits": small},
                "securityContext": {"allowPrivilegeEscalation": False},
            }
        ],
        "containers": [
            {
                "name": CONTAINER,
                "image": pinned,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "-c", START, *argv],
                "env": [{"name": k, "value": v} for k, v in job.env],
                "resources": _resources(gpus, job),
                "securityContext": {"allowPrivilegeEscalation": False},
                "volumeMounts": [
                    {"name": "probe", "mountPath": PROBE_MOUNT, "readOnly": True},
                    {"name": "dshm", "mountPath": "/dev/shm"},  # noqa: S108 - the pod's shm
                ],
            }
        ],
        "volumes": [
            {"name": "probe", "configMap": {"name": f"{name}-probe"}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": job.shm_size}},
        ],
    }
    if job.node_selector:
        pod_spec["nodeSelector"] = dict(job.node_selector)
    if job.tolerations:
        pod_spec["tolerations"] = [_toleration(t) for t in job.tolerations]
    if job.priority_class:
        pod_spec["priorityClassName"] = job.priority_class
    if job.host_network:
        pod_spec["hostNetwork"] = True
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {**metadata, "name": f"{name}-probe"},
                "data": {"probe.py": probe},
            },
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {**metadata, "name": name},
                "spec": {
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": deadline_s(options, job),
                    "ttlSecondsAfterFinished": job.ttl_s,
                    "template": {"metadata": {"labels": metadata["labels"]}, "spec": pod_spec},
                },
            },
        ],
    }


def node_job_name(base: str, node: str) -> str:
    """The Job of ``base`` for one node: ``BASE-NODE`` when that is a DNS label of at most 63
    characters (the Job's name is its pods' ``job-name`` label value), else the node's name
    cut to fit and a hash of it, so that two nodes never share a Job."""
    plain = f"{base}-{node}"
    if _label(plain):
        return plain
    digest = hashlib.sha256(node.encode()).hexdigest()[:8]
    slug = re.sub(r"[^a-z0-9-]+", "-", node.lower()).strip("-")
    room = 63 - len(base) - len(digest) - 2
    cut = slug[: max(room, 0)].strip("-")
    return f"{base}-{cut}-{digest}" if cut else f"{base[: 63 - len(digest) - 1]}-{digest}"


def for_node(manifest: Mapping[str, Any], node: str) -> tuple[dict[str, Any], str]:
    """The emitted List pinned to one node, and its Job's name: the Job (and its probe's
    ConfigMap) named for the node, its pod template given a required node affinity on the
    node's name (``matchFields metadata.name``), the pinning the DaemonSet controller gives
    each of its pods. The pod still goes through the scheduler, so the node's taints, its free
    GPUs and the PriorityClass count as for any pod, and a pod that cannot go there stays
    Pending in the scheduler's words; ``spec.nodeName`` would skip the scheduler, and the
    ``kubernetes.io/hostname`` label need not equal the node's name."""
    config_map, job = (copy.deepcopy(dict(item)) for item in manifest["items"])
    name = node_job_name(str(job["metadata"]["name"]), node)
    job["metadata"]["name"] = name
    config_map["metadata"]["name"] = f"{name}-probe"
    pod_spec = job["spec"]["template"]["spec"]
    for volume in pod_spec["volumes"]:
        if "configMap" in volume:
            volume["configMap"]["name"] = f"{name}-probe"
    pod_spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        }
    }
    return {**manifest, "items": [config_map, job]}, name


@dataclass(frozen=True)
class EmittedJob:
    """The manifest to apply, the Job's name (for kubectl wait and logs), and what an
    operator should know before booking GPUs for it."""

    manifest: dict[str, Any]
    name: str
    warnings: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return self.manifest


def emit_job(
    workspace: Workspace, reference: str, options: ProbeOptions, job: JobOptions
) -> EmittedJob:
    """``--emit-job``: the Job, and warnings for an image no node can pull (on a loopback
    registry) and for an image this ledger's own audit found without torch."""
    manifest = job_manifest(reference, options, job, options.expect.gpus)
    ref = parse_reference(reference)
    warnings = []
    if is_loopback(ref.registry):
        warnings.append(
            f"{ref.registry} is a loopback registry: a cluster node pulls from its own "
            "loopback, not from this machine; push the image where the cluster can pull it"
        )
    audited = _audit_without_torch(workspace, ref)
    if audited is not None:
        warnings.append(audited)
    return EmittedJob(manifest, job_name(ref, job), tuple(warnings))


def _audit_without_torch(workspace: Workspace, ref: Reference) -> str | None:
    """The newest audit record of this image (by digest) that found no torch, in words."""
    from imagekit.ledger.readback import iter_records

    if not workspace.ledger_path.exists():
        return None
    digest = str(ref.digest)
    found = None
    with iter_records(workspace.ledger_path) as records:
        for record in records:
            if record.kind != "audit" or not any(digest in str(v) for v in record.images.values()):
                continue
            report = record.details.get("report")
            versions = report.get("versions") if isinstance(report, dict) else None
            if isinstance(versions, dict) and "torch" in versions:
                found = record if versions["torch"] is None else None
    if found is None:
        return None
    return (
        f"the ledger's audit of this image (record {found.seq}, {found.status}) found no "
        "torch: the probe needs the image's own torch, and the GPUs would be booked for nothing"
    )


def _sized(options: ProbeOptions, gpus: int) -> ProbeOptions:
    from dataclasses import replace

    return replace(options, nproc_per_node=options.nproc_per_node or gpus)


def env_pairs(values: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE`` options as pairs; anything else is bad input."""
    pairs = []
    for text in values:
        key, eq, value = text.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise UsageError(f"--env {text}: not KEY=VALUE", hint="--env NCCL_DEBUG=INFO")
        pairs.append((key, value))
    return tuple(pairs)


def selector_pairs(values: Sequence[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for text in values:
        key, eq, value = text.partition("=")
        if not eq:
            raise UsageError(f"--node-selector {text}: not KEY=VALUE")
        pairs.append((key, value))
    return tuple(pairs)


def dumps(manifest: Mapping[str, Any]) -> str:
    return json.dumps(manifest, indent=2)
