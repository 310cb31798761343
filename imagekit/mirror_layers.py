"""One image of SRC and one of DST compared layer by layer: every DST blob streamed (its
compressed digest checked as bytes arrive), decompressed by what its bytes are, its tar
hashed to a diffID and held to SRC's config and DST's own; the configs compared field by
field. imagekit.mirror runs it for an image, imagekit.mirror_index for each platform.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from imagekit import jsondoc, progress
from imagekit.errors import CheckFailed, ImagekitError
from imagekit.interrupt import Stop, interrupted, wait_all
from imagekit.kinds.mirror import MirrorVerdict as Verdict
from imagekit.layers.diffid import diff_id_of_stream
from imagekit.layers.media import Compression, layer_media_type
from imagekit.layers.stages import RESTART, Restart
from imagekit.mirror_report import (
    DEFAULT_DOWNLOADS,
    LayerCheck,
    MirrorOptions,
    MirrorReport,
    resolution,
)
from imagekit.refs import Reference
from imagekit.registry import Descriptor, RegistryClient, ResolvedImage
from imagekit.registry.transport import MAX_MANIFEST_BYTES

ZSTD_NOTE = (
    "DST has zstd layers: Docker Engine before 23.0 cannot pull them (20.10 fails with "
    '"archive/tar: invalid tar header"); containerd and Docker 23.0+ can'
)


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


def error_report(
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
    return uncompared(
        resolution(src) if src else None,
        resolution(dst) if dst else None,
        Verdict.MISMATCH if wrong else Verdict.ERROR,
        f"{what}: {exc.message}" if wrong else f"could not finish: {what}: {exc.message}",
        options,
        copy=copy,
        error=exc.to_json(),
    )


def uncompared(
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
        source=resolution(src),
        destination=resolution(dst),
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
