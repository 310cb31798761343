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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TextIO

from imagekit.attest.attach import Prepared
from imagekit.attest.signer import Signer
from imagekit.builders.buildkit import _run_build
from imagekit.builders.built import PushedByDigest, RenderedBuild
from imagekit.builders.context import PipSecrets, Tee, new_build_dir
from imagekit.builders.options import BuildOptions
from imagekit.builders.platforms_index import PlatformImage, push_index, read_children
from imagekit.builders.platforms_proof import assert_each, daemon_runs_each, runs_here
from imagekit.builders.platforms_run import PlatformsRun, platform_tag
from imagekit.builders.push import check_push_repo, push_image
from imagekit.builders.record import (
    assertion_details,
    read_base_details,
    record_build,
    record_index_push,
    rendered_build_details,
    sign_then_record,
)
from imagekit.builders.remote import Daemon, check_daemon_choice, connect_daemon, run_on_daemon
from imagekit.errors import UsageError
from imagekit.plans.load import load_named_plan
from imagekit.plans.render import render
from imagekit.provenance import prepare_index_build, rendered_facts, signer_for
from imagekit.refs import Digest, Platform, parse_platform
from imagekit.registry import RegistryClient
from imagekit.runtime.engine import Engine, connect, execution_for
from imagekit.workspace import Workspace

MULTI_HINT = "docs/multi-platform.md says which builders build several platforms"


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
        run = PlatformsRun(
            workspace, loaded, rendered, repo, run_dir, log_path, Tee(log_file, echo),
            builder, where, daemon, options.candidate,
        )  # fmt: skip
        run.say(
            f"building plan {loaded.name} (plan sha256:{loaded.digest.hex}) for {platforms} "
            f"on {loaded.base} with {where}, pushing one index to {repo}"
        )
        runs_here(run)
        if daemon is not None and daemon.workers is not None:
            daemon_runs_each(loaded, daemon.workers, where)
        with _client(registry) as client:
            if daemon is not None:
                index_digest = _on_daemon(run, daemon, options)
            else:
                assert engine is not None  # noqa: S101 - connected above
                index_digest = _on_engine(run, engine, client, options)
            children = read_children(run, client, index_digest)
            images = assert_each(run, children, engine)
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


def _attest(run: PlatformsRun, result: PlatformsResult, *, signer: Signer) -> Prepared:
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


def _on_daemon(run: PlatformsRun, daemon: Daemon, options: BuildOptions) -> str:
    """One BuildKit build of every platform; BuildKit pushes the index by digest."""
    metadata = run_on_daemon(
        daemon, run.rendered, run.loaded, str(run.repo), PipSecrets.of(options), options,
        run.tee, run.workspace, run.log_path,
    )  # fmt: skip
    digest = str(metadata["containerimage.digest"])
    run.say(f"BuildKit pushed the index {run.repo}@{digest}")
    return digest


def _on_engine(
    run: PlatformsRun, engine: Engine, client: RegistryClient, options: BuildOptions
) -> str:
    """Each platform built, loaded and pushed by the engine; the index composed and pushed
    here, by digest."""
    pip = PipSecrets.of(options)
    pushed: list[tuple[Platform, Digest]] = []
    for platform in run.loaded.platforms:
        # The build resolves the base index in the registry (--pull) for its platform: the
        # engine's classic store keeps one image under the index's name, and refuses to pull
        # a second platform under it ("Cannot overwrite digest").
        tag = f"imagekit/{run.loaded.name}:{run.run_dir.name}-{platform_tag(platform)}"
        run.say(f"{platform}: building {tag}")
        image_id = _run_build(
            run.workspace, run.loaded, run.rendered, engine, tag, pip, options, run.tee,
            run.log_path, platform=str(platform),
        )  # fmt: skip
        run.say(f"{platform}: built {image_id}")
        _, manifest = push_image(engine, tag, str(run.repo), run.log_path)
        pushed.append((platform, Digest(manifest)))
    return str(push_index(run, client, pushed))


def _record(
    run: PlatformsRun, result: PlatformsResult, *, client: RegistryClient
) -> PlatformsResult:
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
