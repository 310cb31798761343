"""Assemble a plan's image through the registry API: no engine build, no base pull.

The flow, each step in its own module:

1. resolve the pinned base (an index is narrowed to the plan's platform);
2. guard every overlay against the base from its layers' indexes, reading only the layers
   that decide (imagekit.builders.assemble.guard; a drifted file is exit 1 and a ``rejected-build``
   record, exactly as on the engine path);
3. write the overlay layer (imagekit.builders.assemble.layer) and the config and manifest
   (imagekit.builders.assemble.config);
4. push: the base's blobs are mounted from the base's repository when the target is on the
   same registry, else streamed registry to registry; then our blobs; then the manifest by
   digest, with no tag (imagekit.registry.upload);
5. run the plan's assertions in the pushed image through the engine, natively or emulated
   (imagekit.builders.assemble.check); only when they pass is the tag put (and, with ``index``, an
   index holding the manifest), so a failed or interrupted build never leaves a tag;
6. record ``build`` and ``push`` in the ledger, as the engine path does
   (imagekit.builders.assemble.records).

Nothing of the base is written to local disk (layers are streamed through the guard's
indexer and from registry to registry) and memory stays bounded by a few chunks, whatever
the base's size. The overlay layer itself is kept in memory up to 32 MiB and in a temporary
file beyond.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import IO, TextIO

from imagekit.builders.assemble.check import (
    AssertionRun,
    assertions_failed,
    not_run,
    rejection,
    run_assertions,
)
from imagekit.builders.assemble.config import (
    BASE_DIGEST,
    BASE_NAME,
    ConfigChanges,
    dump,
    edit_config,
    image_index,
    image_manifest,
    layer_media_type,
    load_document,
)
from imagekit.builders.assemble.guard import OverlayCheck, guard_overlays
from imagekit.builders.assemble.layer import LayerBlob, TarEntry, check_tree, write_layer
from imagekit.builders.assemble.records import record_result
from imagekit.builders.assemble.result import AssembleOptions, AssembleResult
from imagekit.builders.assemble.run import Log, Made, Run, make_guard_report
from imagekit.builders.push import check_push_repo
from imagekit.builders.record import assertion_details
from imagekit.errors import (
    BuildFailed,
    CouldNotFinish,
    ImageContentError,
    LayerFormatError,
    PlanError,
    RegistryError,
    UsageError,
)
from imagekit.evidence import new_run_dir, write_bytes, write_json
from imagekit.image.index import IndexStore
from imagekit.image.view import LayerUse
from imagekit.layers.inflate import sniff_compression
from imagekit.layers.media import layer_media_type as known_layer_type
from imagekit.ledger import RejectedBuildDetails
from imagekit.ledger.record import GuardReport
from imagekit.plans.load import load_named_plan
from imagekit.plans.model import LoadedPlan, Plan
from imagekit.plans.render import base_name
from imagekit.plans.steps import Overlay
from imagekit.progress import human_bytes, plural
from imagekit.provenance import signer_for
from imagekit.refs import Digest, Reference
from imagekit.registry import Descriptor, RegistryClient, ResolvedImage
from imagekit.registry.blob_upload import BlobSource
from imagekit.registry.upload import CopyResult, push_manifest
from imagekit.runtime.engine import Engine, connect
from imagekit.workspace import Workspace

MiB = 1 << 20
_SPOOL = 32 * MiB


def engine_steps(plan: Plan) -> list[str]:
    """The steps only an engine can run (they execute programs inside the image)."""
    return [f"steps[{i}] ({step.kind})" for i, step in enumerate(plan.steps) if step.runs_in_image]


def _epoch(plan: Plan) -> tuple[int, str]:
    """SOURCE_DATE_EPOCH when set (https://reproducible-builds.org/specs/source-date-epoch/),
    else the plan's epoch, else 0."""
    text = os.environ.get("SOURCE_DATE_EPOCH")
    if text:
        if not text.isdigit() or int(text) >= 8**11:
            raise UsageError(
                f"SOURCE_DATE_EPOCH={text!r} is not a whole number of seconds since 1970",
                hint="unset it or give e.g. SOURCE_DATE_EPOCH=1700000000",
            )
        return int(text), "SOURCE_DATE_EPOCH"
    if plan.epoch is not None:
        return plan.epoch, "plan"
    return 0, "default (0)"


def _entries(loaded: LoadedPlan, checks: Sequence[OverlayCheck], epoch: int) -> list[TarEntry]:
    """The layer's members: each overlay file where its guard says it lands, and the folders
    above it (the base's own metadata where the base has them, new ones 0755)."""
    entries: list[TarEntry] = []
    overlays = loaded.plan.steps
    for check in checks:
        step = overlays[check.step]
        assert isinstance(step, Overlay)  # noqa: S101 - checks come from overlays
        source = (loaded.overlay_dir / step.source).resolve()
        mode = step.file_mode
        if mode is None:
            mode = 0o755 if source.stat().st_mode & 0o111 else 0o644
        uid, gid = step.uid_gid
        resolution = check.resolution
        for parent in resolution.parents:
            if parent.entry is not None:
                e = parent.entry
                entries.append(TarEntry(parent.path, "dir", e.mode, e.uid, e.gid, e.mtime))
        entries.extend(TarEntry(f, "dir", 0o755, uid, gid, epoch) for f in resolution.missing)
        entries.append(TarEntry(resolution.path, "file", mode, uid, gid, epoch, source))
    try:
        check_tree(entries)
    except ValueError as exc:
        raise PlanError(
            f"the overlays do not form one tree on this base: {exc}",
            path=str(loaded.path),
            hint="the base's symbolic links may send two overlays to one file; check "
            "`written` in the guard report",
        ) from exc
    return entries


def _chunks_of(handle: IO[bytes]) -> Iterator[bytes]:
    handle.seek(0)
    while chunk := handle.read(MiB):
        yield chunk


def assemble_plan(
    workspace: Workspace,
    name: str,
    options: AssembleOptions | None = None,
    *,
    client: RegistryClient | None = None,
    engine: Engine | None = None,
    echo: TextIO | None = None,
) -> AssembleResult:
    """Build one plan through the registry API and return the pushed image.

    Raises BuildFailed (exit 1) for a drifted overlay, a destination the base cannot hold or
    a failed assertion; CouldNotFinish (exit 3) when the assertions cannot run here (pass
    ``assertions=False`` to accept the image unchecked, said so in the record); UsageError
    (exit 2) for a plan with steps only an engine can run, or no push target.
    """
    options = options or AssembleOptions()
    started = time.monotonic()
    loaded = load_named_plan(workspace, name, base_override=options.base_override)
    blockers = engine_steps(loaded.plan)
    if blockers:
        raise UsageError(
            f"plan {loaded.name} cannot be built through the registry: "
            + ", ".join(blockers)
            + " must run inside the image, which needs the engine",
            hint="build it with --builder engine (or --builder auto)",
        )
    if options.push is None:
        raise UsageError(
            "the registry builder needs --push REPO: the image it assembles exists only in a "
            "registry",
            hint="e.g. --push 127.0.0.1:5000/team/image (the base's registry mounts its blobs)",
        )
    target = check_push_repo(options.push)
    signer = signer_for(options.sign_key, options.push)  # refused before anything is pushed
    epoch, epoch_source = _epoch(loaded.plan)
    run_dir = new_run_dir(workspace.evidence_dir, loaded.name)
    tag = (options.tag or run_dir.name).rpartition(":")[2]
    log = Log(run_dir / "build.log", echo or sys.stderr)
    own_client = client is None
    client = client or RegistryClient()
    try:
        return _assemble(
            Run(
                workspace, loaded, options, target, tag, epoch, epoch_source, run_dir, log,
                client, engine, started, signer,
            )
        )  # fmt: skip
    finally:
        log.close()
        if own_client:
            client.close()


def _assemble(run: Run) -> AssembleResult:
    """The flow of the module docstring, one step a function; the tag comes last."""
    image = _resolve_base(run)
    checks, uses = _guard(run, image)
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL, prefix="imagekit-layer-") as blob:
        made = _write_image(run, image, checks, blob)
        pushed = _push_untagged(run, image, made, blob)
    pinned = run.target.pinned_only(made.manifest_digest)
    run.log(f"pushed {pinned} (no tag yet)")
    assertions = _check_assertions(run, pinned, made, make_guard_report(checks, uses))
    index_digest = _put_tag(run, image, made, pushed)
    return record_result(
        run, image,
        AssembleResult(
            plan=run.loaded.name,
            plan_sha256=run.loaded.digest.hex,
            base=str(run.loaded.base),
            platform=str(run.loaded.platform),
            pushed=str(pinned),
            tag=run.tagged,
            manifest_digest=str(made.manifest_digest),
            manifest_media_type=made.media_type,
            config_digest=str(made.config_desc.digest),
            index_digest=str(index_digest) if index_digest else None,
            layer=made.layer,
            guard=tuple(checks),
            layers=uses,
            push=pushed,
            assertions=assertions,
            epoch=run.epoch,
            epoch_source=run.epoch_source,
            evidence_dir=run.run_dir,
            log=run.log_path,
            seconds=round(time.monotonic() - run.started, 3),
        ),
    )  # fmt: skip


def _resolve_base(run: Run) -> ResolvedImage:
    """1. The pinned base, an index narrowed to the plan's platform."""
    loaded = run.loaded
    run.log(
        f"assembling plan {loaded.name} (plan sha256:{loaded.digest.hex}) on {loaded.base} "
        f"({loaded.platform}) through the registry, into {run.tagged}"
    )
    image = run.client.resolve(loaded.base, loaded.platform)
    run.log(
        f"base: manifest {image.manifest_digest} ({image.manifest_media_type}), "
        f"{plural(len(image.layers), 'layer')}, {image.compressed_layer_bytes} bytes compressed "
        f"({human_bytes(image.compressed_layer_bytes)})"
    )
    _check_base_descriptors(run, image)
    return image


def _check_base_descriptors(run: Run, image: ResolvedImage) -> None:
    """Each base layer's descriptor against what the registry serves, on every build.

    The new manifest copies these descriptors, and the guard's index cache (keyed by the
    digest) answers what a layer holds, never whether a manifest describing it is honest: a
    size or a compression that is not the blob's would pass into the new image, which
    containerd then refuses to pull. One ranged GET of a few bytes a layer says both.
    """
    for i, desc in enumerate(image.layers):
        if desc.urls and not run.client.blob_exists(image.reference, desc.digest):
            continue  # a foreign layer not in this registry: the guard says what it can
        served = run.client.probe_blob(image.reference, desc.digest)
        declared = known_layer_type(desc.media_type)
        problem = None
        if served.size != desc.size:
            problem = f"says {desc.size} bytes, the registry serves {served.size}"
        elif declared is not None:
            try:
                actual = sniff_compression(served.head)
            except LayerFormatError as exc:
                problem = f"is {desc.media_type}, but {exc.message}"
            else:
                if actual != declared[0]:
                    problem = (
                        f"says {declared[0]} ({desc.media_type}), the registry serves "
                        f"{actual} bytes"
                    )
        if problem is not None:
            raise ImageContentError(
                f"{image.reference}: the descriptor of layer {i} ({desc.digest}) {problem}: "
                "the base's manifest does not describe its own layer, so it is not copied "
                "into a new image",
                registry=image.reference.registry,
                repository=image.reference.repository,
                digest=str(image.manifest_digest),
                hint="build on a base whose manifest is honest (`imagekit inspect` it), or "
                "ask its publisher to fix the manifest",
            )
    run.log(f"base: {len(image.layers)} layer descriptors match what the registry serves")


def _guard(run: Run, image: ResolvedImage) -> tuple[tuple[OverlayCheck, ...], tuple[LayerUse, ...]]:
    """2. Every overlay against the base; guard.json kept; a drifted or blocked one rejects."""
    checks, uses = guard_overlays(
        run.client, image, run.loaded.plan.steps, IndexStore(run.options.cache_dir), log=run.log
    )
    for check in checks:
        run.log(
            f"guard: steps[{check.step}] {check.marker()} -> {check.verdict}"
            + (f", writes {check.written}" if check.written != check.destination else "")
            + "".join(f"; {note}" for note in check.notes)
        )
    read = [use for use in uses if use.how == "read"]
    run.log(
        f"guard: {len(read)} layers read, {sum(u.how == 'cached' for u in uses)} from the "
        f"index cache, {sum(u.how == 'not needed' for u in uses)} not needed"
    )
    guard_report = make_guard_report(checks, uses)
    write_json(run.run_dir / "guard.json", guard_report.to_json())
    bad = [c for c in checks if not c.ok]
    if bad:
        first = bad[0]
        reason = "overlay-drift" if first.verdict == "drift" else "destination-blocked"
        what = "overlay guard refused" if reason == "overlay-drift" else "destination refused"
        message = f"{what}: {first.marker()}"
        step = f"steps[{first.step}] overlay {first.destination}"
        run.reject(
            RejectedBuildDetails(reason=reason, step=step, message=message, guard=guard_report),
            image=run.tagged,
        )
        raise BuildFailed(
            f"build of {run.loaded.name} rejected: {message}",
            step=step,
            last_lines=[f"{c.marker()} ({c.verdict})" for c in bad] + list(first.notes),
            log=run.log_path,
            reason=reason,
            hint="the base no longer has what the overlay was written for: re-pin it with "
            "`imagekit plans pin-overlay` after reviewing the change, or pin the old base",
        )
    return checks, uses


def _write_image(
    run: Run, image: ResolvedImage, checks: Sequence[OverlayCheck], blob: IO[bytes]
) -> Made:
    """3. The overlay layer (into ``blob``), then the config and manifest, into the evidence."""
    loaded = run.loaded
    layer: LayerBlob | None = None
    if checks:
        layer = write_layer(_entries(loaded, checks, run.epoch), blob)
        run.log(
            f"layer: {layer.digest} ({layer.size} bytes gzip, diffID {layer.diff_id}), "
            f"{layer.files} files, {layer.folders} folders"
        )
    assert loaded.base.digest is not None  # noqa: S101 - LoadedPlan.base is pinned
    labels = {
        BASE_NAME: base_name(loaded.base, loaded.plan.base.found_as),
        BASE_DIGEST: str(loaded.base.digest),
        "io.imagekit.plan": loaded.name,
        "io.imagekit.plan-sha256": loaded.digest.hex,
    }
    where = {"registry": image.reference.registry, "repository": image.reference.repository}
    base_config = load_document(image.config_bytes, "config", **where)
    copies = ", ".join(f"{c.written}" for c in checks)
    config = dump(
        edit_config(
            base_config,
            ConfigChanges(
                steps=loaded.plan.steps,
                imagekit_labels=labels,
                epoch=run.epoch,
                layer=layer,
                layer_history=f"COPY {copies} # plan {loaded.name}",
            ),
        )
    )
    media_type = image.manifest_media_type
    config_desc = Descriptor(image.manifest.config.mediaType, Digest.of_bytes(config), len(config))
    manifest = image_manifest(
        load_document(image.manifest_bytes, "manifest", **where),
        media_type,
        config_media_type=config_desc.media_type,
        config=config,
        layer=layer,
        annotations={BASE_NAME: labels[BASE_NAME], BASE_DIGEST: labels[BASE_DIGEST]},
    )
    manifest_digest = Digest.of_bytes(manifest)
    write_bytes(run.run_dir / "config.json", config)
    write_bytes(run.run_dir / "manifest.json", manifest)
    run.log(f"config {config_desc.digest}, manifest {manifest_digest} ({media_type})")
    return Made(layer, config, config_desc, manifest, manifest_digest, media_type)


def _push_untagged(run: Run, image: ResolvedImage, made: Made, blob: IO[bytes]) -> CopyResult:
    """4. The base's blobs (mounted or streamed), ours, then the manifest by digest, no tag."""
    blobs = [
        BlobSource(
            desc,
            repository=image.reference,
            distributable=(known_layer_type(desc.media_type) or (None, True))[1],
        )
        for desc in image.layers
    ]
    blobs.append(BlobSource(made.config_desc, data=lambda: [made.config]))
    if made.layer is not None:
        layer = made.layer
        layer_desc = Descriptor(layer_media_type(made.media_type), layer.digest, layer.size)
        blobs.append(BlobSource(layer_desc, data=lambda: _chunks_of(blob)))
    target = run.target
    pushed = CopyResult(
        source=str(image.reference), destination=str(target), digest=made.manifest_digest,
        media_type=made.media_type,
    )  # fmt: skip
    try:
        push_manifest(
            run.client, target, made.manifest, made.media_type, blobs, result=pushed,
            chunk_size=run.options.chunk_size, workers=run.options.workers, log=run.log,
        )  # fmt: skip
    except RegistryError as exc:
        if not pushed.blobs_skipped:
            raise
        raise RegistryError(
            f"{exc.message} ({pushed.blobs_skipped} non-distributable base layers were "
            f"not uploaded to {target.registry}, which imagekit never does)",
            registry=exc.registry,
            repository=exc.repository,
            digest=exc.digest,
            status=exc.status,
            url=exc.url,
            hint="push to the base's own registry (its layers are mounted there), or "
            "place those layers in the target registry yourself if their licence allows",
        ) from exc
    return pushed


def _check_assertions(
    run: Run, pinned: Reference, made: Made, guard_report: GuardReport
) -> AssertionRun:
    """5. The plan's assertions in the pushed image; failed or not run rejects, untagged."""
    loaded = run.loaded
    if not run.options.assertions:
        assertions = (
            not_run("skipped by --no-assertions")
            if not loaded.plan.assertions.empty
            else AssertionRun("none", "the plan has no assertions", None)
        )
    else:
        assertions = run_assertions(
            loaded,
            pinned,
            loaded.platform,
            run.run_dir,
            engine=run.engine,
            connect=connect,
            log=run.log,
        )
    run.log(f"assertions: {assertions.status}: {assertions.scope}")
    refused = rejection(assertions)
    if refused is None or not run.options.assertions:  # --no-assertions: accepted unchecked
        return assertions
    reason, message = refused
    run.reject(
        RejectedBuildDetails(
            reason=reason,
            step="assertions",
            message=message,
            manifest_digest=str(made.manifest_digest),
            guard=guard_report,
            assertions=assertion_details(run.workspace, assertions),
        ),
        image=str(pinned),
    )
    if assertions.status == "failed":
        raise assertions_failed(
            f"build of {loaded.name} rejected: {message}",
            assertions,
            log=run.log_path,
            hint=f"{pinned} stays in the registry by digest, untagged; fix the plan and build "
            "again",
        )
    raise CouldNotFinish(
        f"build of {loaded.name}: {message}; {pinned} was pushed by digest only and not tagged",
        hint="run it where the engine can run this platform (install qemu-user-static "
        "and binfmt-support for another architecture), or pass --no-assertions to accept "
        "the image unchecked",
    )


def _put_tag(run: Run, image: ResolvedImage, made: Made, pushed: CopyResult) -> Digest | None:
    """5, last. The tag, on the manifest or (with ``index``) on an index holding it."""
    document, media_type = made.manifest, made.media_type
    index_digest: Digest | None = None
    if run.options.index:
        document, media_type = image_index(document, media_type, image.config.platform())
        index_digest = Digest.of_bytes(document)
    push_manifest(
        run.client, run.target, document, media_type, [], tag=run.tag, result=pushed, log=run.log
    )
    if index_digest is not None:
        write_bytes(run.run_dir / "index.json", document)
        run.log(f"tagged {run.tagged} -> index {index_digest}")
    else:
        run.log(f"tagged {run.tagged} -> {made.manifest_digest}")
    pushed.digest, pushed.media_type = made.manifest_digest, made.media_type
    return index_digest
