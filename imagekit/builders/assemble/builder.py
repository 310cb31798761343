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
6. record ``build`` and ``push`` in the ledger, as the engine path does.

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
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import IO, Any, TextIO

from imagekit.attest.attach import Prepared
from imagekit.attest.signer import Signer
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
from imagekit.builders.built import ConfigNamed, InRegistry, PlanBuild
from imagekit.builders.push import check_push_repo
from imagekit.builders.record import (
    assertion_details,
    base_image_details,
    record_build,
    record_pushed,
    record_rejected,
    sign_then_record,
)
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
from imagekit.layers import layer_media_type as known_layer_type
from imagekit.layers import sniff_compression
from imagekit.ledger import (
    BuildDetails,
    PushDetails,
    RejectedBuildDetails,
)
from imagekit.ledger.record import (
    CopyDetails,
    GuardReport,
    OverlayLayerDetails,
)
from imagekit.plans.load import load_named_plan
from imagekit.plans.model import LoadedPlan, Plan
from imagekit.plans.render import base_name
from imagekit.plans.steps import Overlay
from imagekit.progress import human_bytes, plural
from imagekit.provenance import BuilderFacts, prepare_build, signer_for
from imagekit.refs import Digest, Reference
from imagekit.registry import Descriptor, RegistryClient, ResolvedImage
from imagekit.registry.upload import BlobSource, CopyResult, push_manifest
from imagekit.runtime.engine import Engine, connect
from imagekit.workspace import Workspace

MiB = 1 << 20
_SPOOL = 32 * MiB


@dataclass(frozen=True)
class AssembleOptions:
    """What a caller may choose about one registry build; the plan decides the rest.

    ``workers`` bounds memory while blobs are streamed between registries (one piece per
    worker); ``chunk_size`` None sends each blob in one PUT of known length, which every
    registry takes (GHCR refuses PATCH chunks over 4 MiB), a number sends PATCH chunks of
    at most that size (imagekit.registry.upload); ``cache_dir`` moves the layer-index cache.
    """

    push: str | None = None
    tag: str | None = None
    base_override: str | None = None
    index: bool = False
    assertions: bool = True
    chunk_size: int | None = None
    workers: int = 2
    cache_dir: Path | None = None
    sign_key: Path | None = None  # sign SLSA v1 provenance beside the accepted image
    candidate: str | None = None  # a night's candidate: the nightly-... tag it is built for


@dataclass(frozen=True)
class AssembleResult(ConfigNamed, InRegistry, PlanBuild):
    platform: str
    pushed: str  # repo@manifest digest
    tag: str  # repo:tag, put only once the assertions passed (or were not asked for)
    manifest_digest: str
    manifest_media_type: str
    config_digest: str
    index_digest: str | None
    layer: LayerBlob | None
    guard: tuple[OverlayCheck, ...]
    layers: tuple[LayerUse, ...]
    push: CopyResult
    assertions: AssertionRun
    epoch: int
    epoch_source: str
    seconds: float
    ledger: list[int] = field(default_factory=list)
    builder: str = field(default="registry", kw_only=True)

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "plan_sha256": self.plan_sha256,
            "builder": self.builder,
            "base": self.base,
            "platform": self.platform,
            "pushed": self.pushed,
            "tag": self.tag,
            "manifest_digest": self.manifest_digest,
            "manifest_media_type": self.manifest_media_type,
            "config_digest": self.config_digest,
            "image_id": self.image_id,
            "index_digest": self.index_digest,
            "layer": self.layer.to_json() if self.layer else None,
            "guard": [check.to_json() for check in self.guard],
            "base_layers": [use.to_json() for use in self.layers],
            "push": self.push.to_json(),
            "assertions": self.assertions.to_json(),
            "epoch": self.epoch,
            "epoch_source": self.epoch_source,
            "evidence_dir": str(self.evidence_dir),
            "log": str(self.log),
            "seconds": self.seconds,
            **self.records_json(),
        }


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


class _Log:
    """Our own lines, to stderr and into the evidence log as they come."""

    def __init__(self, path: Path, echo: TextIO) -> None:
        self._file = path.open("x", encoding="utf-8")
        self._echo = echo
        self.lines: list[str] = []

    def __call__(self, text: str) -> None:
        line = f"imagekit: {text}\n"
        self.lines.append(text)
        self._file.write(line)
        self._file.flush()
        self._echo.write(line)
        self._echo.flush()

    def close(self) -> None:
        self._file.close()


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


@dataclass(frozen=True)
class _Run:
    """One registry build under way: what every step reads, passed as one value."""

    workspace: Workspace
    loaded: LoadedPlan
    options: AssembleOptions
    target: Reference
    tag: str
    epoch: int
    epoch_source: str
    run_dir: Path
    log: _Log
    client: RegistryClient
    engine: Engine | None
    started: float
    signer: Signer | None = None

    @property
    def log_path(self) -> Path:
        return self.run_dir / "build.log"

    @property
    def tagged(self) -> str:
        """repo:tag, the name the tag step puts."""
        return f"{self.target.name}:{self.tag}"

    def reject(self, details: RejectedBuildDetails, *, image: str) -> int:
        """Keep a failed attempt on record, as the engine path does (and no tag was put)."""
        self.log(f"build rejected ({details.reason}): {details.message}")
        return record_rejected(
            self.workspace, self.loaded, details, log_path=self.log_path, image=image,
            what="registry build (no tag was put)",
        )  # fmt: skip


@dataclass(frozen=True)
class _Made:
    """The new image's documents, as written to the evidence folder and pushed."""

    layer: LayerBlob | None
    config: bytes
    config_desc: Descriptor
    manifest: bytes
    manifest_digest: Digest
    media_type: str


def _guard_report(checks: Sequence[OverlayCheck], uses: Sequence[LayerUse]) -> GuardReport:
    return GuardReport.model_validate(
        {"checks": [c.to_json() for c in checks], "base_layers": [u.to_json() for u in uses]}
    )


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
    log = _Log(run_dir / "build.log", echo or sys.stderr)
    own_client = client is None
    client = client or RegistryClient()
    try:
        return _assemble(
            _Run(
                workspace, loaded, options, target, tag, epoch, epoch_source, run_dir, log,
                client, engine, started, signer,
            )
        )  # fmt: skip
    finally:
        log.close()
        if own_client:
            client.close()


def _assemble(run: _Run) -> AssembleResult:
    """The flow of the module docstring, one step a function; the tag comes last."""
    image = _resolve_base(run)
    checks, uses = _guard(run, image)
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL, prefix="imagekit-layer-") as blob:
        made = _write_image(run, image, checks, blob)
        pushed = _push_untagged(run, image, made, blob)
    pinned = run.target.pinned_only(made.manifest_digest)
    run.log(f"pushed {pinned} (no tag yet)")
    assertions = _check_assertions(run, pinned, made, _guard_report(checks, uses))
    index_digest = _put_tag(run, image, made, pushed)
    return _record(
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


def _resolve_base(run: _Run) -> ResolvedImage:
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


def _check_base_descriptors(run: _Run, image: ResolvedImage) -> None:
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


def _guard(
    run: _Run, image: ResolvedImage
) -> tuple[tuple[OverlayCheck, ...], tuple[LayerUse, ...]]:
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
    guard_report = _guard_report(checks, uses)
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
    run: _Run, image: ResolvedImage, checks: Sequence[OverlayCheck], blob: IO[bytes]
) -> _Made:
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
    return _Made(layer, config, config_desc, manifest, manifest_digest, media_type)


def _push_untagged(run: _Run, image: ResolvedImage, made: _Made, blob: IO[bytes]) -> CopyResult:
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
    run: _Run, pinned: Reference, made: _Made, guard_report: GuardReport
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


def _put_tag(run: _Run, image: ResolvedImage, made: _Made, pushed: CopyResult) -> Digest | None:
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


def _record(run: _Run, image: ResolvedImage, result: AssembleResult) -> AssembleResult:
    """6. ``build`` and ``push`` in the ledger, after assemble.json is kept.

    The image is pushed and tagged by now: a ledger that refuses the records does not hide
    it (the refusal carries the result, as the engine build's does).
    """

    def record(attested: AssembleResult) -> AssembleResult:
        write_json(run.run_dir / "assemble.json", attested.to_json())
        return replace(attested, ledger=list(_append_records(run, image, attested)))

    # accepted and tagged: its provenance signed, its records naming it, then attached
    return sign_then_record(
        result,
        attest=partial(_attest, run, run.signer) if run.signer is not None else None,
        record=record,
    )


def _attest(run: _Run, signer: Signer, result: AssembleResult) -> Prepared:
    """The SLSA provenance of an assembled image: the builder is imagekit's assembler (no
    engine build), and what it knows is the layer it wrote, the config and the guard."""
    loaded = run.loaded
    sources = tuple(
        (step.source, loaded.overlay_dir / step.source)
        for step in loaded.plan.steps
        if isinstance(step, Overlay)
    )
    facts = BuilderFacts(
        "registry",
        {"builder": "registry (imagekit assembler, no engine)"},
        {
            "config_digest": result.config_digest,
            "layer": result.layer.to_json() if result.layer else None,
            "epoch": result.epoch,
            "epoch_source": result.epoch_source,
            "guard": [check.to_json() for check in result.guard],
            "assertions": result.assertions.status,
        },
        sources,
    )
    index = result.index_digest is not None
    pushed = run.target.pinned_only(result.index_digest) if result.index_digest else result.pushed
    # Logged before signing: the log's sha256 is a byproduct of the provenance.
    run.log(f"attesting the provenance of {pushed}")
    return prepare_build(
        signer, loaded, facts, pushed=str(pushed), log=run.log_path, run_id=run.run_dir.name,
        index=index,
    )  # fmt: skip


def _append_records(run: _Run, image: ResolvedImage, result: AssembleResult) -> tuple[int, int]:
    workspace, loaded = run.workspace, run.loaded
    guards = "the overlay guards checked the base's files from its layers' indexes" + (
        "" if result.guard else " (no overlays)"
    )
    build_seq = record_build(
        workspace,
        loaded,
        result.pushed,
        scope=(
            f"assembled through the registry API from plan {loaded.name} "
            f"(sha256:{loaded.digest.hex}) with no engine build and no base pull; {guards} "
            f"and passed; {result.assertions.scope}; nothing was run on a GPU"
        ),
        evidence=run.run_dir / "assemble.json",
        candidate=run.options.candidate,
        details=BuildDetails(
            image_id=result.config_digest,
            plan_sha256=loaded.digest.hex,
            builder="registry",
            manifest_digest=result.manifest_digest,
            epoch=result.epoch,
            guard=_guard_report(result.guard, result.layers),
            assertions=assertion_details(workspace, result.assertions),
            base=base_image_details(loaded, image),
            **(
                {"layer": OverlayLayerDetails.model_validate(result.layer.to_json())}
                if result.layer
                else {}
            ),
        ),
    )
    push_seq = record_pushed(
        workspace,
        plan=loaded.name,
        image=result.tag,
        pushed=result.pushed,
        scope=(
            f"imagekit put the manifest {result.manifest_digest} and the tag {result.tag}; "
            f"{result.push.blobs_mounted} blobs mounted, {result.push.blobs_uploaded} "
            f"uploaded, {result.push.blobs_existing} already there"
        ),
        evidence=run.log_path,
        details=PushDetails(
            manifest_digest=result.manifest_digest,
            config_digest=result.config_digest,
            transfer=CopyDetails.model_validate(result.push.to_json()),
            **({"attestation": result.attestation_value} if result.signed else {}),
            **({"index_digest": result.index_digest} if result.index_digest else {}),
        ),
    )
    return build_seq, push_seq
