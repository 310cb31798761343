"""Build provenance: SLSA v1 (https://slsa.dev/spec/v1.0/provenance) for an image imagekit
built and pushed, signed and stored beside it (imagekit/attest).

What it states: the plan (name, sha256 of its exact bytes, its steps as written: overlays
with their guard hashes, pinned packages), the base by digest, each overlay source file's
sha256, the builder that made the image, what that builder alone knows of it (the engine
and BuildKit paths: the rendered Dockerfile's and every rendered file's sha256; the registry
builder: the overlay layer it wrote, the config and the guard's verdicts), and the build
log's sha256 as a byproduct. The policy's ``provenance: {plan, base}`` reads
``externalParameters.plan.name`` and the base among ``resolvedDependencies``.

A plan of several platforms (imagekit.builders.platforms) is one index: its provenance names
the index and each platform's manifest as subjects (:func:`prepare_index_build`), so a
verifier that holds either the index or one platform's digest finds it.

All three builders sign through :func:`prepare_build` once their image is pushed and
accepted, and attach only after their records (imagekit.builders.record.sign_then_record):
the engine builder (`imagekit build --push`), a BuildKit of its own (`--buildkit`,
`--buildx-builder`) and the registry builder (imagekit's assembler, no engine build). Each
names itself in ``runDetails.builder`` by a :class:`BuilderFacts` of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imagekit.attest.attach import Prepared, prepare_reference, prepare_subjects
from imagekit.attest.signer import Signer, signer_of
from imagekit.kinds.push import SLSA_PROVENANCE_V1
from imagekit.plans.model import LoadedPlan
from imagekit.plans.render import Rendered
from imagekit.refs import Digest, Reference, parse_reference
from imagekit.version import __version__

BUILD_TYPE = "https://imagekit.dev/buildtypes/plan/v1"
BUILDERS_URI = "https://imagekit.dev/builders/"


@dataclass(frozen=True)
class BuilderFacts:
    """Who made the image, and what that builder alone knows of it.

    ``kind`` ends the builder's id (``engine``, ``buildkit``, ``registry``); ``version`` says
    which way in and where (``{"builder": "buildx"}``, the buildkitd address); ``internal``
    is merged into ``internalParameters``; ``sources`` are the overlay files the image holds
    (relative source -> file), each stated by its sha256.
    """

    kind: str
    version: Mapping[str, str]
    internal: Mapping[str, Any]
    sources: tuple[tuple[str, Path], ...] = field(default=())

    @property
    def id(self) -> str:
        return BUILDERS_URI + self.kind


def rendered_facts(
    kind: str, rendered: Rendered, version: Mapping[str, str], **internal: Any
) -> BuilderFacts:
    """A builder that ran the rendered Dockerfile (the engine, a BuildKit of its own)."""
    return BuilderFacts(
        kind,
        version,
        {
            "rendered": rendered.context_sha256(),
            "dockerfile_sha256": rendered.digest.hex,
            **internal,
        },
        rendered.sources,
    )


def signer_for(sign_key: Path | None, push: str | None) -> Signer | None:
    """The signer of ``--sign-key``, refused (exit 2) before any build when it cannot sign or
    when nothing will be pushed for it to attest."""
    return signer_of(
        sign_key,
        nothing_to_attest=None
        if push
        else "--sign-key attests the pushed image; give --push REPO too",
        hint="imagekit build NAME --push REPO --sign-key FILE",
    )


def provenance_predicate(
    loaded: LoadedPlan, facts: BuilderFacts, *, log: Path, run_id: str
) -> dict[str, Any]:
    base = loaded.base
    dependencies: list[dict[str, Any]] = []
    if base.digest is not None:
        dependencies.append(
            {"uri": f"docker://{base.name}", "digest": {base.digest.algorithm: base.digest.hex}}
        )
    for source, path in facts.sources:
        dependencies.append(
            {
                "uri": f"file:dockerfiles/{loaded.name}/{source}",
                "digest": {"sha256": Digest.of_bytes(path.read_bytes()).hex},
            }
        )
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "plan": {"name": loaded.name, "sha256": loaded.digest.hex},
                "base": str(base),
                "steps": [step.model_dump(mode="json") for step in loaded.plan.steps],
            },
            "internalParameters": dict(facts.internal),
            "resolvedDependencies": dependencies,
        },
        "runDetails": {
            "builder": {
                "id": facts.id,
                "version": {"imagekit": __version__, **facts.version},
            },
            "metadata": {
                "invocationId": run_id,
                "finishedOn": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
            "byproducts": [
                {"name": log.name, "digest": {"sha256": Digest.of_bytes(log.read_bytes()).hex}}
            ],
        },
    }


def prepare_build(
    signer: Signer,
    loaded: LoadedPlan,
    facts: BuilderFacts,
    *,
    pushed: str,
    log: Path,
    run_id: str,
    index: bool = False,
) -> Prepared:
    """Sign the provenance of the image pushed as PUSHED (repo@digest), attaching nothing
    (the records name it first, then :meth:`Prepared.attach`); with ``index``, PUSHED is an
    index's digest, and the index and the plan's platform's manifest in it are both its
    subjects. A registry that cannot say which digests is a Prepared saying "not attested",
    never an exception."""
    predicate = provenance_predicate(loaded, facts, log=log, run_id=run_id)
    platform = loaded.platform if index else None
    return prepare_reference(
        signer, parse_reference(pushed), SLSA_PROVENANCE_V1, predicate, platform=platform
    )


def prepare_index_build(
    signer: Signer,
    loaded: LoadedPlan,
    facts: BuilderFacts,
    *,
    pushed: str,
    manifests: Sequence[str],
    log: Path,
    run_id: str,
) -> Prepared:
    """Sign the provenance of an index of several platforms pushed as PUSHED (repo@index
    digest), to be attached (after its records) beside the index and beside each platform's
    manifest (MANIFESTS, digests in that repository): one statement whose subjects are all
    of them."""
    predicate = provenance_predicate(loaded, facts, log=log, run_id=run_id)
    reference = parse_reference(pushed)
    if reference.digest is None:
        raise ValueError(f"{pushed} names no index digest")  # the caller pushed by digest
    subjects = [reference.digest, *(Digest(m) for m in manifests)]
    repo = Reference(reference.registry, reference.repository)
    return prepare_subjects(signer, repo, subjects, SLSA_PROVENANCE_V1, predicate)
