"""`imagekit gpu-preflight`: the image on the GPU node that will serve it, one verdict.

Three ways to run the same probe (imagekit/gpu/probe.py) under torch's own launcher:

- in the image (``REF``): the engine runs it with the node's GPUs (``--gpus all``, or a CDI
  device), no network, the shared memory NCCL needs; REF is resolved to a digest and pulled
  as the audit does, and the verdict is bound to the image ID the engine ran;
- from a Kubernetes Job (``REF --report LOG --pod POD_JSON``): ``--emit-job`` prints the Job,
  the Job's log carries the report, and the pod's status says which image the kubelet ran;
  a pod that ran another image than REF is refused (exit 1) and nothing is recorded;
- on this host (``--host``): the current Python environment's torch, reported as such, with
  no image claimed (what a bare GPU host, or our lent GPU machine, offers).

Every run writes its evidence (the probe's raw report, the launcher's output, the verdict),
appends one ``gpu-preflight`` record, and with ``--sign-key`` signs the verdict onto the image
in its registry (never for ``--host``: there is no image). GPU_PREFLIGHT_PASS is exit 0;
GPU_PREFLIGHT_FAIL and GPU_PREFLIGHT_INCOMPLETE are exit 1, because both are verdicts about
the node (a collective that hangs is a finding, not imagekit failing to finish).
"""

from __future__ import annotations

import re
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imagekit import evidence
from imagekit.attest.attach import AttestOutcome, Prepared, prepare_reference
from imagekit.attest.seal import sign_record_attach
from imagekit.attest.signer import Signer, signer_of
from imagekit.errors import CheckFailed, UsageError
from imagekit.gpu.launch import ProbeOptions, ProbeOutcome, run_in_image, run_on_host
from imagekit.gpu.report import (
    REPORT_CAP,
    CheckVerdict,
    ProbeReport,
    Verdict,
    decide,
    predicate_of,
)
from imagekit.kinds.gpu_preflight import (
    GPU_PREFLIGHT_V1,
    GpuPreflightPredicate,
    GpuPreflightStatus,
    Where,
    details_of,
)
from imagekit.ledger.store import append_record
from imagekit.refs import Digest, parse_reference
from imagekit.version import __version__
from imagekit.workspace import Workspace

HOST_SCOPE = (
    "the current Python environment on this host, no image claimed: a hardware and "
    "communication check of its GPUs; no weights loaded, no serving engine started, not a "
    "performance benchmark"
)
IMAGE_SCOPE = (
    "the image's own torch on this node's GPUs, run by the engine with no network: a hardware "
    "and communication check; no weights loaded, no serving engine started, not a performance "
    "benchmark"
)
POD_SCOPE = (
    "the image's own torch on the GPUs of the pod that ran it (a Kubernetes Job), the pod's "
    "imageID checked against the image: a hardware and communication check; no weights "
    "loaded, no serving engine started, not a performance benchmark"
)


@dataclass(frozen=True)
class PreflightRequest:
    """One preflight: where it runs, what it expects, whether it records and signs."""

    options: ProbeOptions = field(default_factory=ProbeOptions)
    reference: str | None = None
    host: bool = False
    python: str | None = None  # --host: the interpreter with torch (this one by default)
    report_file: Path | None = None  # a Job's log or report, with pod_file
    pod_file: Path | None = None
    log_read_from: str | None = None  # namespace/name: the pod imagekit read the log from
    #: every pod of a Job of several pods, each bound to its ranks (imagekit.gpu.multinode)
    pods: tuple[dict[str, Any], ...] = ()
    plan: str | None = None
    platform: str | None = None
    gpus: str | None = "all"
    cdi_devices: tuple[str, ...] = ()
    shm_size: str = "16g"
    env: tuple[tuple[str, str], ...] = ()
    sign_key: Path | None = None
    record: bool = True


@dataclass(frozen=True)
class PreflightResult:
    verdict: Verdict
    where: Where
    scope: str
    reference: str | None
    image_id: str | None
    pod: str | None
    report: ProbeReport | None
    predicate: GpuPreflightPredicate
    evidence_dir: Path
    result_path: Path
    report_path: Path | None
    why_none: str | None = None
    command: tuple[str, ...] = ()
    seconds: float | None = None
    ledger_seqs: tuple[int, ...] = ()
    attestation: AttestOutcome | None = None
    pod_uid: str | None = None  # the pod's uid, recorded (not signed: the predicate is v1)

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    @property
    def exit_code(self) -> int:
        """0 for GPU_PREFLIGHT_PASS; 1 for FAIL and INCOMPLETE (both verdicts, recorded)."""
        return 0 if self.ok else CheckFailed.exit_code

    @property
    def evidence(self) -> Path:
        return self.result_path

    @property
    def status(self) -> GpuPreflightStatus:
        return self.verdict.status

    def to_json(self) -> dict[str, Any]:
        return {
            "status": str(self.verdict.status),
            "sentence": self.verdict.sentence,
            "ok": self.ok,
            "scope": self.scope,
            "where": self.where,
            "self_test": self.verdict.self_test,
            "reference": self.reference,
            "image_id": self.image_id,
            "pod": self.pod,
            "pod_uid": self.pod_uid,
            "failing": list(self.verdict.failing),
            "why_not_decided": self.why_none,
            "preflight": self.predicate.model_dump(mode="json"),
            "command": list(self.command),
            "seconds": self.seconds,
            "evidence": str(self.evidence_dir),
            "report": str(self.report_path) if self.report_path else None,
            "ledger_seqs": list(self.ledger_seqs),
            **({"attestation": self.attestation.to_json()} if self.attestation else {}),
        }


def run(
    workspace: Workspace, request: PreflightRequest, *, client: str | None = None
) -> PreflightResult:
    """Run (or take back from a Job) the GPU preflight, decide its verdict from the report's
    numbers, write its evidence, record it, and sign it onto the image when asked.

    Bad input (options, a report that is not the probe's, a log with two reports) is refused
    before any evidence is written; a report bound to no pod that ran the image, or claiming
    GPUs this host does not show, is refused (exit 1) with nothing recorded. The order at the
    end is the one that makes a signed verdict without its record impossible: the statement
    is signed here, the record (naming its envelope) written, and only then the envelope
    attached to the image in its registry."""
    signer = _signer(request)
    where = _where(request)
    asked = request.options.asked()
    reference = request.reference
    image_id: str | None = None
    pod: str | None = None
    pod_uid: str | None = None
    node: str | None = None
    outcome: ProbeOutcome | None = None
    extra: tuple[CheckVerdict, ...] = ()
    report: ProbeReport | None
    if where == "pod":
        taken = _from_pod(request)  # read, parsed and bound before any evidence
        report, pod, pod_uid, node, image_id, reference = (
            taken.report, taken.pod, taken.pod_uid, taken.node, taken.image_id, taken.reference
        )  # fmt: skip
        run_dir = _run_dir(workspace, request)
        evidence.write_bytes(run_dir / "gpu-preflight-report.json", taken.raw)
    else:
        run_dir = _run_dir(workspace, request)
        if where == "host":
            outcome = run_on_host(request.options, run_dir, request.python)
            report = outcome.report
            extra = _on_this_host(report)
        else:
            report, outcome, image_id, reference = _in_image(request, run_dir, client)
    why_none = outcome.why_none if outcome is not None else None
    verdict = decide(report, asked, why_none=why_none or "no report", extra=extra)
    if where == "host":
        verdict = _with_fix_for_torch(verdict, request)
    scope = {"host": HOST_SCOPE, "image": IMAGE_SCOPE, "pod": POD_SCOPE}[where]
    if verdict.self_test and report is not None:
        scope = report.scope  # the probe's own: "CPU self-test, not a GPU preflight: ..."
    predicate = _predicate(request, report, verdict, scope, where, image_id, pod, node)
    result = PreflightResult(
        verdict=verdict,
        where=where,
        scope=scope,
        reference=reference,
        image_id=image_id,
        pod=pod,
        report=report,
        predicate=predicate,
        evidence_dir=run_dir,
        result_path=run_dir / "gpu-preflight.json",
        report_path=outcome.report_path if outcome and report else (
            run_dir / "gpu-preflight-report.json" if report else None
        ),
        why_none=why_none,
        command=outcome.run.command if outcome is not None else (),
        seconds=outcome.run.seconds if outcome is not None else None,
        pod_uid=pod_uid,
    )  # fmt: skip
    evidence.write_json(result.result_path, result.to_json())

    def sign(result: PreflightResult) -> tuple[Prepared, ...]:
        if signer is None or result.reference is None:
            return ()
        return (
            prepare_reference(
                signer,
                parse_reference(result.reference),
                GPU_PREFLIGHT_V1,
                result.predicate.model_dump(mode="json"),
                platform=None,
            ),
        )

    def record(result: PreflightResult, prepared: Sequence[Prepared]) -> PreflightResult:
        seq = _record(workspace, request, result, prepared[0] if prepared else None)
        return replace(result, ledger_seqs=(seq,))

    def attached(result: PreflightResult, outcomes: tuple[AttestOutcome, ...]) -> PreflightResult:
        [outcome] = outcomes
        evidence.write_json(run_dir / "gpu-preflight-attestation.json", outcome.to_json())
        return replace(result, attestation=outcome)

    return sign_record_attach(
        result, sign=sign, record=record if request.record else None, attached=attached
    )


#: the stage under the name it had before every stage was run as ``run(workspace, request)``
gpu_preflight = run


def _run_dir(workspace: Workspace, request: PreflightRequest) -> Path:
    return evidence.new_run_dir(
        workspace.evidence_dir, request.plan or _name(request), "gpu-preflight"
    )


def _on_this_host(report: ProbeReport | None) -> tuple[CheckVerdict, ...]:
    """The report of an interpreter on this host, held to the GPUs nvidia-smi shows here."""
    from imagekit.gpu.bind import check_on_host, host_gpus

    if report is None:
        return ()
    shown, why_none = host_gpus()
    return (CheckVerdict.of("host_gpus", check_on_host(report, shown, why_none)),)


def _with_fix_for_torch(verdict: Verdict, request: PreflightRequest) -> Verdict:
    """A --host run whose Python has no torch (the launcher cannot start, or the probe
    cannot import it): the line names the fix."""
    said = verdict.sentence
    torch_missing = any(c.name == "torch" and c.state == "INCOMPLETE" for c in verdict.checks)
    if not torch_missing and not _NO_TORCH.search(said):
        return verdict
    python = request.python or f"{sys.executable} (imagekit's own)"
    fix = (
        f"torch is not importable in {python}: give --python PATH, an interpreter that has "
        "torch, or run the preflight in the image (imagekit gpu-preflight REF)"
    )
    return replace(verdict, sentence=f"{fix}; {said}")


_NO_TORCH = re.compile(r"No module named '?torch(\.distributed)?'?")


def deferred_cli(profile: str) -> tuple[dict[str, Any], ...]:
    """The serving CLI checks of PROFILE that a CPU audit defers (those with a known
    environmental failure, the vLLM ``--help=all`` that needs a GPU): re-run on the GPU
    node without their CPU-platform fallback, so that CPU_PASS_GPU_CLI_DEFERRED can be
    closed by a GPU-side result."""
    from imagekit.audit.profiles import load_profile

    return tuple(
        {
            "name": probe.name,
            "argv": list(probe.command),
            "env": dict(probe.env),
            "required_flags": list(probe.flags),
            "timeout_s": probe.timeout_s or 300,
        }
        for probe in load_profile(profile).cli
        if probe.environmental_failure is not None
    )


def _signer(request: PreflightRequest) -> Signer | None:
    return signer_of(
        request.sign_key,
        nothing_to_attest="--sign-key attests an image in a registry; a --host preflight "
        "claims no image"
        if request.host
        else None,
        hint="drop --sign-key, or run the preflight in the image (imagekit gpu-preflight REF)",
    )


def _where(request: PreflightRequest) -> Where:
    if request.host:
        if request.reference or request.report_file or request.pod_file:
            raise UsageError(
                "--host runs this host's Python: it takes no image, --report or --pod",
                hint="imagekit gpu-preflight --host, or imagekit gpu-preflight REF",
            )
        return "host"
    if request.reference is None:
        raise UsageError(
            "name the image to preflight, or --host for this host's Python",
            hint="imagekit gpu-preflight REGISTRY/REPO@sha256:DIGEST",
        )
    if (request.report_file is None) != (request.pod_file is None):
        raise UsageError(
            "--report and --pod go together: the Job's report and the pod that ran it",
            hint="kubectl logs job/NAME > job.log; kubectl get pods -l job-name=NAME -o json "
            "> pod.json",
        )
    return "pod" if request.report_file is not None else "image"


def _name(request: PreflightRequest) -> str:
    if request.reference is None:
        return "host"
    return parse_reference(request.reference).name


def _in_image(
    request: PreflightRequest, run_dir: Path, client: str | None
) -> tuple[ProbeReport | None, ProbeOutcome, str, str]:
    from imagekit.runtime.engine import connect
    from imagekit.runtime.images import resolve_image

    assert request.reference is not None  # noqa: S101 - _where's contract
    engine = connect()
    image = resolve_image(engine, request.reference, request.platform)
    outcome = run_in_image(
        client or engine.client_path,
        image.image_id,
        request.options,
        run_dir,
        gpus=request.gpus,
        cdi_devices=request.cdi_devices,
        shm_size=request.shm_size,
        env=dict(request.env),
    )
    pinned = request.reference
    if image.reference is not None and image.manifest_digest is not None:
        pinned = str(image.reference.pinned_only(image.manifest_digest))
    return outcome.report, outcome, image.image_id, pinned


@dataclass(frozen=True)
class _Taken:
    report: ProbeReport
    raw: bytes
    pod: str
    pod_uid: str | None
    node: str | None
    image_id: str
    reference: str


def _from_pod(request: PreflightRequest) -> _Taken:
    """The Job's report and the pod that made it, checked against REF before anything is
    written: one report in the log (exit 2 otherwise), read and parsed strictly; then the
    pod (imagekit.gpu.bind): finished, the Job's container running REF's image, the report
    written in it; another pod or image is exit 1 with nothing recorded."""
    from imagekit.files import read_bounded
    from imagekit.gpu.bind import bind_to_pod, report_from_log
    from imagekit.registry.client import RegistryClient

    assert request.reference and request.report_file and request.pod_file  # noqa: S101
    ref = parse_reference(request.reference)
    if ref.digest is None:
        raise UsageError(
            f"{request.reference}: a Job's report is bound to an image by digest",
            hint="name the image as REGISTRY/REPO@sha256:DIGEST, as --emit-job printed it",
        )
    data = read_bounded(request.report_file, "--report", limit=REPORT_CAP)
    report, raw = report_from_log(data, str(request.report_file))
    del data
    with RegistryClient() as registry:
        resolved = registry.resolve(ref, None)
    manifest = Digest(str(ref.digest))
    config = Digest(str(resolved.config_digest))
    bound = bind_to_pod(
        report, request.pod_file, manifest, config, str(ref), log_read_from=request.log_read_from
    )
    return _Taken(report, raw, bound.pod, bound.uid, bound.node, bound.image_id, str(ref))


def _predicate(
    request: PreflightRequest,
    report: ProbeReport | None,
    verdict: Verdict,
    scope: str,
    where: Where,
    image_id: str | None,
    pod: str | None,
    node: str | None,
) -> GpuPreflightPredicate:
    expected = request.options.expected()
    if report is not None:
        return predicate_of(
            report, verdict, scope=scope, where=where, image_id=image_id, pod=pod,
            expected=expected, node=node,
        )  # fmt: skip
    return GpuPreflightPredicate(
        status=verdict.status,
        scope=f"{scope}; not decided: {verdict.sentence}",
        where=where,
        node=socket.gethostname(),
        image_id=image_id,
        pod=pod,
        world_size=0,
        gpus=[],
        expected=expected,
        checks=[],
        failing=[],
        all_reduce=[],
        versions={},
        preflight_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        imagekit_version=__version__,
    )


def _record(
    workspace: Workspace,
    request: PreflightRequest,
    result: PreflightResult,
    prepared: Prepared | None,
) -> int:
    details = details_of(result.predicate)
    if result.pod_uid is not None:
        details = details.model_copy(update={"pod_uid": result.pod_uid})
    if request.pods:
        details = details.model_copy(update={"pods": [dict(p) for p in request.pods]})
    if prepared is not None:  # the envelope signed for this record, attached after it
        details = details.model_copy(update={"attestation": prepared.ledger_value})
    images = {"image": result.reference} if result.reference else {}
    return append_record(
        workspace,
        "gpu-preflight",
        plan=request.plan,
        images=images,
        status=result.verdict.status,
        scope=f"{result.scope}; {result.verdict.sentence}",
        evidence=result.result_path,
        details=details,
    ).seq
