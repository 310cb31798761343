"""A plan of several platforms (``base.platforms``): each built, guarded and asserted, one index.

A model served on amd64 servers and on arm64 boxes (DGX Spark, Grace) is one image index with
an image for each: the same plan, the same overlays, on each platform's image of one base
index. ``imagekit build NAME --push REPO`` on such a plan builds every platform the plan lists
and pushes ONE index by digest; before that it refuses what it could not prove:

- a platform that runs here neither natively nor under qemu-user (a binfmt_misc handler with
  the F flag) is NOT RUN, exit 3, before anything is built: its overlay guards, RUN steps and
  assertions could not run, and a platform never passes unchecked;
- on a BuildKit daemon (``--buildkit ADDR``), a platform its workers do not list is exit 3
  naming the daemon, before anything is staged.

Two builders can do it; the registry builder (``--builder registry``) assembles one image and
is refused with exit 2 (never a silent build of one platform):

- a BuildKit daemon (``--buildkit`` or ``--buildx-builder``, imagekit.builders.remote): one build
  with every platform (``--opt platform=A,B``; RUN steps of another architecture under the
  daemon's qemu-user), pushed by BuildKit as one index by digest;
- the engine (imagekit.builders.buildkit): the docker driver of buildx, and the legacy client,
  on an engine of the classic image store cannot export a multi-platform image, so each
  platform is built in turn (its base pulled for that platform), loaded and pushed by the
  engine (which pushes a tag: ``REPO:<run>-<os>-<arch>``), and imagekit's registry client
  composes the index of those manifests and pushes it by digest.

The overlay guards and the assertions run inside each platform's build (emulated where the
platform is not the host's). Then, as for every image a builder pushes, the plan's assertions
run once more in each platform's pushed image (imagekit.builders.assemble.check: native,
emulated, or NOT RUN, which is never a pass), and each platform gets its own ``build``
record naming its manifest and the index; one ``push`` record names the index. A failed
platform rejects the whole build: its ``rejected-build`` record names the platform, and the
index stays in the registry by digest only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from imagekit.attest.attach import Prepared
from imagekit.attest.signer import Signer
from imagekit.builders.assemble.check import (
    RUN_WHERE_HINT,
    AssertionRun,
    assertions_failed,
    not_run,
    rejection,
    run_assertions,
)
from imagekit.builders.assemble.config import dump
from imagekit.builders.buildkit import _run_build
from imagekit.builders.built import PushedByDigest, RenderedBuild
from imagekit.builders.context import PipSecrets, Tee, new_build_dir
from imagekit.builders.options import BuildOptions
from imagekit.builders.push import check_push_repo, push_image
from imagekit.builders.record import (
    assertion_details,
    read_base_details,
    record_build,
    record_index_push,
    record_rejected,
    rendered_build_details,
    sign_then_record,
)
from imagekit.builders.remote import Daemon, check_daemon_choice, connect_daemon, run_on_daemon
from imagekit.errors import (
    CouldNotFinish,
    RecordRefused,
    ReferenceFormatError,
    UsageError,
)
from imagekit.evidence import write_bytes
from imagekit.ledger import RejectedBuildDetails
from imagekit.plans.load import load_named_plan
from imagekit.plans.model import LoadedPlan, same_platform_key
from imagekit.plans.render import Rendered, render
from imagekit.provenance import prepare_index_build, rendered_facts, signer_for
from imagekit.refs import Digest, Platform, Reference, parse_platform, parse_reference
from imagekit.registry import RegistryClient
from imagekit.registry.manifest import (
    DOCKER_MANIFEST,
    DOCKER_MANIFEST_LIST,
    OCI_INDEX,
    Descriptor,
    ImageIndex,
    ImageManifest,
    parse_config,
    parse_manifest,
)
from imagekit.registry.resolve import select_platform
from imagekit.registry.upload import push_manifest
from imagekit.runtime.engine import Engine, connect, execution_for
from imagekit.workspace import Workspace

MULTI_HINT = "docs/multi-platform.md says which builders build several platforms"


@dataclass(frozen=True)
class PlatformImage:
    """One platform's image in the index: its manifest, config and assertion run."""

    platform: str  # as the plan lists it
    manifest_digest: str
    media_type: str
    size: int
    config_digest: str
    pushed: str  # repo@manifest digest
    assertions: AssertionRun

    def to_json(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "pushed": self.pushed,
            "manifest_digest": self.manifest_digest,
            "media_type": self.media_type,
            "size": self.size,
            "image_id": self.config_digest,
            "assertions": self.assertions.to_json(),
        }


@dataclass(frozen=True)
class PlatformsResult(PushedByDigest, RenderedBuild):
    """One index pushed by digest, with an image a platform, each asserted and recorded; an
    engine that runs the pushed index takes its own platform's image."""

    address: str | None  # the daemon or buildx builder; None on the engine
    pushed: str  # repo@index digest
    index_digest: str
    index_media_type: str
    images: tuple[PlatformImage, ...]
    ledger: tuple[int, ...] = ()

    @property
    def manifest_digest(self) -> str:
        """What the pushed reference names: the index."""
        return self.index_digest

    @property
    def image_id(self) -> str:
        """The config digest of the image an engine here would pull from the index (the
        native one), else of the plan's first platform."""
        native = [
            i for i in self.images if execution_for(parse_platform(i.platform)).how == "native"
        ]
        return (native or list(self.images))[0].config_digest

    def to_json(self) -> dict[str, Any]:
        return {
            **self.plan_json(),
            "buildkit": self.address,
            "pushed": self.pushed,
            "index_digest": self.index_digest,
            "index_media_type": self.index_media_type,
            "platforms": [image.to_json() for image in self.images],
            **self.evidence_json(),
            **self.records_json(),
        }


def _refuse_options(options: BuildOptions) -> None:
    """What a build of several platforms cannot honour is exit 2, never a build of one."""
    if options.builder == "registry":
        raise UsageError(
            "--builder registry assembles one image: it cannot build a plan of several platforms",
            hint="build it on the engine (--builder engine) or on a BuildKit daemon "
            f"(--buildkit ADDR); {MULTI_HINT}",
        )
    if options.push is None:
        raise UsageError(
            "a plan of several platforms is pushed as one index: give --push REPO",
            hint="imagekit build NAME --push REGISTRY/REPO",
        )
    for flag, given in (
        ("--index", options.index),
        ("--no-assertions", not options.assertions),
        ("--tag", options.tag is not None),
    ):
        if given:
            raise UsageError(
                f"{flag} is not supported for a plan of several platforms: the index is "
                "pushed by digest, and every platform is asserted",
                hint=f"drop {flag}; {MULTI_HINT}",
            )
    check_daemon_choice(options)


def daemon_platforms(workers: str) -> list[Platform]:
    """The platforms ``buildctl debug workers`` lists (its PLATFORMS column, comma-separated)."""
    found: list[Platform] = []
    for line in workers.splitlines()[1:]:
        for field in line.split()[1:]:
            for text in field.split(","):
                try:
                    found.append(parse_platform(text))
                except ReferenceFormatError:
                    continue
    return found


def _platform_tag(platform: Platform) -> str:
    return str(platform).replace("/", "-")


@dataclass
class _Run:
    """What one build of several platforms carries between its steps."""

    workspace: Workspace
    loaded: LoadedPlan
    rendered: Rendered
    repo: Reference
    run_dir: Path
    log_path: Path
    tee: Tee
    builder: str
    where: str
    daemon: Daemon | None  # None: the engine builds each platform in turn
    candidate: str | None  # a night's candidate: the nightly-... tag (BuildOptions.candidate)

    def say(self, text: str) -> None:
        self.tee.write(f"imagekit: {text}\n")

    def reject(self, details: RejectedBuildDetails, image: str) -> None:
        try:
            record_rejected(
                self.workspace, self.loaded, details, log_path=self.log_path, image=image
            )
        except RecordRefused as refused:
            self.say(f"the rejection was not recorded: {refused.problem}")


def build_platforms(
    workspace: Workspace,
    name: str,
    options: BuildOptions,
    *,
    engine: Engine | None = None,
    registry: RegistryClient | None = None,
    echo: TextIO | None = None,
) -> PlatformsResult:
    """Build every platform of plan ``name``, push one index by digest, assert, record."""
    echo = echo or sys.stderr
    loaded = load_named_plan(workspace, name, base_override=options.base_override)
    _refuse_options(options)
    assert options.push is not None  # noqa: S101 - _refuse_options
    signer = signer_for(options.sign_key, options.push)  # a key that cannot sign: exit 2
    repo = check_push_repo(options.push)
    rendered = render(loaded)
    daemon: Daemon | None = None
    if options.remote:
        daemon = connect_daemon(options)
        builder, where = daemon.builder, daemon.where
    else:
        engine = engine or connect()
        builder = "buildx" if engine.has_buildx else "docker build (BuildKit)"
        where = f"the engine ({builder}), one platform at a time"
    run_dir = new_build_dir(workspace, loaded, rendered)
    log_path = run_dir / "build.log"
    platforms = ", ".join(loaded.plan.base.targets)
    with log_path.open("x", encoding="utf-8") as log_file:
        run = _Run(
            workspace, loaded, rendered, repo, run_dir, log_path, Tee(log_file, echo),
            builder, where, daemon, options.candidate,
        )  # fmt: skip
        run.say(
            f"building plan {loaded.name} (plan sha256:{loaded.digest.hex}) for {platforms} "
            f"on {loaded.base} with {where}, pushing one index to {repo}"
        )
        _runs_here(run)
        if daemon is not None and daemon.workers is not None:
            _daemon_runs_each(loaded, daemon.workers, where)
        with _client(registry) as client:
            if daemon is not None:
                index_digest = _on_daemon(run, daemon, options)
            else:
                assert engine is not None  # noqa: S101 - connected above
                index_digest = _on_engine(run, engine, client, options)
            children = _children(run, client, index_digest)
            images = _assert_each(run, children, engine)
            index_ref = f"{repo}@{index_digest}"
            result = PlatformsResult(
                plan=loaded.name,
                plan_sha256=loaded.digest.hex,
                base=str(loaded.base),
                builder=builder,
                address=daemon.address if daemon is not None else None,
                pushed=index_ref,
                index_digest=index_digest,
                index_media_type=children.media_type,
                images=images,
                evidence_dir=run_dir,
                log=log_path,
                dockerfile_sha256=rendered.digest.hex,
            )
            # every platform accepted: the provenance of the index signed, the records
            # naming it, then attached
            return sign_then_record(
                result,
                attest=partial(_attest, run, signer=signer) if signer else None,
                record=partial(_record, run, client=client),
                client=client,
            )


def _attest(run: _Run, result: PlatformsResult, *, signer: Signer) -> Prepared:
    """SLSA provenance of the index, its subjects the index and each platform's manifest."""
    daemon = run.daemon
    facts = rendered_facts(
        "buildkit" if daemon is not None else "engine",
        run.rendered,
        daemon.version() if daemon is not None else {"builder": result.builder},
        index_digest=result.index_digest,
        platforms={
            i.platform: {"manifest_digest": i.manifest_digest, "config_digest": i.config_digest}
            for i in result.images
        },
    )
    prepared = prepare_index_build(
        signer,
        run.loaded,
        facts,
        pushed=result.pushed,
        manifests=[i.manifest_digest for i in result.images],
        log=run.log_path,
        run_id=run.run_dir.name,
    )
    run.say(f"provenance of the index and its {len(result.images)} platforms: "
            f"{prepared.ledger_value}")  # fmt: skip
    return prepared


@contextmanager
def _client(given: RegistryClient | None) -> Iterator[RegistryClient]:
    """The caller's registry client, or one of our own closed on the way out."""
    if given is not None:
        yield given
        return
    with RegistryClient() as own:
        yield own


def _daemon_runs_each(loaded: LoadedPlan, workers: str, where: str) -> None:
    """Exit 3 before anything is staged when the daemon's workers cannot run a platform."""
    offered = daemon_platforms(workers)
    keys = {same_platform_key(p) for p in offered}
    for platform in loaded.platforms:
        if same_platform_key(platform) not in keys:
            listed = ", ".join(sorted({str(p) for p in offered})) or "none"
            raise CouldNotFinish(
                f"{where} cannot build {platform}: its workers run {listed}",
                hint="register qemu-user's binfmt handler on the daemon's host, or use a "
                "builder with a native worker for it",
            )


def _runs_here(run: _Run) -> None:
    """NOT RUN (exit 3) for a platform this host can run neither natively nor emulated.

    The engine runs the Dockerfile's RUN steps (overlay guards, pip, assertions) here; a
    daemon runs them where it is, but the assertions run once more here in the pushed image.
    Either way such a platform could not be proved, so nothing is built; the refusal is
    recorded, naming the platform.
    """
    for platform in run.loaded.platforms:
        execution = execution_for(platform)
        run.say(f"{platform}: {execution.note}")
        if execution.runs:
            continue
        refused = not_run(f"{platform} runs here neither natively nor under qemu-user: "
                          f"{execution.reason}", execution)  # fmt: skip
        run.say(refused.scope)
        run.reject(
            RejectedBuildDetails(
                reason="assertions-not-run",
                step=None,
                message=f"{refused.scope}; nothing was built",
                assertions=assertion_details(run.workspace, refused),
                platform=str(platform),
            ),
            image=str(run.repo),
        )
        raise CouldNotFinish(
            f"build of {run.loaded.name}: {platform}: {refused.scope}; nothing was built",
            hint="install qemu-user-static and binfmt-support (its handler needs the F flag), "
            "or build on a host of that architecture",
        )


def _on_daemon(run: _Run, daemon: Daemon, options: BuildOptions) -> str:
    """One BuildKit build of every platform; BuildKit pushes the index by digest."""
    metadata = run_on_daemon(
        daemon, run.rendered, run.loaded, str(run.repo), PipSecrets.of(options), options,
        run.tee, run.workspace, run.log_path,
    )  # fmt: skip
    digest = str(metadata["containerimage.digest"])
    run.say(f"BuildKit pushed the index {run.repo}@{digest}")
    return digest


def _on_engine(run: _Run, engine: Engine, client: RegistryClient, options: BuildOptions) -> str:
    """Each platform built, loaded and pushed by the engine; the index composed and pushed
    here, by digest."""
    pip = PipSecrets.of(options)
    pushed: list[tuple[Platform, Digest]] = []
    for platform in run.loaded.platforms:
        # The build resolves the base index in the registry (--pull) for its platform: the
        # engine's classic store keeps one image under the index's name, and refuses to pull
        # a second platform under it ("Cannot overwrite digest").
        tag = f"imagekit/{run.loaded.name}:{run.run_dir.name}-{_platform_tag(platform)}"
        run.say(f"{platform}: building {tag}")
        image_id = _run_build(
            run.workspace, run.loaded, run.rendered, engine, tag, pip, options, run.tee,
            run.log_path, platform=str(platform),
        )  # fmt: skip
        run.say(f"{platform}: built {image_id}")
        _, manifest = push_image(engine, tag, str(run.repo), run.log_path)
        pushed.append((platform, Digest(manifest)))
    return str(_push_index(run, client, pushed))


def _push_index(run: _Run, client: RegistryClient, pushed: list[tuple[Platform, Digest]]) -> Digest:
    """An index of the pushed manifests, each entry's platform read from its own config."""
    entries: list[dict[str, Any]] = []
    types: set[str] = set()
    for _, digest in pushed:
        body, media_type, _ = client.get_manifest(run.repo, digest)
        manifest = _manifest(run, body, media_type, digest)
        config = parse_config(
            client.fetch_blob(run.repo, Descriptor.from_model(manifest.config)),
            registry=run.repo.registry,
            repository=run.repo.repository,
            digest=str(manifest.config.digest),
        )
        platform = config.platform()
        entry_platform = {"architecture": platform.architecture, "os": platform.os}
        if platform.variant:
            entry_platform["variant"] = platform.variant
        types.add(media_type)
        entries.append(
            {"mediaType": media_type, "digest": str(digest), "size": len(body),
             "platform": entry_platform}
        )  # fmt: skip
    index_type = DOCKER_MANIFEST_LIST if types == {DOCKER_MANIFEST} else OCI_INDEX
    document = dump({"schemaVersion": 2, "mediaType": index_type, "manifests": entries})
    push_manifest(client, run.repo, document, index_type, [], tag=None, log=run.say)
    digest = Digest.of_bytes(document)
    write_bytes(run.run_dir / "index.json", document)
    run.say(f"pushed the index {run.repo}@{digest} ({index_type})")
    return digest


def _manifest(run: _Run, body: bytes, media_type: str, digest: Digest | str) -> ImageManifest:
    parsed = parse_manifest(
        body, media_type, registry=run.repo.registry, repository=run.repo.repository,
        digest=str(digest),
    )  # fmt: skip
    if not isinstance(parsed, ImageManifest):
        raise CouldNotFinish(f"{run.repo}@{digest} is an index where an image was expected")
    return parsed


@dataclass(frozen=True)
class _Child:
    """One plan platform's entry of the pushed index, with its manifest's config digest."""

    platform: Platform
    digest: str
    media_type: str
    size: int
    config: str


@dataclass(frozen=True)
class _Children:
    media_type: str  # the index's
    entries: tuple[_Child, ...]


def _children(run: _Run, client: RegistryClient, index_digest: str) -> _Children:
    """Each plan platform's manifest in the pushed index, read back from the registry."""
    body, media_type, digest = client.get_manifest(run.repo, index_digest)
    parsed = parse_manifest(
        body, media_type, registry=run.repo.registry, repository=run.repo.repository,
        digest=str(digest),
    )  # fmt: skip
    if not isinstance(parsed, ImageIndex):
        raise CouldNotFinish(
            f"{run.repo}@{index_digest} is a single image, not an index of "
            f"{len(run.loaded.platforms)} platforms"
        )
    entries: list[_Child] = []
    for platform in run.loaded.platforms:
        child = select_platform(
            parsed, platform, where=f"{run.repo}@{index_digest}", registry=run.repo.registry,
            repository=run.repo.repository, digest=index_digest,
        )  # fmt: skip
        child_body, child_type, _ = client.get_manifest(run.repo, child.digest)
        manifest = _manifest(run, child_body, child_type, child.digest)
        entries.append(
            _Child(platform, str(child.digest), child_type, child.size, str(manifest.config.digest))
        )
        run.say(f"{platform}: {run.repo}@{child.digest} in the index")
    return _Children(media_type, tuple(entries))


def _assert_each(
    run: _Run, children: _Children, engine: Engine | None
) -> tuple[PlatformImage, ...]:
    """The plan's assertions in each platform's pushed image; a failure rejects the build."""
    images: list[PlatformImage] = []
    for child in children.entries:
        pushed = f"{run.repo}@{child.digest}"
        assertions = run_assertions(
            run.loaded,
            parse_reference(pushed),
            child.platform,
            run.run_dir / f"assertions-{_platform_tag(child.platform)}",
            engine=engine,
            connect=connect,
            log=_prefixed(run, child.platform),
        )
        run.say(f"{child.platform}: assertions {assertions.status}: {assertions.scope}")
        images.append(
            PlatformImage(
                str(child.platform),
                child.digest,
                child.media_type,
                child.size,
                child.config,
                pushed,
                assertions,
            )  # fmt: skip
        )
    for image in images:
        _reject_unless_proved(run, image)
    return tuple(images)


def _prefixed(run: _Run, platform: Platform) -> Callable[[str], None]:
    """The assertion runner's lines in the build log, each naming its platform."""

    def log(text: str) -> None:
        run.tee.write(f"{platform}: {text}\n")

    return log


def _reject_unless_proved(run: _Run, image: PlatformImage) -> None:
    assertions = image.assertions
    refused = rejection(assertions)
    if refused is None:
        return
    reason, message = refused
    run.reject(
        RejectedBuildDetails(
            reason=reason,
            step="assertions",
            message=f"{image.platform}: {message}",
            manifest_digest=image.manifest_digest,
            assertions=assertion_details(run.workspace, assertions),
            platform=image.platform,
        ),
        image=image.pushed,
    )
    if assertions.status == "failed":
        raise assertions_failed(
            f"build of {run.loaded.name} rejected on {image.platform}: {message}",
            assertions,
            log=run.log_path,
            hint="the index and each platform's image stay in the registry by digest, untagged",
        )
    raise CouldNotFinish(
        f"build of {run.loaded.name}: {image.platform}: {message}", hint=RUN_WHERE_HINT
    )


def _record(run: _Run, result: PlatformsResult, *, client: RegistryClient) -> PlatformsResult:
    """A ``build`` record a platform, then the index's ``push`` record."""
    seqs: list[int] = []
    for image in result.images:
        platform = parse_platform(image.platform)
        execution = image.assertions.execution
        how = execution.note if execution is not None else "no assertions to run"
        seqs.append(
            record_build(
                run.workspace,
                run.loaded,
                image.pushed,
                scope=(
                    f"{image.platform} ({how}) of plan {run.loaded.name} "
                    f"(sha256:{run.loaded.digest.hex}), built on {run.where}, which ran the "
                    "overlay guards and the assertions inside the build; one of "
                    f"{len(result.images)} platforms of the index {result.index_digest}; "
                    f"{image.assertions.scope}; nothing was run on a GPU"
                ),
                evidence=run.log_path,
                details=rendered_build_details(
                    run.loaded,
                    run.rendered,
                    run.builder,
                    read_base_details(run.loaded, client, platform),
                    image_id=image.config_digest,
                    manifest_digest=image.manifest_digest,
                    assertions=assertion_details(run.workspace, image.assertions),
                    platform=image.platform,
                    index_digest=result.index_digest,
                    attestation=result.attestation_value,
                ),
                candidate=run.candidate,
            )
        )
    listed = ", ".join(f"{i.platform} {i.manifest_digest}" for i in result.images)
    seqs.append(
        record_index_push(
            run.workspace,
            result.pushed,
            result.index_digest,
            run.log_path,
            plan=run.loaded.name,
            scope=f"one index of {len(result.images)} platforms pushed by digest ({listed}); "
            "each platform's build record names it",
            attestation=result.attestation_value,
        )
    )
    return replace(result, ledger=tuple(seqs))
