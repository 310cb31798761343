"""The final pull: pull an image through the local engine by digest and prove what it holds.

"Pushed" and "copied" say what a registry holds; the question that matters is which image the
target engine actually has. So this stage pulls through the engine (the target's own
credentials, its own store), reads the engine's image ID and RepoDigests, and checks them
against the expected manifest digest and the config digest read from the registry.

Which digest an image ID is depends on the engine's image store: the classic store reports the
config digest, the containerd image store reports the digest the image was pulled by (the
manifest, or the index for a multi-platform image). The store is read from the engine and
recorded, and the matching digest is compared; it is never guessed.

A tag is refused unless the digest it must resolve to is given (``expect_digest``): a tag
checked against nothing would prove nothing. Between resolving a tag at the registry and the
engine pulling it the tag could move; the RepoDigests check catches that as a mismatch.

Kubernetes nodes pull through containerd's CRI plugin, not through the engine, so
``final_pull_containerd`` does the same final pull there (``imagekit pull --runtime
containerd``): it pulls into the kubelet's namespace, unpacks for the snapshotter, reads back
the image record, its platform manifest and config from containerd's content store, the
chain ID of the unpacked snapshot, and the CRI plugin's own record of the image ID, then
checks each against the pinned digest and the registry (imagekit.runtime.cri has the CRI's naming
rules).
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypedDict, TypeVar, overload

from imagekit.attest.attach import Prepared
from imagekit.attest.seal import sign_record_attach
from imagekit.attest.signer import KeyFileSigner, Signer
from imagekit.errors import ReferenceFormatError, UsageError
from imagekit.evidence import new_run_dir, write_bytes, write_json
from imagekit.ledger import (
    ContainerdStore,
    FinalPullDetails,
    append_record,
)
from imagekit.pull_attestation import prepare_final_pull
from imagekit.pull_verdict import (
    ENGINE_IMAGE_ID_MEANS,
    ContainerdPullResult,
    PullResult,
    compare,
    containerd_checks,
)
from imagekit.refs import Digest, Platform, Reference, is_digest, parse_reference
from imagekit.registry import RegistryClient, ResolvedImage
from imagekit.runners.containerd import ContainerdPuller
from imagekit.runners.engine import EngineRunner
from imagekit.runtime import containerd as ctrd
from imagekit.runtime.cri import chain_id, kubelet_image_ref, sort_references
from imagekit.runtime.engine import Engine, connect
from imagekit.workspace import Workspace

__all__ = [
    "ContainerdPullResult",
    "PullResult",
    "compare",
    "final_pull",
    "final_pull_containerd",
    "pulled_platform",
]


def _target(reference: str, expect_digest: str | None) -> tuple[Reference, Digest]:
    ref = parse_reference(reference)
    expected = Digest(expect_digest) if expect_digest is not None else None
    if ref.digest is None and expected is None:
        raise UsageError(
            f"{reference} is not pinned by digest; a final pull must say which content it expects",
            hint="pull REPO@sha256:..., or pass --expect-digest with the digest the tag must have",
        )
    if ref.digest is not None and expected is not None and ref.digest != expected:
        raise ReferenceFormatError(
            f"{reference} names {ref.digest} but --expect-digest says {expected}",
            hint="give one digest",
        )
    if ref.digest is not None:
        return ref, ref.digest
    assert expected is not None  # noqa: S101 - both None was refused above
    return ref, expected


def _resolve(
    registry: RegistryClient | None, ref: Reference, platform: Platform | None = None
) -> ResolvedImage:
    """What the registry serves for ``ref``: through the caller's client, or a client of our
    own that is closed afterwards."""
    if registry is not None:
        return registry.resolve(ref, platform=platform)
    with RegistryClient() as client:
        return client.resolve(ref, platform=platform)


def pulled_platform(os: str | None, architecture: str | None) -> Platform | None:
    """The platform of the image the engine pulled, so the registry is asked for that entry
    of an index: the engine picks its own platform (linux/arm64 on an arm64 host), and the
    registry client's default, linux/amd64, would compare the pull with another image.

    Without a variant: an arm64 entry may or may not say v8, and os and architecture are
    enough to find the entry the engine chose, except on 32-bit arm with entries for v6 and
    v7, where the first arm entry is taken (a mismatch then fails closed, never passes).
    """
    if not os or not architecture:
        return None
    return Platform(str(os), str(architecture))


_Result = TypeVar("_Result", "PullResult", "ContainerdPullResult")


def _run_dir(workspace: Workspace, ref: Reference, expected: Digest) -> Path:
    return new_run_dir(workspace.evidence_dir, "pull", f"{ref.name}@{expected}")


def _recorded(
    workspace: Workspace,
    plan: str | None,
    result: _Result,
    run_dir: Path,
    document: dict[str, Any],
    details: FinalPullDetails,
    signer: Signer | None = None,
    platform: Platform | None = None,
) -> _Result:
    """The result with its evidence (``document``, as pull.json in ``run_dir``) and its
    final-pull record: status and scope sentence from the result, never edited.

    Refused by the ledger, the refusal carries the result with its evidence: the pull and
    its checks stand, only the record is missing, and nothing is attached. With SIGNER the
    record names the envelope that is to be attached after it; a registry that then refuses
    it is exit 3 (NotAttested) with the pull and its record kept.
    """
    evidence = run_dir / "pull.json"
    write_json(evidence, document)

    def sign(result: _Result) -> tuple[Prepared, ...]:
        if signer is None:  # signed before the record, so that the record names it
            return ()
        return (
            prepare_final_pull(
                signer, result.reference, result.expected_digest, document, platform=platform
            ),
        )

    def record(result: _Result, prepared: Sequence[Prepared]) -> _Result:
        saved = append_record(
            workspace,
            "final-pull",
            plan=plan,
            images={"image": f"{result.reference.name}@{result.expected_digest}"},
            status=result.status,
            scope=result.scope,
            evidence=evidence,
            details=details.model_copy(update={"attestation": prepared[0].ledger_value})
            if prepared
            else details,
        )
        return replace(result, evidence=evidence, record=saved)

    return sign_record_attach(
        result,
        sign=sign,
        record=record,
        keeping=lambda pulled: replace(pulled, evidence=evidence),
        must_store=lambda pulled: pulled.ok,  # a refused push: exit 3, the pull and record kept
    )


def _signer(sign_key: Path | None, record: bool) -> Signer | None:
    if sign_key is None:
        return None
    if not record:
        raise UsageError(
            "--sign-key attests the pull beside its record; give --record too",
            hint="imagekit pull REF --record --sign-key FILE",
        )
    return KeyFileSigner.from_file(sign_key)


def final_pull(
    workspace: Workspace,
    reference: str,
    *,
    expect_digest: str | None = None,
    record: bool = False,
    plan: str | None = None,
    where: str | None = None,
    engine: Engine | None = None,
    registry: RegistryClient | None = None,
    sign_key: Path | None = None,
) -> PullResult:
    """Pull through the engine, check image ID and RepoDigests, optionally record the result.

    A mismatch is a result (``ok`` False, a ``mismatch`` record when recording), not an
    exception: the record of a failed final pull is exactly what the ledger must keep.
    """
    ref, expected = _target(reference, expect_digest)
    signer = _signer(sign_key, record)
    engine = engine or connect()
    image = EngineRunner.of(engine).pull(str(ref), registry=ref.registry)
    resolved = _resolve(registry, ref, pulled_platform(image.os, image.architecture))
    image_id = image.image_id
    repo_digests = image.repo_digests
    checks = compare(
        image_store=engine.image_store,
        ref=ref,
        expected=expected,
        pulled_by=resolved.index_digest or resolved.manifest_digest,
        config_digest=resolved.config_digest,
        image_id=image_id,
        repo_digests=repo_digests,
    )
    result = PullResult(
        reference=ref,
        expected_digest=expected,
        manifest_digest=resolved.manifest_digest,
        config_digest=resolved.config_digest,
        index_digest=resolved.index_digest,
        image_id=image_id,
        repo_digests=repo_digests,
        image_store=engine.image_store,
        engine_version=engine.server_version,
        where=where or socket.gethostname(),
        checks=checks,
    )
    if not record:
        return result
    return _recorded(
        workspace,
        plan,
        result,
        _run_dir(workspace, ref, expected),
        {
            **result.to_json(),
            "resolved": {
                k: v
                for k, v in resolved.to_json().items()
                if k in ("index_digest", "platform", "manifest_digest", "config_digest")
            },
            "engine": {
                "version": engine.server_version,
                "storage_driver": engine.storage_driver,
                "image_store": engine.image_store,
            },
            "image": {
                "architecture": image.architecture,
                "os": image.os,
                "repo_tags": list(image.repo_tags),
            },
        },
        FinalPullDetails(
            source="engine",
            image_id=image_id,
            repo_digests=list(repo_digests),
            engine_version=engine.server_version,
            image_store=engine.image_store,
            image_id_means=ENGINE_IMAGE_ID_MEANS.get(engine.image_store, "unknown store"),
            expected_manifest_digest=str(expected),
            expected_config_digest=str(resolved.config_digest),
            platform_manifest_digest=str(resolved.manifest_digest),
            where=result.where,
            checks=[c.record() for c in checks],
        ),
        signer,
        resolved.platform,
    )


def _cri_image(
    store: ctrd.Containerd, image: ctrd.StoreImage
) -> tuple[ctrd.ImageRecord | None, tuple[str, ...]]:
    """The CRI plugin's record of the image ID, and every name of the same CRI image.

    The plugin adds ``sha256:<config>`` from an event shortly after the pull; it is waited
    for, bounded. The names are every record whose config on this platform is this image's
    (the CRI plugin merges them into one image), found by reading their manifests.
    """
    same = {image.record.target, image.manifest_digest}
    cri_record = store.wait_for_record(str(image.config_digest), tuple(same))
    names = []
    for rec in store.images():
        if is_digest(rec.name):
            if rec.name == str(image.config_digest):
                names.append(rec.name)
            continue
        if rec.target in same or store.config_of(rec, image.platform) == image.config_digest:
            names.append(rec.name)
    return cri_record, sort_references(names)


def final_pull_containerd(
    workspace: Workspace,
    reference: str,
    *,
    expect_digest: str | None = None,
    record: bool = False,
    plan: str | None = None,
    where: str | None = None,
    address: str | None = None,
    namespace: str = ctrd.K8S_NAMESPACE,
    snapshotter: str = ctrd.DEFAULT_SNAPSHOTTER,
    containerd: ctrd.Containerd | None = None,
    registry: RegistryClient | None = None,
    sign_key: Path | None = None,
) -> ContainerdPullResult:
    """Pull through containerd as a node does, read back what the CRI plugin will report.

    As with the engine, a mismatch is a result (and a ``mismatch`` record), not an exception;
    a containerd that does not answer raises ContainerdUnavailable (exit 3).
    """
    ref, expected = _target(reference, expect_digest)
    signer = _signer(sign_key, record)
    store = containerd or ctrd.connect(address, namespace=namespace, snapshotter=snapshotter)
    held = ContainerdPuller(store).pull(str(ref), registry=ref.registry)
    pulled, image = held.output, held.image
    resolved = _resolve(registry, ref, image.platform)
    computed_chain = chain_id(resolved.diff_ids)
    snapshot = store.snapshot(str(computed_chain))
    label = store.snapshot_label(image.config_digest)
    cri_record, names = _cri_image(store, image)
    checks = containerd_checks(
        expected,
        resolved,
        image,
        pulled,
        computed_chain,
        snapshot,
        label,
        cri_record,
        store.snapshotter,
    )
    result = ContainerdPullResult(
        reference=ref,
        expected_digest=expected,
        resolved=resolved,
        store=image,
        pull=pulled,
        containerd=ContainerdStore(
            version=store.version,
            address=store.address,
            namespace=store.namespace,
            snapshotter=store.snapshotter,
        ),
        chain_id=computed_chain,
        snapshot=snapshot,
        snapshot_label=label,
        cri_record=cri_record,
        cri_references=names,
        kubelet_image_ref=kubelet_image_ref(names, image.config_digest),
        where=where or socket.gethostname(),
        checks=checks,
    )
    if not record:
        return result
    run_dir = _run_dir(workspace, ref, expected)
    write_bytes(run_dir / "ctr-pull.log", pulled.log.encode())
    document = result.to_json()
    keys = (
        "name",
        "image_id",
        "image_id_means",
        "target_digest",
        "target_media_type",
        "platform",
        "platform_manifest_digest",
        "config_digest",
        "chain_id",
        "cri_references",
        "kubelet_image_ref",
        "where",
        "checks",
    )
    return _recorded(
        workspace,
        plan,
        result,
        run_dir,
        document,
        FinalPullDetails(
            source="containerd",
            image_store="containerd-cri",
            repository=ref.name,
            repo_digests=list(result.repo_digests),
            engine_version=f"containerd {store.version}",
            containerd=result.containerd,
            expected_manifest_digest=str(expected),
            expected_config_digest=str(resolved.config_digest),
            **{key: document[key] for key in keys},
        ),
        signer,
        resolved.platform,
    )


@dataclass(frozen=True)
class _Asked:
    """What a final pull is asked, wherever it pulls: the image, pinned (or a tag with the
    digest it must resolve to), and whether it is recorded (under which plan and target) and
    signed."""

    reference: str
    expect_digest: str | None = None
    record: bool = False
    plan: str | None = None
    where: str | None = None
    sign_key: Path | None = None


@dataclass(frozen=True)
class PullRequest(_Asked):
    """One final pull through the engine."""


@dataclass(frozen=True)
class ContainerdPullRequest(_Asked):
    """The same final pull through containerd, as a Kubernetes node pulls: its socket
    (``address``), namespace (the kubelet's by default) and snapshotter."""

    address: str | None = None
    namespace: str = ctrd.K8S_NAMESPACE
    snapshotter: str = ctrd.DEFAULT_SNAPSHOTTER


@overload
def run(workspace: Workspace, request: ContainerdPullRequest) -> ContainerdPullResult: ...
@overload
def run(workspace: Workspace, request: PullRequest) -> PullResult: ...
def run(
    workspace: Workspace, request: PullRequest | ContainerdPullRequest
) -> PullResult | ContainerdPullResult:
    """The final pull, run as every stage is: through containerd for a ContainerdPullRequest,
    else through the engine; a mismatch is a result, never an exception."""
    asked = _Said(
        expect_digest=request.expect_digest,
        record=request.record,
        plan=request.plan,
        where=request.where,
        sign_key=request.sign_key,
    )
    if isinstance(request, ContainerdPullRequest):
        return final_pull_containerd(
            workspace,
            request.reference,
            address=request.address,
            namespace=request.namespace,
            snapshotter=request.snapshotter,
            **asked,
        )
    return final_pull(workspace, request.reference, **asked)


class _Said(TypedDict):
    """What either way of pulling is told, beside the reference."""

    expect_digest: str | None
    record: bool
    plan: str | None
    where: str | None
    sign_key: Path | None
