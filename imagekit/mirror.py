"""Mirror verification: is DST the same content as SRC, whatever tool made the copy?

A same tag proves nothing, and neither does a same compressed digest list (a copy that was
recompressed has other blobs and may still be the same content). What proves content is the
diffID: the sha256 of each layer's *uncompressed* tar. For every DST layer we stream the
blob (its compressed digest checked as bytes arrive), decompress it by what its bytes are,
hash the tar, and compare with DST's own config ``rootfs.diff_ids[i]`` and with SRC's.

Verdicts, in the order they win (docs/ARCHITECTURE.md lists what each proves):

- ``error``: something could not be checked (a blob missing, retries ran out, a
  non-distributable layer the registry does not hold).
- ``mismatch``: the layer counts differ, or a layer's diffID differs from SRC's or from
  DST's own config; names the layer index and the expected and actual diffIDs. Also what a
  registry answered with but is wrong (a check said no, exit 1): a layer whose bytes do not
  hash to its digest or do not decompress, a manifest and config that disagree.
- ``config-differs``: every diffID equal, config digest differs; names the config fields.
- ``identical``: same manifest digest (and every blob verified).
- ``content-identical``: same config, same N diffIDs, compressed blobs differ.

A fault (dropped connections, throttling, flipped bytes, lying headers) can only ever lead
to ``error`` or ``mismatch``: both positive verdicts need every DST layer hashed end to end
with its compressed digest verified.

An interrupt (SIGINT, SIGTERM) is no verdict at all: the layers verified until then are kept
in ``mirror-report.partial.json``, marked partial, nothing is recorded, and the interrupt
goes on up carrying them (imagekit.interrupt).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from imagekit.attest.attach import Prepared
from imagekit.attest.carry import carry_attachments
from imagekit.attest.seal import sign_record_attach
from imagekit.attest.signer import KeyFileSigner, Signer
from imagekit.errors import ImagekitError, ReferenceNotFound, UsageError
from imagekit.evidence import new_run_dir, write_json
from imagekit.interrupt import interrupted
from imagekit.kinds.mirror import MirrorVerdict as Verdict
from imagekit.mirror_binding import BINDING_VERDICTS, attach_mirror, prepare_mirror
from imagekit.mirror_index import every_platform, platform_of
from imagekit.mirror_layers import ZSTD_NOTE, config_differences, error_report, verify_images
from imagekit.mirror_report import (
    DEFAULT_DOWNLOADS,
    LayerCheck,
    MirrorOptions,
    MirrorReport,
    resolution,
)
from imagekit.refs import Digest, Reference
from imagekit.registry import RegistryClient, ResolvedImage
from imagekit.registry.resolve import index_images
from imagekit.workspace import Workspace

# The options, the report and the layer-by-layer verification are named here too (the
# stage's face): imagekit.mirror_report, imagekit.mirror_layers, imagekit.mirror_index.
__all__ = [
    "DEFAULT_DOWNLOADS",
    "ZSTD_NOTE",
    "LayerCheck",
    "MirrorOptions",
    "MirrorReport",
    "MirrorRequest",
    "config_differences",
    "mirror",
    "run",
    "verify_images",
]


def _parse(text: str, role: str) -> Reference:
    from imagekit.refs import parse_reference

    ref = parse_reference(text, default_tag="latest")
    if ref.tag is None and ref.digest is None:
        raise UsageError(f"{role} {text!r} names no tag or digest")
    return ref


@dataclass(frozen=True)
class MirrorRequest:
    """One mirror verification: SRC, DST (``options.copy``: copy SRC there first) and how."""

    source: str
    destination: str
    options: MirrorOptions = field(default_factory=MirrorOptions)


def mirror(
    source: str,
    destination: str,
    *,
    options: MirrorOptions | None = None,
    workspace: Workspace | None = None,
    client: RegistryClient | None = None,
    log: Callable[[str], None] | None = None,
) -> MirrorReport:
    """`imagekit mirror SRC DST` as a call of its own (the stage's :func:`run`, kept for the
    scripts that name it)."""
    request = MirrorRequest(source, destination, options or MirrorOptions())
    return run(workspace or Workspace.from_env(), request, client=client, log=log)


def run(
    workspace: Workspace,
    request: MirrorRequest,
    *,
    client: RegistryClient | None = None,
    log: Callable[[str], None] | None = None,
) -> MirrorReport:
    """`imagekit mirror`: optionally copy SRC to DST, then verify DST's diffIDs against SRC.

    Bad references raise UsageError (exit 2) before anything is fetched. Everything that
    goes wrong afterwards is a report with verdict ``error`` (exit 3), saved as evidence
    like any other verdict.
    """
    options = request.options
    src_ref, dst_ref = _parse(request.source, "SRC"), _parse(request.destination, "DST")
    if options.copy and dst_ref.digest is not None and dst_ref.tag is None:
        raise UsageError(
            "--copy needs DST by tag (a digest names content that does not exist yet)",
            hint="give DST as registry/repo:tag",
        )
    signer = KeyFileSigner.from_file(options.sign_key) if options.sign_key else None
    started = time.monotonic()
    own_client = client is None
    client = client or RegistryClient(
        insecure=options.insecure, docker_config=options.docker_config
    )
    src: ResolvedImage | None = None
    dst: ResolvedImage | None = None
    copy_summary: dict[str, Any] | None = None
    step = "resolving SRC"
    try:
        try:
            if options.copy:
                from imagekit.registry.upload import copy_image

                src = client.resolve(src_ref, options.platform)
                step = "copying SRC to DST"
                copied = copy_image(client, src_ref, dst_ref, log=log)
                copy_summary = copied.to_json()
                step = "copying SRC's attestations, signatures and referrers"
                # The copy holds the whole index: every platform's image takes its own
                # attestations along (each platform's audit names its manifest).
                subjects = [
                    src.manifest_digest,
                    *([src.index_digest] if src.index_digest else []),
                    *(
                        entry.digest
                        for entry in index_images(src.index_manifests)
                        if entry.digest != src.manifest_digest
                    ),
                ]
                copy_summary["attachments"] = carry_attachments(client, src_ref, dst_ref, subjects)
                step = "resolving DST"
                dst = client.resolve(dst_ref, options.platform)
            else:
                # Two independent chains of round trips (manifest, then config): overlap them.
                with ThreadPoolExecutor(max_workers=2) as pool:
                    dst_future = pool.submit(client.resolve, dst_ref, options.platform)
                    src = client.resolve(src_ref, options.platform)
                    step = "resolving DST"
                    dst = dst_future.result()
            step = "verifying DST's layers"
            report = verify_images(client, src, dst, options)
            if options.platform is None and (src.index_digest or dst.index_digest):
                step = "verifying every platform of DST's index"
                report = every_platform(client, (src_ref, src), (dst_ref, dst), report, options)
        except ImagekitError as exc:
            if isinstance(exc, ReferenceNotFound):
                # SRC or DST names nothing: bad input, which side said (exit 2, no record).
                raise replace(exc, message=f"{step}: {exc.message}") from exc
            if isinstance(exc, UsageError):
                raise
            report = error_report(exc, step, src, dst, options, copy_summary)
    except KeyboardInterrupt as exc:
        stopped = interrupted(exc)
        so_far = stopped.so_far or {}
        summary = f"{_verified(so_far)} while {step}"
        path = _save_partial(workspace, dst_ref, summary, stopped.name, src, dst, so_far)
        raise stopped.keeping({"summary": summary, "step": step, **so_far}, path) from None
    finally:
        if own_client:
            client.close()
    report = _with(report, copy=copy_summary, seconds=round(time.monotonic() - started, 3))
    return _save(report, workspace, src_ref, dst_ref, options, signer)


def _verified(so_far: dict[str, Any]) -> str:
    total = so_far.get("layers_total")
    if total is None:
        return "no layer verified"
    return f"{len(so_far.get('layers_verified', []))} of {total} layers verified"


def _save_partial(
    workspace: Workspace,
    dst_ref: Reference,
    summary: str,
    signal_name: str,
    src: ResolvedImage | None,
    dst: ResolvedImage | None,
    so_far: dict[str, Any],
) -> Path:
    """What an interrupted run proved, kept as evidence marked partial; no verdict."""
    layers = so_far.get("layers_verified", [])
    path = (
        new_run_dir(workspace.evidence_dir, "mirror", dst_ref.name) / "mirror-report.partial.json"
    )
    write_json(
        path,
        {
            "partial": True,
            "interrupted_by": signal_name,
            "verdict": None,
            "message": f"interrupted by {signal_name}: {summary}; no verdict, nothing recorded",
            "source": resolution(src) if src else None,
            "destination": resolution(dst) if dst else None,
            "layers_total": so_far.get("layers_total"),
            "layers": layers,
        },
    )
    return path


def _with(report: MirrorReport, **changes: Any) -> MirrorReport:
    return replace(report, **changes)


def _save(
    report: MirrorReport,
    workspace: Workspace,
    src_ref: Reference,
    dst_ref: Reference,
    options: MirrorOptions,
    signer: Signer | None = None,
) -> MirrorReport:
    """Write the report under evidence/mirror/<DST>/<run>/ and append the ledger record.

    A record the ledger refuses (RecordRefused) carries the report: the verdict and its
    evidence stand, only the record is missing, and the command says both; nothing is
    attached. With SIGNER the binding is signed first, the record names the envelope that
    is to be attached, and only then is it attached; the report says whether DST stored it.
    """
    run_dir = new_run_dir(workspace.evidence_dir, "mirror", f"{dst_ref.name}")
    path = run_dir / "mirror-report.json"
    report = _with(report, evidence=path)
    write_json(path, report.to_json())
    # An index is bound whole: every platform's images, verdict and diffIDs, the first
    # platform's named first, and the index's verdict (the worst of theirs).
    first = report.platforms[0] if report.platforms else report

    def sign(report: MirrorReport) -> tuple[Prepared, ...]:
        if signer is None or not first.source or not first.destination:
            return ()
        return (
            prepare_mirror(
                signer,
                source=first.source,
                destination=first.destination,
                verdict=str(report.verdict),
                message=report.message,
                diff_ids=_diff_ids(first),
                scope=_scope(report, options),
                platform=options.platform,
                insecure=options.insecure,
                platforms=[
                    {
                        "source": p.source,
                        "destination": p.destination,
                        "verdict": str(p.verdict),
                        "diff_ids": _diff_ids(p),
                    }
                    for p in _whole_index(report, options)
                    if p.source and p.destination
                ],
            ),
        )

    def record(report: MirrorReport, prepared: Sequence[Prepared]) -> MirrorReport:
        signed = prepared[0] if prepared else None
        seq = _record(report, workspace, src_ref, dst_ref, options, path, signed)
        return _with(report, ledger_seqs=(seq,))

    return sign_record_attach(
        report,
        sign=sign,
        record=record if options.record else None,
        attach=lambda prepared: (attach_mirror(prepared[0], options.insecure),),
        attached=lambda report, outcomes: _with(report, attestation=outcomes[0].to_json()),
        # a refused push of a binding: exit 3, the verdict kept
        must_store=lambda report: str(report.verdict) in BINDING_VERDICTS,
    )


def _whole_index(report: MirrorReport, options: MirrorOptions) -> tuple[MirrorReport, ...]:
    """The platforms of DST's index that were verified, when that is all of them: each one's
    report (an index of one image platform: that report). Empty when DST is no index or
    ``--platform`` chose one: then the binding names that image alone, never the index."""
    if report.platforms:
        return report.platforms
    if options.platform is None and (report.destination or {}).get("index_digest"):
        return (report,)
    return ()


def _diff_ids(report: MirrorReport) -> list[str]:
    return [layer.actual_diff_id or "" for layer in report.layers]


def _scope(report: MirrorReport, options: MirrorOptions) -> str:
    if report.verdict is Verdict.ERROR:
        # What an error proved: only the layers actually hashed, never "every layer".
        layers = [layer for r in (report.platforms or (report,)) for layer in r.layers]
        hashed = sum(1 for layer in layers if layer.actual_diff_id is not None)
        if not layers:
            return "no DST layer streamed or hashed: it stopped before comparing layers"
        return (
            f"{hashed} of {len(layers)} DST layers streamed and hashed before it stopped; "
            "no verdict on the content"
        )
    if report.platforms:
        index = (report.destination or {}).get("index_digest")
        return (
            f"diffIDs of every layer of each platform of the index {index} "
            f"({', '.join(platform_of(r) for r in report.platforms)}), DST blobs streamed and "
            "hashed; SRC judged by its config"
        )
    platform = (report.destination or report.source or {}).get("platform") or (
        str(options.platform) if options.platform else "default platform"
    )
    return (
        f"diffIDs of every layer of {platform}, DST blobs streamed and hashed; "
        "SRC judged by its config"
    )


def _record(
    report: MirrorReport,
    workspace: Workspace,
    src_ref: Reference,
    dst_ref: Reference,
    options: MirrorOptions,
    path: Path,
    prepared: Prepared | None = None,
) -> int:
    from imagekit.ledger import MirrorDetails, append_record

    images = {
        "source": _pinned(report.source, src_ref, index=bool(report.platforms)),
        "destination": _pinned(report.destination, dst_ref, index=bool(report.platforms)),
    }
    return append_record(
        workspace,
        "mirror-verify",
        plan=options.plan,
        images=images,
        status=str(report.verdict),
        scope=_scope(report, options),
        evidence=path,
        details=MirrorDetails(
            message=report.message,
            config_digest_equal=report.config_digest_equal,
            compressed_digests_equal=report.compressed_digests_equal,
            layers=len(report.layers),
            copied=report.copy is not None,
            **({"attestation": prepared.ledger_value} if prepared is not None else {}),
        ),
    ).seq


def _pinned(resolution: dict[str, Any] | None, ref: Reference, *, index: bool = False) -> str:
    """The image the record names, by digest: the index's when every platform was verified."""
    if resolution is None:
        return str(ref)
    key = "index_digest" if index and resolution.get("index_digest") else "manifest_digest"
    return str(ref.pinned_only(Digest(resolution[key])))
