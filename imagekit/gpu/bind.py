"""Binding a GPU probe's report to where it was made, before a word of it is believed.

A report is only what some process printed; what makes it evidence about an image on a node
is where it came from:

- **From a Job's log** (``--report LOG --pod POD``): the log carries exactly one report (one
  marker: a log with two, a FAIL and then a PASS even mid-line after another rank's output,
  is ambiguous and refused); the pod finished (phase Succeeded: a Running, Pending or Failed
  pod's log is not a finished preflight); the Job's own container (``gpu-preflight``) ran
  the image (its imageID names REF's manifest, or REF's config as an image ID); and the
  report was written in that pod (its host is the pod's host name, or the node's for a pod
  on the host's network). The node recorded is the pod's ``spec.nodeName``.
- **On this host** (``--host --python P``): the interpreter is not imagekit's, so its report
  is held to what this host shows to imagekit itself: ``nvidia-smi``, run here by imagekit,
  must list every GPU the report claims (by UUID, with the same name and memory), and the
  report's host is this host's name. A report claiming GPUs the host does not show is
  refused; a host where nvidia-smi does not answer cannot confirm anything, nor can it show
  the GPUs of other nodes (a rendezvous of several): INCOMPLETE, never a pass.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from imagekit.cluster.pods import Pod, judge_image_id, load_pods, parse_image_id
from imagekit.errors import CheckFailed, UsageError
from imagekit.gpu.judges import Decision
from imagekit.gpu.report import ProbeReport, parse_report
from imagekit.refs import Digest
from imagekit.runtime.cri import FinalPullStatus

#: The probe prints its report as one line of the Job's log after this marker
#: (imagekit/gpu/probe.py's ``--out -``).
REPORT_MARKER = b"@@IMAGEKIT_GPU_REPORT@@"
#: The Job's container (imagekit.gpu.job.CONTAINER): the one whose status binds the report.
JOB_CONTAINER = "gpu-preflight"
_NVIDIA_SMI_TIMEOUT_S = 30


def report_from_log(data: bytes, source: str) -> tuple[ProbeReport, bytes]:
    """The probe's report from a Job's log (its one marked line) or from the report file
    itself, with the exact bytes it was read from. Two markers are ambiguous: refused."""
    count = data.count(REPORT_MARKER)
    if count > 1:
        raise UsageError(
            f"{source} carries {count} GPU probe reports: which one is this run's is "
            "ambiguous, and none is taken",
            hint="give the log of one Job's pod (kubectl logs POD), as the Job printed it",
        )
    if count == 1:
        start = data.index(REPORT_MARKER) + len(REPORT_MARKER)
        line = data[start:].split(b"\n", 1)[0].strip()
        return parse_report(line, source), line
    return parse_report(data, source), data


@dataclass(frozen=True)
class PodBinding:
    pod: str  # namespace/name
    uid: str | None
    node: str | None
    image_id: str
    reason: str


def _pod_hosts(pod: Pod) -> tuple[str, ...]:
    """The host names a process in POD sees: the pod's name (Kubernetes' default host name,
    at most 63 characters), or the node's for a pod on the host's network."""
    hosts = [pod.metadata.name[:63]]
    if pod.spec.nodeName:
        hosts.append(pod.spec.nodeName)
    return tuple(hosts)


def bind_to_pod(
    report: ProbeReport,
    pod_file: Path,
    manifest: Digest,
    config: Digest,
    image: str,
    *,
    log_read_from: str | None = None,
) -> PodBinding:
    """The one pod of POD_FILE that made REPORT, or CheckFailed (exit 1, nothing recorded)
    naming what each pod lacks.

    ``log_read_from`` (namespace/name) says imagekit read the log itself, from that pod,
    through the API server (``gpu-preflight --cluster``): for that pod on the host's network
    the report's host is the node machine's own name, which the API does not show (a kubelet
    with ``--hostname-override`` names its node otherwise), and the log's source is proof
    enough; a log handed over by a person keeps the host check."""
    pods, _ = load_pods(pod_file)
    seen: list[str] = []
    for pod in pods:
        name = f"{pod.metadata.namespace}/{pod.metadata.name}"
        ours = [c for c in pod.status.containerStatuses if c.name == JOB_CONTAINER]
        if not ours:
            names = ", ".join(c.name for c in pod.status.containerStatuses) or "none"
            seen.append(f"{name}: no container {JOB_CONTAINER!r} (the Job's; it has {names})")
            continue
        status = ours[0]
        verdict, said = judge_image_id(parse_image_id(status.imageID), manifest, config,
                                       status.imageID)  # fmt: skip
        if verdict is not FinalPullStatus.VERIFIED:
            seen.append(f"{name} {status.name}: {said}")
            continue
        if pod.status.phase != "Succeeded":
            seen.append(
                f"{name} is {pod.status.phase or 'in no phase'}: a report is taken only from a "
                "pod that finished (Succeeded)"
            )
            continue
        read_here = pod.spec.hostNetwork and log_read_from == name
        if report.host not in _pod_hosts(pod) and not read_here:
            seen.append(
                f"{name}: the report was written on host {report.host!r}, not in this pod "
                f"(host {pod.metadata.name[:63]!r}, node {pod.spec.nodeName!r})"
            )
            continue
        return PodBinding(name, pod.metadata.uid, pod.spec.nodeName, str(config), said)
    raise CheckFailed(
        f"the report is bound to no pod that ran {image}: " + "; ".join(seen or ["no pods"]),
        hint="give the finished pod of the Job that printed this log (kubectl get pods -l "
        "job-name=NAME -o json); nothing was recorded",
    )


@dataclass(frozen=True)
class ShownGpu:
    index: str
    uuid: str
    name: str
    memory_mib: int | None


def host_gpus() -> tuple[tuple[ShownGpu, ...], str | None]:
    """The GPUs nvidia-smi on this host lists (run by imagekit, never by the interpreter
    under test), or () and why none could be listed."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return (), "nvidia-smi is not on this host's PATH"
    try:
        done = subprocess.run(  # noqa: S603 - nvidia-smi found on PATH, fixed arguments
            [smi, "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=_NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (), f"nvidia-smi did not answer: {exc}"
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return (), f"nvidia-smi exited {done.returncode}: {said[-1] if said else ''}"
    shown = []
    for line in done.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and parts[1].startswith("GPU-"):
            memory = int(parts[3]) if parts[3].isdigit() else None
            shown.append(ShownGpu(parts[0], parts[1], parts[2], memory))
    return tuple(shown), None if shown else "nvidia-smi lists no GPU"


def check_on_host(
    report: ProbeReport, shown: tuple[ShownGpu, ...], why_none: str | None
) -> Decision:
    """The report's GPUs against what this host shows: PASS when every one is shown (UUID,
    name, memory); INCOMPLETE when nothing can be shown; CheckFailed (refused, nothing
    recorded) when the report claims a GPU or a host this host does not show."""
    if report.mode == "self-test":
        return Decision.recorded("a CPU self-test claims no GPU")
    here = socket.gethostname()
    if report.host != here:
        raise CheckFailed(
            f"the report says it ran on {report.host!r}; this host is {here!r}: refused",
            hint="--host preflights this host; nothing was recorded",
        )
    claimed = [gpu for gpu in report.gpus if gpu.host in (None, report.host)]
    elsewhere = len(report.gpus) - len(claimed)
    if why_none is not None:
        return Decision.incomplete(
            f"this host shows no GPU to imagekit ({why_none}): the report's {len(claimed)} "
            "GPU(s) cannot be checked against it"
        )
    by_uuid = {gpu.uuid: gpu for gpu in shown}
    unshown = []
    for gpu in claimed:
        row = by_uuid.get(gpu.uuid or "")
        gib = gpu.gib
        if row is None or row.name != gpu.name:
            unshown.append(f"rank {gpu.rank}: {gpu.name} {gpu.uuid}")
        elif (
            row.memory_mib is not None
            and gib is not None
            and abs(gib * 1024 - row.memory_mib) > 2048
        ):
            unshown.append(
                f"rank {gpu.rank}: {gib:.1f} GiB where nvidia-smi shows {row.memory_mib} MiB"
            )
    if unshown:
        listed = ", ".join(f"{g.name} {g.uuid}" for g in shown)
        raise CheckFailed(
            "the report claims GPU(s) this host does not show: "
            + "; ".join(unshown)
            + f" (nvidia-smi lists {listed})",
            hint="the interpreter given with --python wrote a report of other GPUs; nothing "
            "was recorded",
        )
    if elsewhere:
        return Decision.incomplete(
            f"{elsewhere} GPU(s) of the report are on other nodes, which this host cannot show"
        )
    return Decision.passed(f"every GPU of the report is one nvidia-smi lists on {here}")
