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

import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from imagekit import jsondoc, progress
from imagekit.attest.attach import Prepared
from imagekit.attest.carry import carry_attachments
from imagekit.attest.seal import sign_record_attach
from imagekit.attest.signer import KeyFileSigner, Signer
from imagekit.errors import CheckFailed, ImagekitError, ReferenceNotFound, UsageError
from imagekit.evidence import new_run_dir, write_json
from imagekit.interrupt import Stop, interrupted, wait_all
from imagekit.kinds.mirror import MirrorVerdict as Verdict
from imagekit.layers import (
    RESTART,
    Compression,
    LayerLimits,
    MediaTypePolicy,
    Restart,
    diff_id_of_stream,
    layer_media_type,
)
from imagekit.mirror_binding import BINDING_VERDICTS, attach_mirror, prepare_mirror
from imagekit.refs import Digest, Platform, Reference
from imagekit.registry import Descriptor, RegistryClient, ResolvedImage
from imagekit.registry.resolve import IndexImage, index_images, is_attestation, platforms_read
from imagekit.registry.transport import MAX_MANIFEST_BYTES
from imagekit.workspace import Workspace

ZSTD_NOTE = (
    "DST has zstd layers: Docker Engine before 23.0 cannot pull them (20.10 fails with "
    '"archive/tar: invalid tar header"); containerd and Docker 23.0+ can'
)


#: Parallel layer downloads unless told otherwise: one per core would be 64 requests at once
#: on a large machine, which Docker Hub's and others' rate limits and connection caps
#: answer with 429 (the Docker CLI pulls 3 layers at once, containerd 3, skopeo 6).
DEFAULT_DOWNLOADS = 4


@dataclass(frozen=True)
class MirrorOptions:
    platform: Platform | None = None
    copy: bool = False
    allow_config_differences: bool = False
    limits: LayerLimits = field(default_factory=LayerLimits)
    policy: MediaTypePolicy = MediaTypePolicy.DETECT
    # Parallel layer verifications; None means one per core, at most DEFAULT_DOWNLOADS.
    workers: int | None = None
    insecure: tuple[str, ...] = ()
    docker_config: Path | None = None
    record: bool = True
    # The plan the image belongs to, for the ledger record (`imagekit pipeline` sets it).
    plan: str | None = None
    # Sign a positive verdict as an attestation on DST binding it to SRC (imagekit/attest).
    sign_key: Path | None = None


@dataclass(frozen=True)
class LayerCheck:
    index: int
    source_media_type: str | None
    destination_media_type: str
    source_digest: str | None
    destination_digest: str
    destination_size: int
    # SRC's config diff_ids[i] (what the content must be) and DST's own claim
    expected_diff_id: str | None
    destination_config_diff_id: str | None
    actual_diff_id: str | None
    match: bool
    compression: str | None = None
    uncompressed_bytes: int | None = None
    seconds: float | None = None
    notes: tuple[str, ...] = ()
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "source_media_type": self.source_media_type,
            "destination_media_type": self.destination_media_type,
            "source_digest": self.source_digest,
            "destination_digest": self.destination_digest,
            "destination_size": self.destination_size,
            "expected_diff_id": self.expected_diff_id,
            "destination_config_diff_id": self.destination_config_diff_id,
            "actual_diff_id": self.actual_diff_id,
            "match": self.match,
            "compression": self.compression,
            "uncompressed_bytes": self.uncompressed_bytes,
            "seconds": self.seconds,
            "notes": list(self.notes),
            "error": self.error,
        }


@dataclass(frozen=True)
class MirrorReport:
    source: dict[str, Any] | None
    destination: dict[str, Any] | None
    verdict: Verdict
    message: str
    config_digest_equal: bool | None
    compressed_digests_equal: bool | None
    manifest_digest_equal: bool | None
    config_differences: tuple[str, ...]
    layers: tuple[LayerCheck, ...]
    notes: tuple[str, ...]
    allow_config_differences: bool
    copy: dict[str, Any] | None = None
    seconds: float | None = None
    evidence: Path | None = None
    error: dict[str, Any] | None = None
    attestation: dict[str, Any] | None = None  # with --sign-key: stored, or why not
    ledger_seqs: tuple[int, ...] = ()  # the mirror-verify record, when one was appended
    # An index verified platform by platform: each platform's own report (the fields above
    # then say what holds for all of them: the worst verdict, every layer).
    platforms: tuple[MirrorReport, ...] = ()

    @property
    def ok(self) -> bool:
        """The verdict passes (``config-differs`` only when config differences are allowed)."""
        return self.exit_code == 0

    @property
    def exit_code(self) -> int:
        if self.verdict in (Verdict.IDENTICAL, Verdict.CONTENT_IDENTICAL):
            return 0
        if self.verdict is Verdict.CONFIG_DIFFERS and self.allow_config_differences:
            return 0
        if self.verdict is Verdict.ERROR:
            return 3
        return 1

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": str(self.verdict),
            "message": self.message,
            "exit_code": self.exit_code,
            "source": self.source,
            "destination": self.destination,
            "config_digest_equal": self.config_digest_equal,
            "compressed_digests_equal": self.compressed_digests_equal,
            "manifest_digest_equal": self.manifest_digest_equal,
            "config_differences": list(self.config_differences),
            "layers": [layer.to_json() for layer in self.layers],
            "notes": list(self.notes),
            "copy": self.copy,
            "seconds": self.seconds,
            "evidence": str(self.evidence) if self.evidence else None,
            "error": self.error,
            **({"attestation": self.attestation} if self.attestation else {}),
            **({"platforms": [p.to_json() for p in self.platforms]} if self.platforms else {}),
        }


def _resolution(image: ResolvedImage) -> dict[str, Any]:
    return {
        "reference": str(image.reference),
        "index_digest": str(image.index_digest) if image.index_digest else None,
        "platform": str(image.platform) if image.platform else None,
        "manifest_digest": str(image.manifest_digest),
        "manifest_media_type": image.manifest_media_type,
        "config_digest": str(image.config_digest),
        "layer_count": len(image.layers),
        "compressed_layer_bytes": image.compressed_layer_bytes,
    }


def config_differences(source: bytes, destination: bytes, *, depth: int = 3) -> list[str]:
    """Dotted paths of the config fields that differ (added, removed or changed).

    Compared on the parsed JSON of the exact bytes each registry served, down to ``depth``
    levels (``config.Env``, ``history``); a whitespace-only difference reports nothing, and
    the caller says so.
    """
    out: list[str] = []

    def walk(a: Any, b: Any, path: str, level: int) -> None:
        if a == b:
            return
        if isinstance(a, dict) and isinstance(b, dict) and level < depth:
            for key in sorted(set(a) | set(b)):
                sub = f"{path}.{key}" if path else str(key)
                if key not in a:
                    out.append(f"{sub} (only in DST)")
                elif key not in b:
                    out.append(f"{sub} (only in SRC)")
                else:
                    walk(a[key], b[key], sub, level + 1)
            return
        out.append(f"{path or '(document)'} (changed)")

    # Both were read through the bounded reader when each registry's config was parsed.
    walk(
        jsondoc.loads(source, limit=MAX_MANIFEST_BYTES),
        jsondoc.loads(destination, limit=MAX_MANIFEST_BYTES),
        "",
        0,
    )
    return out


def _chunks_with_restarts(
    client: RegistryClient, ref: Reference, desc: Descriptor, stop: Stop
) -> Iterator[bytes | Restart]:
    """The blob's chunks, with RESTART where the client starts the blob over from byte 0;
    stops between chunks once the command is interrupted."""
    restarted = False

    def on_restart() -> None:
        nonlocal restarted
        restarted = True

    for chunk in client.stream_blob(ref, desc, on_restart=on_restart):
        stop.check()
        if restarted:
            restarted = False
            yield RESTART
        yield chunk


def _check_layer(
    client: RegistryClient,
    dst: ResolvedImage,
    src: ResolvedImage,
    index: int,
    options: MirrorOptions,
    work: progress.Work,
    stop: Stop,
) -> LayerCheck:
    desc = dst.layers[index]
    src_desc = src.layers[index] if index < len(src.layers) else None
    expected = str(src.diff_ids[index]) if index < len(src.diff_ids) else None
    claimed = str(dst.diff_ids[index]) if index < len(dst.diff_ids) else None
    base = LayerCheck(
        index=index,
        source_media_type=src_desc.media_type if src_desc else None,
        destination_media_type=desc.media_type,
        source_digest=str(src_desc.digest) if src_desc else None,
        destination_digest=str(desc.digest),
        destination_size=desc.size,
        expected_diff_id=expected,
        destination_config_diff_id=claimed,
        actual_diff_id=None,
        match=False,
    )
    notes: list[str] = []
    known = layer_media_type(desc.media_type)
    if known is not None and not known[1]:
        # Foreign / non-distributable layers: fetched from this registry only, never from
        # their `urls` (OCI image-spec, layer.md, non-distributable layers).
        notes.append(
            "non-distributable (foreign) layer"
            + (f" with {len(desc.urls)} external URL(s), not followed" if desc.urls else "")
        )
    item = work.item(f"layer {index} {desc.digest.short}", desc.size)
    started = time.monotonic()
    try:
        result = diff_id_of_stream(
            _chunks_with_restarts(client, dst.reference, desc, stop),
            media_type=desc.media_type,
            limits=options.limits,
            policy=options.policy,
            on_progress=item.advance,
        )
    except CheckFailed as exc:
        # The registry served the blob and its bytes are wrong (they do not decompress, or
        # do not hash to the digest): the copy's content differs, a mismatch, not an error.
        return replace(
            base,
            seconds=round(time.monotonic() - started, 3),
            notes=(*notes, f"{type(exc).__name__}: {exc.message}"),
        )
    except ImagekitError as exc:
        what = exc.message
        if notes:
            what = f"{notes[0]}: {what}"
        return replace(
            base,
            seconds=round(time.monotonic() - started, 3),
            notes=tuple(notes),
            error=f"{type(exc).__name__}: blob {desc.digest}: {what}",
        )
    finally:
        item.done()
    actual = str(result.diff_id)
    notes.extend(result.notes)
    if claimed is not None and actual != claimed:
        notes.append(f"DST's own config says {claimed}: DST is not self-consistent")
    return replace(
        base,
        actual_diff_id=actual,
        match=actual == expected and actual == claimed,
        compression=str(result.detected),
        uncompressed_bytes=result.uncompressed_bytes,
        seconds=round(time.monotonic() - started, 3),
        notes=tuple(notes),
    )


def _error_report(
    exc: ImagekitError,
    what: str,
    src: ResolvedImage | None,
    dst: ResolvedImage | None,
    options: MirrorOptions,
    copy: dict[str, Any] | None,
) -> MirrorReport:
    # The registry answered with content that is wrong (a manifest and config that disagree,
    # an artifact, a platform missing): the copy is not the image, a mismatch named as such.
    wrong = isinstance(exc, CheckFailed)
    return _uncompared(
        _resolution(src) if src else None,
        _resolution(dst) if dst else None,
        Verdict.MISMATCH if wrong else Verdict.ERROR,
        f"{what}: {exc.message}" if wrong else f"could not finish: {what}: {exc.message}",
        options,
        copy=copy,
        error=exc.to_json(),
    )


def _uncompared(
    source: dict[str, Any] | None,
    destination: dict[str, Any] | None,
    verdict: Verdict,
    message: str,
    options: MirrorOptions,
    **more: Any,
) -> MirrorReport:
    """A report of a verdict reached before any layer was compared."""
    return MirrorReport(
        source=source,
        destination=destination,
        verdict=verdict,
        message=message,
        config_digest_equal=None,
        compressed_digests_equal=None,
        manifest_digest_equal=None,
        config_differences=(),
        layers=(),
        notes=(),
        allow_config_differences=options.allow_config_differences,
        **more,
    )


def verify_images(
    client: RegistryClient,
    src: ResolvedImage,
    dst: ResolvedImage,
    options: MirrorOptions,
) -> MirrorReport:
    """Compare two resolved images layer by layer; every DST layer is streamed and hashed.

    Interrupted, it stops the layers in flight and raises the interrupt carrying the layers
    verified so far (``so_far``); the caller keeps them as partial evidence.
    """
    workers = options.workers or min(DEFAULT_DOWNLOADS, os.cpu_count() or 1)
    count = len(dst.layers)
    # Largest first, so one big layer does not start last and run alone.
    order = sorted(range(count), key=lambda i: -dst.layers[i].size)
    stop = Stop()
    total = sum(layer.size for layer in dst.layers)
    with (
        progress.work(f"verifying {dst.reference}", total=total, items=count) as work,
        ThreadPoolExecutor(max_workers=max(1, min(workers, count or 1))) as pool,
    ):
        futures = {
            i: pool.submit(_check_layer, client, dst, src, i, options, work, stop) for i in order
        }
        try:
            wait_all(futures.values(), stop)
        except KeyboardInterrupt as exc:
            done = [
                futures[i].result()
                for i in range(count)
                if futures[i].done() and not futures[i].cancelled() and not futures[i].exception()
            ]
            raise interrupted(exc).keeping(
                {"layers_total": count, "layers_verified": [c.to_json() for c in done]}, None
            ) from None
        checks = {i: future.result() for i, future in futures.items()}
    layers = tuple(checks[i] for i in range(count))

    notes: list[str] = []
    if any(check.compression == Compression.ZSTD for check in layers) or any(
        (layer_media_type(d.media_type) or (None,))[0] == Compression.ZSTD for d in dst.layers
    ):
        notes.append(ZSTD_NOTE)
    config_equal = src.config_digest == dst.config_digest
    manifest_equal = src.manifest_digest == dst.manifest_digest
    compressed_equal = [str(d.digest) for d in src.layers] == [str(d.digest) for d in dst.layers]
    differences: list[str] = []
    if not config_equal:
        differences = config_differences(src.config_bytes, dst.config_bytes)
        if not differences:
            differences = ["(same JSON, different bytes: key order or whitespace)"]

    errors = [c for c in layers if c.error is not None]
    mismatches = [c for c in layers if c.error is None and not c.match]
    n = len(src.layers)
    if errors:
        verdict = Verdict.ERROR
        message = "could not verify " + "; ".join(f"layer {c.index}: {c.error}" for c in errors[:5])
    elif len(src.layers) != len(dst.layers) or mismatches:
        verdict = Verdict.MISMATCH
        parts = [
            f"layer {c.index} ({c.destination_digest}): {c.notes[-1]}"
            if c.actual_diff_id is None and c.notes
            else f"layer {c.index} ({c.destination_digest}): expected diffID "
            f"{c.expected_diff_id}, actual {c.actual_diff_id}"
            + (
                f" (DST's config says {c.destination_config_diff_id})"
                if c.destination_config_diff_id != c.actual_diff_id
                else ""
            )
            for c in mismatches
        ]
        if len(src.layers) != len(dst.layers):
            k = min(len(src.layers), len(dst.layers))
            exp = str(src.diff_ids[k]) if k < len(src.diff_ids) else None
            act = checks[k].actual_diff_id if k in checks else None
            parts.insert(
                0,
                f"layer counts differ: SRC has {len(src.layers)}, DST has {len(dst.layers)}; "
                f"layer {k}: expected diffID {exp}, actual {act}",
            )
        message = "; ".join(parts)
    elif not config_equal:
        verdict = Verdict.CONFIG_DIFFERS
        message = (
            f"same {n} diffIDs, config differs ({src.config_digest} vs {dst.config_digest}) "
            f"in: {', '.join(differences[:20])}"
            + (f" and {len(differences) - 20} more" if len(differences) > 20 else "")
        )
    elif manifest_equal:
        verdict = Verdict.IDENTICAL
        message = f"same manifest {dst.manifest_digest}, " + (
            "its one layer verified" if n == 1 else f"all {n} layers verified"
        )
    else:
        verdict = Verdict.CONTENT_IDENTICAL
        if compressed_equal:
            message = f"same config, same {n} diffIDs, same compressed blobs, manifest bytes differ"
        else:
            message = f"same config, same {n} diffIDs, compressed blobs differ"
    return MirrorReport(
        source=_resolution(src),
        destination=_resolution(dst),
        verdict=verdict,
        message=message,
        config_digest_equal=config_equal,
        compressed_digests_equal=compressed_equal,
        manifest_digest_equal=manifest_equal,
        config_differences=tuple(differences),
        layers=layers,
        notes=tuple(notes),
        allow_config_differences=options.allow_config_differences,
    )


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
                report = _every_platform(client, (src_ref, src), (dst_ref, dst), report, options)
        except ImagekitError as exc:
            if isinstance(exc, ReferenceNotFound):
                # SRC or DST names nothing: bad input, which side said (exit 2, no record).
                raise replace(exc, message=f"{step}: {exc.message}") from exc
            if isinstance(exc, UsageError):
                raise
            report = _error_report(exc, step, src, dst, options, copy_summary)
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


# The verdict an index gets from its platforms' verdicts: the first of these any one has.
_WORST_FIRST = (
    Verdict.ERROR,
    Verdict.MISMATCH,
    Verdict.CONFIG_DIFFERS,
    Verdict.CONTENT_IDENTICAL,
    Verdict.IDENTICAL,
)


def _selectable(client: RegistryClient, ref: Reference, image: ResolvedImage) -> list[IndexImage]:
    """The entries of IMAGE's index a runtime could select (an entry without a platform read
    from its config), or IMAGE itself where it is one manifest."""
    if image.index_digest is None:
        alone = Descriptor(
            image.manifest_media_type, image.manifest_digest, len(image.manifest_bytes)
        )
        return [IndexImage(alone, image.platform)]
    return index_images(image.index_manifests, platforms_read(client, ref))


def _paired(
    sources: list[IndexImage], destinations: list[IndexImage]
) -> tuple[list[tuple[IndexImage, IndexImage]], list[IndexImage], list[IndexImage]]:
    """SRC's and DST's entries paired by platform (normalised, in each index's order: the
    first amd64 of SRC with the first of DST, the second with the second), and those of
    either side left without a pair."""
    left = [d for d in destinations if d.platform is not None and d.unreadable is None]
    pairs: list[tuple[IndexImage, IndexImage]] = []
    alone: list[IndexImage] = []
    for entry in sources:
        if entry.platform is None or entry.unreadable is not None:
            continue
        platform = entry.platform
        match = next((d for d in left if d.platform and d.platform.same(platform)), None)
        if match is None:
            alone.append(entry)
        else:
            left.remove(match)
            pairs.append((entry, match))
    return pairs, alone, left


def _every_platform(
    client: RegistryClient,
    source: tuple[Reference, ResolvedImage],
    destination: tuple[Reference, ResolvedImage],
    first: MirrorReport,
    options: MirrorOptions,
) -> MirrorReport:
    """SRC or DST is an index and no --platform was given: every entry a runtime could
    select, in either index, is verified.

    A copy of an index holds an image a platform; a verdict on the default platform alone
    would say nothing of the others, and an entry hidden from the comparison (one that lists
    no platform, or carries an annotation) is one a node may still run. SRC's and DST's
    entries are paired by platform and each pair verified layer by layer, as the first was;
    an entry of one side with no pair in the other, or one whose image cannot be told, is
    a mismatch naming it. Attestation manifests (unknown/unknown) are not compared, and
    the report says how many each side has.
    """
    (src_ref, first_src), (dst_ref, first_dst) = source, destination
    sources = _selectable(client, src_ref, first_src)
    destinations = _selectable(client, dst_ref, first_dst)
    pairs, src_alone, dst_alone = _paired(sources, destinations)
    reports: list[MirrorReport] = []
    firsts = (first_src.manifest_digest, first_dst.manifest_digest)
    if firsts not in {(s.digest, d.digest) for s, d in pairs}:
        reports.append(first)
    for src_entry, dst_entry in pairs:
        if (src_entry.digest, dst_entry.digest) == firsts:
            reports.append(first)
            continue
        src = _entry(client, src_ref, first_src, src_entry)
        dst = _entry(client, dst_ref, first_dst, dst_entry)
        reports.append(verify_images(client, src, dst, options))
    for side, ref, image, entries in (
        ("SRC", src_ref, first_src, sources),
        ("DST", dst_ref, first_dst, destinations),
    ):
        alone = src_alone if side == "SRC" else dst_alone
        unreadable = [e for e in entries if e.unreadable is not None]
        reports += [_lone(side, ref, image, entry, options) for entry in [*alone, *unreadable]]
    if len(reports) == 1:
        return first
    verdict = next(v for v in _WORST_FIRST if any(r.verdict is v for r in reports))
    attestations = [
        f"{side}'s index lists {n} attestation manifest(s) (unknown/unknown), not compared"
        for side, image in (("SRC", first_src), ("DST", first_dst))
        if (n := sum(1 for d in image.index_manifests if is_attestation(d)))
    ]
    return replace(
        first,
        verdict=verdict,
        message="; ".join(f"{_platform_of(r)}: {r.message}" for r in reports),
        config_digest_equal=all(r.config_digest_equal for r in reports),
        compressed_digests_equal=all(r.compressed_digests_equal for r in reports),
        manifest_digest_equal=all(r.manifest_digest_equal for r in reports),
        config_differences=tuple(
            f"{_platform_of(r)}: {d}" for r in reports for d in r.config_differences
        ),
        layers=tuple(layer for r in reports for layer in r.layers),
        notes=tuple(dict.fromkeys([*(n for r in reports for n in r.notes), *attestations])),
        platforms=tuple(reports),
    )


def _entry(
    client: RegistryClient, ref: Reference, image: ResolvedImage, entry: IndexImage
) -> ResolvedImage:
    """ENTRY's image: IMAGE itself when it is the one manifest, else resolved in its index."""
    if image.index_digest is None or entry.digest == image.manifest_digest:
        return image
    return client.resolve(ref, entry=entry.digest)


def _lone(
    side: str, ref: Reference, image: ResolvedImage, entry: IndexImage, options: MirrorOptions
) -> MirrorReport:
    """A mismatch for an entry of SIDE's index that has no pair in the other side's, or
    whose image cannot be told: a node could run it, and nothing vouches for it."""
    other = "DST" if side == "SRC" else "SRC"
    if entry.unreadable is not None:
        message = f"{side}'s entry {entry.digest} cannot be compared: {entry.unreadable}"
    else:
        message = f"only in {side}: {entry} (no entry of that platform in {other})"
    resolution = {
        "reference": str(ref),
        "index_digest": str(image.index_digest) if image.index_digest else None,
        "platform": str(entry.platform) if entry.platform else None,
        "manifest_digest": str(entry.digest),
    }
    return _uncompared(
        resolution if side == "SRC" else None,
        resolution if side == "DST" else None,
        Verdict.MISMATCH,
        message,
        options,
    )


def _platform_of(report: MirrorReport) -> str:
    side = report.destination or report.source or {}
    return str(side.get("platform") or side.get("manifest_digest"))


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
            "source": _resolution(src) if src else None,
            "destination": _resolution(dst) if dst else None,
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
            f"({', '.join(_platform_of(r) for r in report.platforms)}), DST blobs streamed and "
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
