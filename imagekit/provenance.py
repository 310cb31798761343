"""Build provenance: SLSA v1 (https://slsa.dev/spec/v1.0/provenance) for an image imagekit
built and pushed, signed and stored beside it (imagekit/attest).

What it states: the plan (name, sha256 of its exact bytes, its steps as written: overlays
with their guard hashes, pinned packages), the base by digest, each overlay source file's
sha256, the rendered Dockerfile's and every rendered file's sha256, the builder used, and
the build log's sha256 as a byproduct. The policy's ``provenance: {plan, base}`` reads
``externalParameters.plan.name`` and the base among ``resolvedDependencies``.

Written for the engine builder (`imagekit build --push --sign-key`); the registry builder
(imagekit.build.assemble) does not attest yet.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imagekit.attest.attach import AttestOutcome, attest_reference
from imagekit.attest.predicates import SLSA_PROVENANCE_V1
from imagekit.attest.signer import Signer
from imagekit.plans.plan import LoadedPlan
from imagekit.plans.render import Rendered
from imagekit.refs import Digest, parse_reference
from imagekit.version import __version__

BUILD_TYPE = "https://imagekit.dev/buildtypes/plan/v1"


def provenance_predicate(
    loaded: LoadedPlan, rendered: Rendered, *, builder: str, image_id: str, log: Path, run_id: str
) -> dict[str, Any]:
    base = loaded.base
    dependencies: list[dict[str, Any]] = []
    if base.digest is not None:
        dependencies.append(
            {"uri": f"docker://{base.name}", "digest": {base.digest.algorithm: base.digest.hex}}
        )
    for source, path in rendered.sources:
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
            "internalParameters": {
                "rendered": {n: Digest.of_bytes(d).hex for n, d in rendered.files().items()},
                "dockerfile_sha256": rendered.digest.hex,
                "image_id": image_id,
            },
            "resolvedDependencies": dependencies,
        },
        "runDetails": {
            "builder": {
                "id": "https://imagekit.dev/builders/engine",
                "version": {"imagekit": __version__, "builder": builder},
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


def attest_build(
    signer: Signer,
    loaded: LoadedPlan,
    rendered: Rendered,
    *,
    pushed: str,
    builder: str,
    image_id: str,
    log: Path,
    run_id: str,
) -> AttestOutcome:
    """Sign the provenance of the image pushed as PUSHED (repo@digest) and store it there."""
    predicate = provenance_predicate(
        loaded, rendered, builder=builder, image_id=image_id, log=log, run_id=run_id
    )
    return attest_reference(signer, parse_reference(pushed), SLSA_PROVENANCE_V1, predicate)
