"""A night's candidate: the builder `imagekit build` would take, the image built on a base,
pushed beside the accepted image, audited and compared with it; and why one was rejected."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from imagekit.builders.options import BuildOptions
from imagekit.errors import CheckFailed, RecordRefused
from imagekit.flows.nightly.night import Night
from imagekit.flows.nightly.options import NightOptions
from imagekit.image.remote import RegistryImage
from imagekit.layerdiff import ImageComparison, compare_images
from imagekit.ledger.accepted import CANDIDATE_TAG_PREFIX
from imagekit.plans.model import LoadedPlan
from imagekit.refs import parse_reference, repository_for

if TYPE_CHECKING:
    from imagekit.runtime.engine import Engine


def candidate_options(
    loaded: LoadedPlan, options: NightOptions, repo: str, tag: str, base: str
) -> tuple[str, BuildOptions]:
    """The builder of a night's candidate, as `imagekit build` chooses it
    (imagekit.builders.choice), and the options the night gives that builder.

    They differ by builder; the result is read the same way whichever ran, and each builder's
    ``build`` record says it is the candidate for ``tag`` (``candidate``: never accepted):

    - ``engine``: built without cache under a local tag; the night pushes it beside the
      accepted image unrecorded (a ``build`` record, no ``push`` record);
    - ``registry``: assembled and pushed under the candidate tag (``build`` and ``push``
      records, the push tagged ``nightly-...``, which is never a baseline);
    - ``buildkit`` / ``buildx``: built on that BuildKit and pushed by digest, untagged, by
      BuildKit (one ``build`` record naming the daemon, no ``push`` record: no engine holds
      the image to push it); without cache unless ``cache_ref`` asks for one.
    """
    from imagekit.builders.choice import chosen_builder

    request = BuildOptions(
        builder="auto", push=repo, base_override=base, candidate=tag, **options.daemon()
    )
    builder = chosen_builder(loaded.plan, request)
    if builder == "registry":
        return builder, replace(request, builder=builder, tag=tag)
    if builder == "engine":
        local = f"imagekit/{loaded.name}:{tag}"
        return builder, BuildOptions(
            builder=builder, no_cache=True, base_override=base, tag=local, candidate=tag
        )
    return builder, replace(request, no_cache=options.cache_ref is None)


def check_builder(options: NightOptions) -> None:
    """Before any plan: a BuildKit or buildx builder the night cannot use stops it at once.

    A malformed address or TLS file and an unknown buildx builder are UsageError (exit 2), a
    daemon that does not answer CouldNotFinish (exit 3) naming its address; ``cache_ref``
    without either is refused as `imagekit build` refuses it.
    """
    from imagekit.builders.remote import check_daemon_choice, connect_daemon

    daemon = BuildOptions(**options.daemon())
    if check_daemon_choice(daemon):
        connect_daemon(daemon)


@dataclass(frozen=True)
class Candidate:
    """A candidate built, pushed, audited and compared with the accepted image."""

    builder: str
    image_id: str
    pushed: str
    audit_status: str
    comparison: ImageComparison


def _repository(night: Night) -> str:
    """Where the candidate is pushed: beside the accepted image, or to ``--registry``."""
    assert night.baseline is not None  # noqa: S101 - checked by the callers
    if night.options.candidate_registry is not None:
        return repository_for(night.options.candidate_registry, night.name)
    return parse_reference(night.baseline.reference).name


def build_candidate(night: Night, base: str) -> Candidate:
    """Build on ``base``, push beside the accepted image, audit, compare with it.

    Raises CheckFailed when the build is rejected (its record is kept by the builder),
    RecordRefused when the ledger refused the build's record (the image is removed).
    """
    from imagekit.audit import stage
    from imagekit.audit.stage import AuditRequest
    from imagekit.builders import choice
    from imagekit.builders.built import BuiltImage
    from imagekit.builders.push import push_image
    from imagekit.runtime.engine import connect, engine_errors

    assert night.baseline is not None  # noqa: S101 - checked by the callers
    repo = _repository(night)
    tag = f"{CANDIDATE_TAG_PREFIX}{night.run_dir.name}"
    builder, options = candidate_options(night.loaded, night.options, repo, tag, base)
    engine: Engine = connect()
    made: list[str] = []
    try:
        built: BuiltImage = choice.run(
            night.workspace,
            choice.BuildRequest(night.name, options, echo=night.echo),
            engine=engine,
            registry=night.client,
        )
        made.append(built.runnable)
        pushed = built.pushed
        if pushed is None:
            # The candidate goes next to the accepted image (or to --registry): the
            # registry already holds the shared base layers, so only new layers travel.
            made.append(f"{repo}:{tag}")
            log = built.evidence_dir / "nightly-push.log"
            pushed, _ = push_image(engine, built.tag, repo, log)
        image_id = built.image_id
        night.say(f"candidate {pushed} ({builder} builder); auditing it")
        status = stage.run(
            night.workspace, AuditRequest(ref=built.runnable, plan=night.name), engine=engine
        ).verdict.status
        night.say(f"comparing {pushed} with the accepted {night.baseline.reference}")
        comparison = compare_images(
            RegistryImage.open(night.client, night.baseline.reference, night.loaded.platform),
            RegistryImage.open(night.client, pushed, night.loaded.platform),
        )
    except RecordRefused as refused:  # built (and pushed), but not on record
        if isinstance(refused.result, BuiltImage):
            made.append(refused.result.runnable)
        raise
    finally:
        if not night.options.keep_images:
            for ref in made:
                with engine_errors(f"removing the nightly image {ref}"):
                    if engine.client.image.exists(ref):
                        engine.client.image.remove(ref)
    return Candidate(builder, image_id, pushed, str(status), comparison)


def rejected(exc: CheckFailed) -> tuple[str, str | None]:
    """Why a candidate was rejected, in one line, and the image it was built as, if any."""
    from imagekit.builders.built import BuiltImage

    if isinstance(exc, RecordRefused) and isinstance(exc.result, BuiltImage):
        built = exc.result  # the build finished (a registry build: pushed); its record did not
        made = f"assembled and pushed as {built.pushed}" if built.builder == "registry" else "built"
        return (
            f"the candidate {built.image_id} was {made}, but the ledger refused its build "
            f"record: {exc.problem}"
        ), built.image_id
    return exc.message.splitlines()[0], None
