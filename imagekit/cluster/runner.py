"""The pod runner: a pod submitted, waited for with a deadline, its log read, cleaned up.

What the audit's and the GPU preflight's cluster steps share, and what the field reports
taught about clusters, as behaviour:

- a re-run waits until the old pod of the same name is really gone: a pod still Terminating
  holds its name, and creating it again fails ("object is being deleted");
- a pod that stays Pending ends at the deadline with the scheduler's or the kubelet's own
  words (``PodState.reason``), never a hang;
- a pod whose ``preemptionPolicy`` disagrees with its PriorityClass is refused before it is
  submitted, naming the class's value: the API server's Priority admission plugin computes
  the policy from the class and refuses a pod that says otherwise (a GPU preflight pod that
  set ``Never`` under a class that preempts was refused so in the field);
- any other refusal (an admission plugin's, RBAC's) is a ClusterError with the API server's
  message;
- while it waits, each new phase or reason is said once through ``progress`` (the CLI's
  stderr).

The image a pod really ran is its containers' ``status.imageID`` (``PodState.image_ids``),
which imagekit.cluster.pods reads and judges.

``PodPlace`` and ``PodRun`` are PodRunner as the runner seam's place and run
(imagekit.runners.seam): what the audit's and the GPU preflight's cluster steps call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagekit.cluster.connection import Connection
from imagekit.errors import ClusterError, ClusterUnavailable, UsageError
from imagekit.interrupt import Stop

Progress = Callable[[str], None]
LOG_LIMIT = 16 * 1024 * 1024  # a pod's log read back, at most (a probe report is far less)
_POLL_S = 0.5
_DONE = ("Succeeded", "Failed")
# Waiting reasons that only say the kubelet is on its way, not why a pod is stuck.
_ON_ITS_WAY = ("ContainerCreating", "PodInitializing")


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class PodState:
    """A pod as the API server last described it (``document``, its JSON), or gone."""

    ref: PodRef
    document: dict[str, Any]
    timed_out: bool = False

    @property
    def phase(self) -> str:
        return str(self.document.get("status", {}).get("phase") or "Pending")

    @property
    def finished(self) -> bool:
        return self.phase in _DONE

    @property
    def node(self) -> str | None:
        node = self.document.get("spec", {}).get("nodeName")
        return str(node) if node else None

    @property
    def image_ids(self) -> dict[str, str]:
        """Each container's ``status.imageID``: the image the runtime ran, as the kubelet
        reports it (empty while the container is being created)."""
        status = self.document.get("status", {})
        found = {}
        for entry in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
            found[str(entry["name"])] = str(entry.get("imageID") or "")
        return found

    @property
    def reason(self) -> str | None:
        """Why the pod is not (yet) done, in the scheduler's or the kubelet's words."""
        status = self.document.get("status", {})
        for condition in status.get("conditions", []):
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return f"not scheduled ({condition.get('reason')}): {condition.get('message')}"
        for entry in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
            state = entry.get("state") or {}
            waiting = state.get("waiting")
            if waiting and waiting.get("reason") not in (None, *_ON_ITS_WAY):
                message = waiting.get("message")
                return f"container {entry['name']} {waiting['reason']}" + (
                    f": {message}" if message else ""
                )
            ended = state.get("terminated")
            if ended and ended.get("exitCode"):
                return (
                    f"container {entry['name']} exited {ended['exitCode']} ({ended.get('reason')})"
                )
        if status.get("reason"):
            return f"{status['reason']}: {status.get('message', '')}".rstrip(": ")
        return None


@contextmanager
def api_errors(what: str) -> Iterator[None]:
    """A lightkube or HTTP failure as imagekit's error, the API server's words kept."""
    import httpx
    from lightkube import ApiError

    try:
        yield
    except ApiError as exc:
        raise ClusterError(f"{what}: {exc.status.message}", status=exc.status.code) from exc
    except httpx.HTTPError as exc:
        raise ClusterUnavailable(f"{what}: the API server did not answer ({exc})") from exc


class PodRunner:
    """Pods of one connection's namespace (or the namespace a manifest names)."""

    def __init__(
        self, connection: Connection, progress: Progress | None = None, stop: Stop | None = None
    ) -> None:
        self.connection = connection
        self._progress = progress or (lambda line: None)
        self._stop = stop

    def pause(self) -> None:
        """One poll's wait; in a worker thread of an interrupted command (``stop`` set), it
        raises Stopped instead, so the worker goes on to its cleanup. Waiting for a deleted
        pod to go (``wait_gone``) never stops so: it is the cleanup."""
        if self._stop is not None:
            self._stop.check()
        time.sleep(_POLL_S)

    def _namespace(self, manifest: dict[str, Any]) -> str:
        return str(manifest.get("metadata", {}).get("namespace") or self.connection.namespace)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod's JSON as the API server gives it, or None when there is no such pod."""
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Pod

        try:
            with api_errors(f"reading pod {namespace}/{name}"):
                found = self.connection.client.get(Pod, name, namespace=namespace)
        except ClusterError as exc:
            if isinstance(exc.__cause__, ApiError) and exc.status == 404:
                return None
            raise
        return dict(found.to_dict())  # type: ignore[no-untyped-call]

    def wait_gone(self, namespace: str, name: str, deadline_s: float) -> None:
        """Until no pod ``namespace/name`` exists (one Terminating holds its name)."""
        deadline = time.monotonic() + deadline_s
        said = False
        while (document := self.get(namespace, name)) is not None:
            if not said:
                terminating = document["metadata"].get("deletionTimestamp")
                self._progress(
                    f"pod {namespace}/{name} "
                    + ("is still Terminating" if terminating else "exists")
                    + ": waiting until it is gone"
                )
                said = True
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"pod {namespace}/{name} was still there after {deadline_s:.0f} s"
                    + (" (Terminating)" if document["metadata"].get("deletionTimestamp") else ""),
                    hint="a finalizer or a long grace period holds it; see kubectl describe pod",
                )
            time.sleep(_POLL_S)

    def check_priority(self, manifest: dict[str, Any]) -> None:
        """Refuse a pod whose preemptionPolicy its PriorityClass contradicts (UsageError,
        naming the class's value); a class that does not exist is left to the API server."""
        from lightkube.resources.scheduling_v1 import PriorityClass

        spec = manifest.get("spec", {})
        name, policy = spec.get("priorityClassName"), spec.get("preemptionPolicy")
        if not name or not policy:
            return
        try:
            with api_errors(f"reading PriorityClass {name}"):
                found = self.connection.client.get(PriorityClass, name)
        except ClusterError as exc:
            if exc.status == 404:
                return
            raise
        theirs = found.preemptionPolicy or "PreemptLowerPriority"
        if theirs != policy:
            raise UsageError(
                f"pod {manifest['metadata']['name']} sets preemptionPolicy {policy}, but its "
                f"PriorityClass {name} (value {found.value}) says {theirs}: the API server's "
                "Priority admission plugin computes the policy from the class and refuses the pod",
                hint=f"drop preemptionPolicy (the class decides it), or name a class whose "
                f"preemptionPolicy is {policy}",
            )

    def submit(self, manifest: dict[str, Any], *, wait_gone_s: float = 120.0) -> PodRef:
        """Create the pod; an old pod of its name that is Terminating is waited for first."""
        from lightkube.resources.core_v1 import Pod

        namespace = self._namespace(manifest)
        name = str(manifest["metadata"]["name"])
        self.check_priority(manifest)
        old = self.get(namespace, name)
        if old is not None:
            if not old["metadata"].get("deletionTimestamp"):
                raise ClusterError(
                    f"pod {namespace}/{name} already exists",
                    hint="delete it first, or name the new one otherwise",
                )
            self.wait_gone(namespace, name, wait_gone_s)
        with api_errors(f"creating pod {namespace}/{name}"):
            created = self.connection.client.create(
                Pod.from_dict(manifest),  # type: ignore[no-untyped-call]
                namespace=namespace,
            )
        meta = created.metadata
        if meta is None or meta.uid is None:
            raise ClusterError(f"the API server created pod {namespace}/{name} but gave no uid")
        self._progress(f"pod {namespace}/{name} created (uid {meta.uid})")
        return PodRef(namespace, name, meta.uid)

    def wait(self, ref: PodRef, deadline_s: float) -> PodState:
        """Until the pod Succeeded or Failed, or ``deadline_s`` passed (``timed_out``)."""
        deadline = time.monotonic() + deadline_s
        said: tuple[str, str | None, str | None] | None = None
        while True:
            document = self.get(ref.namespace, ref.name)
            if document is None or document["metadata"].get("uid") != ref.uid:
                raise ClusterError(f"pod {ref.namespace}/{ref.name} was deleted while waited for")
            state = PodState(ref, document)
            now = (state.phase, state.node, state.reason)
            if now != said:
                where = f" on {state.node}" if state.node else ""
                why = f": {state.reason}" if state.reason else ""
                self._progress(f"pod {ref.namespace}/{ref.name}: {state.phase}{where}{why}")
                said = now
            if state.finished:
                return state
            if time.monotonic() >= deadline:
                return PodState(ref, document, timed_out=True)
            self.pause()

    def logs(self, ref: PodRef, container: str | None = None) -> str:
        """The container's log (its stdout and stderr as the kubelet kept them), bounded."""
        kept: list[str] = []
        size = 0
        with api_errors(f"reading the log of pod {ref.namespace}/{ref.name}"):
            for line in self.connection.client.log(
                ref.name, namespace=ref.namespace, container=container
            ):
                size += len(line)
                if size > LOG_LIMIT:
                    raise ClusterError(
                        f"the log of pod {ref.namespace}/{ref.name} is over {LOG_LIMIT} bytes"
                    )
                kept.append(line)
        return "".join(kept)

    def delete(
        self, ref: PodRef, *, wait_s: float = 120.0, grace_period: int | None = None
    ) -> None:
        """Delete the pod and wait until it is gone."""
        from lightkube.resources.core_v1 import Pod

        document = self.get(ref.namespace, ref.name)
        if document is None or document["metadata"].get("uid") != ref.uid:
            return
        with api_errors(f"deleting pod {ref.namespace}/{ref.name}"):
            self.connection.client.delete(
                Pod, ref.name, namespace=ref.namespace, grace_period=grace_period
            )
        self.wait_gone(ref.namespace, ref.name, wait_s)
        self._progress(f"pod {ref.namespace}/{ref.name} deleted")


class PodRun:
    """One pod as the runner seam's handle (imagekit.runners.seam.Run): waited for with a
    deadline, its container's log, the kubelet's imageID of that container, deleted."""

    def __init__(
        self, pods: PodRunner, ref: PodRef, container: str, *, grace_period: int | None = None
    ) -> None:
        self.pods, self.ref, self.container = pods, ref, container
        self._grace_period = grace_period
        self.state: PodState | None = None

    @property
    def name(self) -> str:
        return f"{self.ref.namespace}/{self.ref.name}"

    def wait(self, deadline_s: float) -> PodState:
        self.state = self.pods.wait(self.ref, deadline_s)
        return self.state

    def logs(self) -> str:
        return self.pods.logs(self.ref, self.container)

    def image_id(self) -> str | None:
        """The container's ``status.imageID`` as last read (None before it ran)."""
        found = self.state.image_ids.get(self.container) if self.state else None
        return found or None

    def cleanup(self) -> None:
        self.pods.delete(self.ref, grace_period=self._grace_period)


class PodPlace:
    """A cluster's namespace as the runner seam's place (imagekit.runners.seam.Runner): a
    run is the pod document a stage renders, submitted through PodRunner (the priority
    checked, an old Terminating pod of its name waited for)."""

    def __init__(self, pods: PodRunner, container: str, *, grace_period: int | None = None) -> None:
        self.pods, self.container = pods, container
        self._grace_period = grace_period

    @property
    def where(self) -> str:
        connection = self.pods.connection
        return f"namespace {connection.namespace} of the cluster at {connection.server}"

    def submit(self, spec: dict[str, Any], run_dir: Path) -> PodRun:
        """Create the pod SPEC describes (``run_dir``: the stage keeps its own evidence)."""
        ref = self.pods.submit(spec)
        return PodRun(self.pods, ref, self.container, grace_period=self._grace_period)
