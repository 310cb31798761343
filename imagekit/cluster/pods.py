"""Record which image a Kubernetes pod actually runs, from `kubectl get pod -o json`.

The final word on "which image did the cluster run" is the kubelet's ``status.imageID`` of
each container, not the ``image`` the manifest asked for (a tag can move; a mirror can serve
other bytes). Its form depends on the runtime:

- containerd: ``registry/repo@sha256:<digest pulled by>``;
- cri-dockerd (and the old dockershim): ``docker-pullable://registry/repo@sha256:<digest>``,
  or ``docker://sha256:<image ID>`` for an image that has no repo digest;
- a bare ``sha256:<image ID>`` (config digest) from some runtimes.

A repo digest is compared with the expected manifest digest; a bare image ID with the expected
config digest (or the manifest digest, which the containerd image store uses as image ID). A
form that cannot be compared (empty while the container is still being created, or an image ID
with no config digest to compare it to) is ``unknown``: never a pass.

With ``against_final_pull`` each container is matched instead against the newest containerd
final-pull record (``imagekit pull --runtime containerd``) of the pod's node and image, with
the CRI plugin's naming rules (imagekit.runtime.cri): an index pulled by digest is named by the
index.

Pod documents carry much more than we read (and may carry plain-text env values), so the
models below read only the fields used and ignore the rest; the evidence written is a reduced
copy of the container statuses, never the pod document itself.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from imagekit import jsondoc
from imagekit.errors import RecordRefused, ReferenceFormatError, UsageError
from imagekit.evidence import new_run_dir, write_json
from imagekit.ledger.readback import iter_records
from imagekit.ledger.record import FinalPullDetails, LedgerRecord, PushDetails
from imagekit.ledger.store import append_record
from imagekit.refs import Digest, is_digest, parse_reference
from imagekit.runtime.cri import FinalPullStatus, PulledImage, judge_pod_image_id
from imagekit.workspace import Workspace

VERIFIED, MISMATCH, UNKNOWN = FinalPullStatus
_PREFIXES = ("docker-pullable://", "docker://")


class _Read(BaseModel):
    # Field names follow the Kubernetes API (camelCase) so documents validate as printed.
    # Kubernetes objects have hundreds of fields this module does not read; forbidding them
    # would reject every real pod. Only the fields declared are trusted and used.
    model_config = ConfigDict(extra="ignore", frozen=True)


class ContainerStatus(_Read):
    name: str
    image: str = ""
    imageID: str = ""
    containerID: str | None = None


class PodStatus(_Read):
    phase: str | None = None
    containerStatuses: list[ContainerStatus] = Field(default_factory=list)
    initContainerStatuses: list[ContainerStatus] = Field(default_factory=list)


class PodSpec(_Read):
    nodeName: str | None = None
    hostNetwork: bool = False


class PodMeta(_Read):
    name: str
    namespace: str = "default"
    uid: str | None = None


class Pod(_Read):
    kind: Literal["Pod"]
    metadata: PodMeta
    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus = Field(default_factory=PodStatus)


class PodList(_Read):
    kind: Literal["List", "PodList"]
    items: list[Pod]


@dataclass(frozen=True)
class ParsedImageID:
    """A status.imageID taken apart: ``form`` is repo-digest, image-id or unparsed."""

    form: Literal["repo-digest", "image-id", "unparsed"]
    repository: str | None
    digest: Digest | None


def parse_image_id(raw: str) -> ParsedImageID:
    text = raw
    for prefix in _PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix) :]
            break
    if is_digest(text):
        return ParsedImageID("image-id", None, Digest(text))
    repository, at, digest = text.rpartition("@")
    if at and repository and is_digest(digest):
        return ParsedImageID("repo-digest", repository, Digest(digest))
    return ParsedImageID("unparsed", None, None)


@dataclass(frozen=True)
class ContainerCheck:
    pod: str
    namespace: str
    node: str | None
    container: str
    init: bool
    image: str
    image_id_raw: str
    parsed: ParsedImageID
    status: FinalPullStatus
    reason: str
    record: LedgerRecord | None = None
    final_pull: PulledImage | None = None
    uid: str | None = None  # the pod's

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "namespace": self.namespace,
            "uid": self.uid,
            "node": self.node,
            "container": self.container,
            "init": self.init,
            "image": self.image,
            "image_id": self.image_id_raw,
            "form": self.parsed.form,
            "digest": str(self.parsed.digest) if self.parsed.digest else None,
            "status": self.status,
            "reason": self.reason,
            "record_seq": self.record.seq if self.record else None,
            "final_pull_seq": self.final_pull.seq if self.final_pull else None,
        }


@dataclass(frozen=True)
class PodReport:
    source: str
    expected_manifest_digest: Digest | None
    expected_config_digest: Digest | None
    checks: tuple[ContainerCheck, ...]
    evidence: Path | None

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.status == VERIFIED for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "ok": self.ok,
            "expected_manifest_digest": (
                str(self.expected_manifest_digest) if self.expected_manifest_digest else None
            ),
            "expected_config_digest": (
                str(self.expected_config_digest) if self.expected_config_digest else None
            ),
            "containers": [c.to_json() for c in self.checks],
            "evidence": str(self.evidence) if self.evidence else None,
        }


def _what_json(document: Any) -> str:
    """What a JSON document is, in words a user recognises ("a JSON array")."""
    if isinstance(document, dict):
        kind = document.get("kind")
        return "an object without a kind" if kind is None else f"an object of kind {kind!r}"
    if document is None:
        return "JSON null"
    if isinstance(document, list):
        return "a JSON array"
    if isinstance(document, str):
        return "a JSON string"
    if isinstance(document, bool):
        return "a JSON boolean"
    return "a JSON number"


#: The most a pod file may hold: kubectl's JSON of a list of a few thousand pods is far less;
#: a device such as /dev/zero never ends and must not be read forever.
MAX_POD_FILE = 64 << 20


def _read_input(path: Path) -> bytes:
    """The bytes of a pod file, a pipe (``<(kubectl ...)``) or a FIFO, never waiting on a
    FIFO that has no writer: opened without blocking (a FIFO's open waits for a writer),
    then read to its end. A FIFO nobody has opened for writing reads as empty, at once."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise UsageError(f"{path} is a directory", hint="give the pod's JSON file")
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        size = 0
        while chunk := _read(fd, path):
            size += len(chunk)
            if size > MAX_POD_FILE:
                raise UsageError(
                    f"{path} holds more than {MAX_POD_FILE >> 20} MiB: not a pod's JSON",
                    hint="give the output of `kubectl get pod NAME -o json`",
                )
            chunks.append(chunk)
    finally:
        os.close(fd)
    if size == 0 and stat.S_ISFIFO(mode):
        raise UsageError(
            f"{path} is a FIFO that nobody wrote to",
            hint="write the pod's JSON into it while imagekit reads, or give a file: "
            "`kubectl get pod NAME -o json > pod.json`",
        )
    return b"".join(chunks)


def _read(fd: int, path: Path) -> bytes:
    try:
        return os.read(fd, 1 << 20)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from exc


def load_pods(path: Path) -> tuple[list[Pod], bytes]:
    """Parse a pod or a list of pods as kubectl prints them; also return the exact bytes."""
    data = _read_input(path)
    try:
        document = jsondoc.loads(data, limit=MAX_POD_FILE)
    except jsondoc.JsonRefused as exc:
        raise UsageError(
            f"{path} is not a pod's JSON: {exc}",
            hint="use `kubectl get pod NAME -o json > pod.json`",
        ) from None
    kind = document.get("kind") if isinstance(document, dict) else None
    try:
        if kind == "Pod":
            return [Pod.model_validate(document)], data
        if kind in ("List", "PodList"):
            pods = PodList.model_validate(document).items
            if not pods:
                raise UsageError(f"{path} lists no pods")
            return pods, data
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"{path}: {where}: {first['msg']}") from exc
    raise UsageError(
        f"{path} is {_what_json(document)}, not a Pod or a List of pods",
        hint="use `kubectl get pod NAME -o json` or `kubectl get pods -l ... -o json`",
    )


def expected_from_plan(workspace: Workspace, plan: str) -> tuple[Digest, Digest | None]:
    """The manifest and config digests of the plan's newest push record."""
    with iter_records(workspace.ledger_path) as records:
        pushes = [
            r for r in records if r.plan == plan and r.kind == "push" and r.status == "pushed"
        ]
    if not pushes:
        raise UsageError(
            f"the ledger has no push record for plan {plan!r} to compare against",
            hint="pass --expect sha256:... with the accepted manifest digest",
        )
    details: PushDetails = pushes[-1].info
    manifest, config = details.manifest_digest, details.config_digest
    if manifest is None or not is_digest(manifest):
        raise UsageError(f"the newest push record of {plan!r} has no manifest_digest")
    return Digest(manifest), Digest(config) if config is not None else None


def judge_image_id(
    parsed: ParsedImageID, manifest: Digest, config: Digest | None, raw: str
) -> tuple[FinalPullStatus, str]:
    if parsed.form == "repo-digest":
        if parsed.digest == manifest:
            return VERIFIED, f"imageID names the expected manifest digest {manifest}"
        return MISMATCH, f"imageID names {parsed.digest}, not the expected {manifest}"
    if parsed.form == "image-id":
        if config is not None and parsed.digest == config:
            return VERIFIED, f"image ID is the expected config digest {config}"
        if parsed.digest == manifest:
            return (
                VERIFIED,
                f"image ID is the expected manifest digest {manifest} (containerd store)",
            )
        if config is None:
            return UNKNOWN, (
                f"imageID is a bare image ID {parsed.digest}; no expected config digest to "
                "compare it with (pass --expect-config)"
            )
        return MISMATCH, f"image ID {parsed.digest} is neither {config} nor {manifest}"
    if not raw:
        return UNKNOWN, "imageID is empty: the container has not been created yet"
    return UNKNOWN, "imageID is in a form imagekit cannot compare"


def containerd_pulls(workspace: Workspace) -> list[PulledImage]:
    """Every containerd final-pull record of the ledger, newest first."""
    found = []
    with iter_records(workspace.ledger_path) as records:
        for rec in records:
            if rec.kind == "final-pull":
                pulled = PulledImage.from_details(rec.seq, rec.status, rec.details)
                if pulled is not None:
                    found.append(pulled)
    return found[::-1]


def _repository(text: str | None) -> str | None:
    try:
        return parse_reference(text).name if text and not is_digest(text) else None
    except ReferenceFormatError:
        return None


def judge_against_pull(
    pulls: list[PulledImage], node: str | None, status: ContainerStatus, parsed: ParsedImageID
) -> tuple[FinalPullStatus, str, PulledImage | None]:
    """A container against the newest containerd final pull of its node and image."""
    names = {n for n in (parsed.repository, _repository(status.image)) if n}
    pulled = next((p for p in pulls if p.where == node and p.name in names), None)
    if pulled is None:
        return (
            UNKNOWN,
            f"no containerd final-pull record of {' or '.join(sorted(names)) or 'this image'} "
            f"on node {node or '(unknown)'}: run `imagekit pull REF@DIGEST --runtime "
            "containerd --where NODE --record` on that node first",
            None,
        )
    verdict, reason = judge_pod_image_id(
        parsed.form, parsed.repository, parsed.digest, status.imageID, pulled
    )
    return verdict, reason, pulled


@dataclass(frozen=True)
class PodOptions:
    """What a pod's containers are checked against, and how the result is kept.

    The expected digests come from one of ``expect`` (with ``expect_config`` for a bare
    image ID), ``plan`` (its newest push record) or ``against_final_pull`` (the node's
    containerd final pull); ``where`` labels the cluster (default: the pod's node).
    """

    plan: str | None = None
    expect: str | None = None
    expect_config: str | None = None
    container: str | None = None
    where: str | None = None
    record: bool = True
    against_final_pull: bool = False


def _expected(
    workspace: Workspace, options: PodOptions
) -> tuple[Digest | None, Digest | None, list[PulledImage] | None]:
    """The manifest and config digests the containers must show, or the node's final pulls
    to match them against (``against_final_pull``)."""
    pulls = containerd_pulls(workspace) if options.against_final_pull else None
    expect, expect_config = options.expect, options.expect_config
    if pulls is not None:
        if expect is not None or expect_config is not None:
            raise UsageError(
                "--against-final-pull takes the expected digests from the node's final pull",
                hint="drop --expect/--expect-config (--plan only names the records' plan)",
            )
        return None, None, pulls
    if expect is not None:
        return Digest(expect), Digest(expect_config) if expect_config else None, None
    if options.plan is not None:
        manifest, config = expected_from_plan(workspace, options.plan)
        return manifest, Digest(expect_config) if expect_config is not None else config, None
    raise UsageError(
        "nothing to compare the pod with",
        hint="pass --expect sha256:..., --plan NAME (its newest push record is used) or "
        "--against-final-pull (the node's containerd final pull)",
    )


def record_pod(
    workspace: Workspace, pod_json: Path, options: PodOptions | None = None
) -> PodReport:
    """Check each container's imageID against the expected digests; one record each."""
    options = options or PodOptions()
    manifest, config, pulls = _expected(workspace, options)
    pods, data = load_pods(pod_json)
    input_sha256 = "sha256:" + hashlib.sha256(data).hexdigest()
    pending: list[ContainerCheck] = []
    for pod in pods:
        statuses = [(s, False) for s in pod.status.containerStatuses]
        if options.container is not None:
            statuses += [(s, True) for s in pod.status.initContainerStatuses]
            statuses = [(s, init) for s, init in statuses if s.name == options.container]
        for status, init in statuses:
            parsed = parse_image_id(status.imageID)
            pulled = None
            if pulls is not None:
                node = options.where or pod.spec.nodeName
                verdict, reason, pulled = judge_against_pull(pulls, node, status, parsed)
            else:
                assert manifest is not None  # noqa: S101 - set above unless against a pull
                verdict, reason = judge_image_id(parsed, manifest, config, status.imageID)
            pending.append(
                ContainerCheck(
                    pod=pod.metadata.name,
                    namespace=pod.metadata.namespace,
                    node=pod.spec.nodeName,
                    container=status.name,
                    init=init,
                    image=status.image,
                    image_id_raw=status.imageID,
                    parsed=parsed,
                    status=verdict,
                    reason=reason,
                    final_pull=pulled,
                    uid=pod.metadata.uid,
                )
            )
    if not pending:
        raise UsageError(
            f"{pod_json} has no container statuses"
            + (f" for container {options.container!r}" if options.container else ""),
            hint="record the pod after its containers were created",
        )
    evidence: Path | None = None
    if options.record:
        run_dir = new_run_dir(workspace.evidence_dir, "pods", pending[0].pod)
        evidence = run_dir / "containers.json"
        write_json(
            evidence,
            {
                "input_sha256": input_sha256,
                "expected_manifest_digest": str(manifest) if manifest else None,
                "expected_config_digest": str(config) if config else None,
                "containers": [c.to_json() for c in pending],
            },
        )
        saved: list[ContainerCheck] = []
        for index, check in enumerate(pending):
            shown = check.image_id_raw or check.image
            so_far = (*saved, *pending[index:])  # what a refusal reports: recorded or not
            with RecordRefused.keeping(
                PodReport(str(pod_json), manifest, config, so_far, evidence)
            ):
                rec = append_record(
                    workspace,
                    "final-pull",
                    plan=options.plan,
                    images={"image": shown},
                    status=check.status,
                    scope=(
                        f"kubelet reports container {check.container} of pod "
                        f"{check.namespace}/{check.pod} on {check.node or 'an unknown node'} "
                        f"running {shown or 'nothing yet'}: {check.reason}; this proves which "
                        "image the cluster ran, not what it served"
                    ),
                    evidence=evidence,
                    details=FinalPullDetails(
                        **{
                            **_pod_details(check, manifest, config, options.where, input_sha256),
                            **_pull_details(check.final_pull),
                        }
                    ),
                )
            saved.append(replace(check, record=rec))
        pending = saved
    return PodReport(str(pod_json), manifest, config, tuple(pending), evidence)


def _pod_details(
    check: ContainerCheck,
    manifest: Digest | None,
    config: Digest | None,
    where: str | None,
    input_sha256: str,
) -> dict[str, Any]:
    """What every pod record's details carry (FinalPullDetails, source "pod")."""
    return {
        "source": "pod",
        "pod": check.pod,
        "namespace": check.namespace,
        "pod_uid": check.uid,
        "node": check.node,
        "container": check.container,
        "init": check.init,
        "image": check.image,
        "image_id": str(check.parsed.digest) if check.parsed.digest else None,
        "image_id_raw": check.image_id_raw,
        "image_id_form": check.parsed.form,
        "expected_manifest_digest": str(manifest) if manifest else None,
        "expected_config_digest": str(config) if config else None,
        "where": where or check.node,
        "input_sha256": input_sha256,
    }


def _pull_details(pulled: PulledImage | None) -> dict[str, Any]:
    """What a pod record matched against a containerd final pull adds to its details."""
    if pulled is None:
        return {}
    return {
        "final_pull_seq": pulled.seq,
        "expected_manifest_digest": str(pulled.target_digest),
        "expected_config_digest": str(pulled.config_digest),
        "expected_platform_manifest_digest": str(pulled.platform_manifest_digest),
    }
