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

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imagekit.errors import UsageError
from imagekit.gpu.launch import ProbeOptions, launcher_argv, probe_path
from imagekit.refs import parse_reference

PROBE_MOUNT = "/imagekit-gpu"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class JobOptions:
    name: str = "imagekit-gpu-preflight"
    namespace: str | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[str, ...] = ()  # KEY[=VALUE]:EFFECT, or KEY:Exists:EFFECT
    priority_class: str | None = None
    preemption_policy: str | None = None  # only checked against the class: never set
    shm_size: str = "16Gi"
    env: tuple[tuple[str, str], ...] = ()


def _toleration(text: str) -> dict[str, Any]:
    """``KEY=VALUE:EFFECT`` (operator Equal) or ``KEY:EFFECT`` (operator Exists)."""
    head, sep, effect = text.rpartition(":")
    if not sep or effect not in _EFFECTS:
        raise UsageError(
            f"--toleration {text}: not KEY[=VALUE]:EFFECT with EFFECT one of {', '.join(_EFFECTS)}",
            hint="--toleration nvidia.com/gpu:NoSchedule",
        )
    key, eq, value = head.partition("=")
    if not _LABEL_KEY.match(key):
        raise UsageError(f"--toleration {text}: {key!r} is not a taint key")
    if eq:
        return {"key": key, "operator": "Equal", "value": value, "effect": effect}
    return {"key": key, "operator": "Exists", "effect": effect}


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
    if not _NAME.match(job.name):
        raise UsageError(f"--job-name {job.name}: a DNS label of at most 52 characters")
    if job.preemption_policy is not None and job.priority_class is None:
        raise UsageError(
            f"--preemption-policy {job.preemption_policy} without --priority-class: admission "
            "sets a pod's preemptionPolicy from its PriorityClass and refuses a pod that says "
            "otherwise",
            hint="name a PriorityClass whose preemptionPolicy is what you want "
            "(kubectl get priorityclass), e.g. --priority-class preflight-never-preempt",
        )
    selector = dict(job.node_selector)
    for key in selector:
        if not _LABEL_KEY.match(key):
            raise UsageError(f"--node-selector {key}: not a label key")
    pinned = str(ref.pinned_only(ref.digest))
    with probe_path() as path:
        probe = path.read_text()
    argv = launcher_argv("python3", f"{PROBE_MOUNT}/probe.py", "-", _sized(options, gpus))
    metadata: dict[str, Any] = {
        "labels": {"app.kubernetes.io/name": "imagekit-gpu-preflight",
                   "app.kubernetes.io/managed-by": "imagekit"},
    }  # fmt: skip
    if job.namespace:
        metadata["namespace"] = job.namespace
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [
            {
                "name": "gpu-preflight",
                "image": pinned,
                "imagePullPolicy": "IfNotPresent",
                "command": argv,
                "env": [{"name": k, "value": v} for k, v in job.env],
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                "securityContext": {"allowPrivilegeEscalation": False},
                "volumeMounts": [
                    {"name": "probe", "mountPath": PROBE_MOUNT, "readOnly": True},
                    {"name": "dshm", "mountPath": "/dev/shm"},  # noqa: S108 - the pod's shm
                ],
            }
        ],
        "volumes": [
            {"name": "probe", "configMap": {"name": f"{job.name}-probe"}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": job.shm_size}},
        ],
    }
    if selector:
        pod_spec["nodeSelector"] = selector
    if job.tolerations:
        pod_spec["tolerations"] = [_toleration(t) for t in job.tolerations]
    if job.priority_class:
        pod_spec["priorityClassName"] = job.priority_class
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {**metadata, "name": f"{job.name}-probe"},
                "data": {"probe.py": probe},
            },
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {**metadata, "name": job.name},
                "spec": {
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": int(options.timeout_s),
                    "template": {"metadata": {"labels": metadata["labels"]}, "spec": pod_spec},
                },
            },
        ],
    }


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
