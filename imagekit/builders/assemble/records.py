"""The registry build's last step: its provenance signed, its ``build`` and ``push`` records
appended, in the one order every builder ends in (imagekit.builders.record).

Apart from the flow (builder.py) because it is what the build says about itself once the
image is pushed and tagged, not how the image is made.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from imagekit.attest.attach import Prepared
from imagekit.attest.signer import Signer
from imagekit.builders.assemble.result import AssembleResult
from imagekit.builders.assemble.run import Run, make_guard_report
from imagekit.builders.record import (
    assertion_details,
    base_image_details,
    record_build,
    record_pushed,
    sign_then_record,
)
from imagekit.evidence import write_json
from imagekit.ledger import BuildDetails, PushDetails
from imagekit.ledger.record import CopyDetails, OverlayLayerDetails
from imagekit.plans.steps import Overlay
from imagekit.provenance import BuilderFacts, prepare_build
from imagekit.registry import ResolvedImage


def record_result(run: Run, image: ResolvedImage, result: AssembleResult) -> AssembleResult:
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


def _attest(run: Run, signer: Signer, result: AssembleResult) -> Prepared:
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


def _append_records(run: Run, image: ResolvedImage, result: AssembleResult) -> tuple[int, int]:
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
            guard=make_guard_report(result.guard, result.layers),
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
