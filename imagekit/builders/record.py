"""The ledger records of a build, the same whichever builder made the image.

Every builder (the engine, a BuildKit daemon, several platforms, the registry) appends its
``build``, ``rejected-build`` and ``push`` records through these helpers, and describes the
base the same way (:func:`base_image_details`), so a record does not tell which builder wrote
it except by its ``builder`` field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from imagekit.attest.seal import sign_record_attach
from imagekit.errors import ImagekitError
from imagekit.ledger import (
    BaseImageDetails,
    BuildDetails,
    PushDetails,
    RejectedBuildDetails,
    append_record,
)
from imagekit.ledger.record import AssertionRunDetails
from imagekit.plans.model import LoadedPlan
from imagekit.refs import Platform
from imagekit.registry import RegistryClient, ResolvedImage
from imagekit.workspace import Workspace

if TYPE_CHECKING:
    from imagekit.attest.attach import Prepared
    from imagekit.builders.assemble.check import AssertionRun
    from imagekit.builders.built import PlanBuild
    from imagekit.plans.render import Rendered

Built = TypeVar("Built", bound="PlanBuild")


def sign_then_record(
    result: Built,
    *,
    attest: Callable[[Built], Prepared] | None,
    record: Callable[[Built], Built],
    client: RegistryClient | None = None,
) -> Built:
    """An accepted image's last steps, in the one order every stage keeps (imagekit.attest.
    seal): sign, record, then attach, so that nothing reaches the registry unless its record
    was written.

    1. The provenance is signed first, attaching nothing (``attest`` returns it prepared, in
       the result's ``signed``; None without --sign-key), so the records can name the
       envelope that is to be attached (``attestation_value``), or say "not attested: WHY".
    2. The records are appended (``record`` returns the result with their seqs in its
       ``ledger``); a ledger that refuses them raises RecordRefused carrying the result, since
       the image is built and pushed by now and must not be hidden; nothing is attached.
    3. Only then is the envelope attached (through CLIENT, or one of its own), the result's
       ``attestation`` saying whether the registry stored it; one it did not store ends the
       build exit 3 (NotAttested, carrying the recorded result): nothing proved is lost to a
       registry's refusal.
    """
    if attest is not None:
        result = dataclasses.replace(result, signed=attest(result))
    return sign_record_attach(
        result,
        sign=lambda built: (built.signed,) if built.signed is not None else (),
        record=lambda built, _: record(built),
        attach=lambda prepared: tuple(each.attach(client) for each in prepared),
        attached=lambda built, outcomes: dataclasses.replace(built, attestation=outcomes[0]),
    )


def _record(workspace: Workspace, kind: str, **kwargs: Any) -> int:
    """Append one ledger record; returns its seq."""
    return int(append_record(workspace, kind, **kwargs).seq)


def record_plan_image(
    workspace: Workspace,
    kind: str,
    loaded: LoadedPlan,
    image: str,
    *,
    status: str,
    scope: str,
    evidence: Path,
    details: BuildDetails | RejectedBuildDetails,
) -> int:
    """Append the record of an image made (or refused) from a plan on its base; its seq.

    Both builders' ``build`` and ``rejected-build`` records name the plan, the image and the
    base this way.
    """
    return _record(
        workspace,
        kind,
        plan=loaded.name,
        images={"image": image, "base": str(loaded.base)},
        status=status,
        scope=scope,
        evidence=evidence,
        details=details,
    )


def record_build(
    workspace: Workspace,
    loaded: LoadedPlan,
    image: str,
    *,
    scope: str,
    evidence: Path,
    details: BuildDetails,
    candidate: str | None,
) -> int:
    """Append the ``build`` record of an image a builder made from the plan and accepted.

    ``candidate`` is the ``nightly-...`` tag of a night's candidate (``BuildOptions.candidate``)
    and goes into the details (BuildDetails.candidate): a BuildKit daemon pushes by digest only
    and the registry builder names its image by digest, so no tag tells a candidate from an
    accepted build. Every builder passes it, None included, so none can leave it out."""
    if candidate is not None:
        details = details.model_copy(update={"candidate": candidate})
    return record_plan_image(
        workspace,
        "build",
        loaded,
        image,
        status="built",
        scope=scope,
        evidence=evidence,
        details=details,
    )


def record_rejected(
    workspace: Workspace,
    loaded: LoadedPlan,
    details: RejectedBuildDetails,
    *,
    log_path: Path,
    image: str,
    what: str = "build",
) -> int:
    """A failed attempt stays on record; a later success is a new record beside it.

    Both builders call this: the engine path with BuildKit's failure, the registry builder
    (imagekit.builders.assemble) with its guard report or assertion run in ``details``.
    """
    return record_plan_image(
        workspace,
        "rejected-build",
        loaded,
        image,
        status="rejected",
        scope=(
            f"the {what} of plan {loaded.name} (sha256:{loaded.digest.hex}) failed; "
            "no image was accepted"
        ),
        evidence=log_path,
        details=details,
    )


def record_pushed(
    workspace: Workspace,
    *,
    plan: str,
    image: str,
    pushed: str,
    scope: str,
    evidence: Path,
    details: PushDetails,
) -> int:
    """Append the ``push`` record of ``image`` (as the builder named it) pushed as ``pushed``
    (repo@digest); every builder's push record is this one, its scope and details its own."""
    return _record(
        workspace,
        "push",
        plan=plan,
        images={"image": image, "pushed": pushed},
        status="pushed",
        scope=scope,
        evidence=evidence,
        details=details,
    )


def record_push(
    workspace: Workspace,
    tag: str,
    pushed: str,
    manifest: str,
    log_path: Path,
    *,
    plan: str,
    image_id: str,
    attestations: Mapping[str, str] | None = None,
) -> int:
    """Append the push record of an engine image ``tag`` pushed as ``pushed``; its seq.

    ``attestations`` are what was signed onto the pushed digest, by PushDetails field
    (``attestation``: the provenance; the pipeline's ``audit_attestation`` and
    ``vuln_attestation``): each the envelope's digest or "not attested: WHY"."""
    return record_pushed(
        workspace,
        plan=plan,
        image=tag,
        pushed=pushed,
        scope=f"the engine pushed {tag} and the registry named the manifest {manifest}",
        evidence=log_path,
        details=PushDetails(
            manifest_digest=manifest,
            config_digest=image_id,
            **(attestations or {}),
        ),
    )


def record_index_push(
    workspace: Workspace,
    pushed: str,
    index_digest: str,
    log_path: Path,
    *,
    plan: str,
    scope: str,
    attestation: str | None = None,
) -> int:
    """Append the push record of an index of several platforms (imagekit.builders.platforms);
    ``attestation``: its provenance's envelope digest, or "not attested: WHY"."""
    return record_pushed(
        workspace,
        plan=plan,
        image=pushed,
        pushed=pushed,
        scope=scope,
        evidence=log_path,
        details=PushDetails(index_digest=index_digest, attestation=attestation),
    )


def read_base_details(
    loaded: LoadedPlan, registry: RegistryClient | None, platform: Platform | None = None
) -> BaseImageDetails:
    """What the lock file needs about the upstream base, read from its registry.

    The engine only tells the config digest; the index digest, layer digests and compressed
    size come from the registry. They are information for the record, not a gate (the build
    already pulled the base by digest), so a registry that cannot answer now leaves the reason
    in the record instead of failing a build that succeeded. ``platform`` is one of a plan of
    several platforms (default: the plan's one).
    """
    platform = platform or loaded.platform
    try:
        if registry is not None:
            resolved = registry.resolve(loaded.base, platform)
        else:
            with RegistryClient() as client:
                resolved = client.resolve(loaded.base, platform)
    except ImagekitError as exc:
        return BaseImageDetails(**_known_base(loaded, platform), inspect_error=exc.message)
    return base_image_details(loaded, resolved, platform)


def _known_base(loaded: LoadedPlan, platform: Platform | None = None) -> dict[str, Any]:
    known: dict[str, Any] = {
        "platform": str(platform) if platform else loaded.plan.base.platform,
        "manifest_digest": str(loaded.base.digest),
    }
    if loaded.plan.base.found_as:
        known["source_tag"] = loaded.plan.base.found_as
    return known


def base_image_details(
    loaded: LoadedPlan, resolved: ResolvedImage, platform: Platform | None = None
) -> BaseImageDetails:
    """The base as ``resolved`` describes it, in the build record's shape (both builders)."""
    inspected = resolved.to_json()
    keys = ("index_digest", "config_digest", "compressed_layer_bytes", "layer_digests", "diff_ids")
    return BaseImageDetails(
        **_known_base(loaded, platform), **{key: inspected[key] for key in keys}
    )


def rendered_build_details(
    loaded: LoadedPlan,
    rendered: Rendered,
    builder: str,
    base: BaseImageDetails,
    **more: Any,
) -> BuildDetails:
    """The ``build`` record's details of an image built from the plan's rendered Dockerfile
    (the engine, a BuildKit daemon, each platform of several): the plan, the Dockerfile and
    every rendered file by sha256, the builder and the base, and what the builder adds."""
    return BuildDetails(
        plan_sha256=loaded.digest.hex,
        dockerfile_sha256=rendered.digest.hex,
        rendered_sha256=rendered.context_sha256(),
        builder=builder,
        base=base,
        **more,
    )


def assertion_details(workspace: Workspace, run: AssertionRun) -> AssertionRunDetails:
    """An assertion run in the pushed image, for the ledger, its log named relative to the
    project (outside it, by name only: never a host path)."""
    document = run.to_json()
    if run.log is not None:
        try:
            document["log"] = run.log.resolve().relative_to(workspace.root.resolve()).as_posix()
        except ValueError:
            document["log"] = run.log.name
    return AssertionRunDetails.model_validate(document)
