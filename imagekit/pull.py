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
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict, TypeVar, overload

from imagekit import progress
from imagekit.attest.attach import Prepared
from imagekit.attest.seal import sign_record_attach
from imagekit.attest.signer import KeyFileSigner, Signer
from imagekit.errors import ContainerdError, ReferenceFormatError, UsageError
from imagekit.evidence import new_run_dir, write_bytes, write_json
from imagekit.ledger import (
    ContainerdStore,
    FinalPullDetails,
    LedgerRecord,
    PullCheck,
    append_record,
)
from imagekit.pull_attestation import prepare_final_pull
from imagekit.refs import Digest, Platform, Reference, is_digest, parse_reference
from imagekit.registry import RegistryClient, ResolvedImage, is_loopback
from imagekit.runtime import containerd as ctrd
from imagekit.runtime.cri import FinalPullStatus, chain_id, kubelet_image_ref, sort_references
from imagekit.runtime.engine import Engine, connect, engine_errors
from imagekit.workspace import Workspace

ENGINE_IMAGE_ID_MEANS = {
    "classic": "the config digest: the classic store names an image by its config",
    "containerd": "the digest it was pulled by: the engine's containerd store names it so",
}


@dataclass(frozen=True)
class DigestCheck:
    name: str
    ok: bool
    expected: str | None
    actual: str | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "expected": self.expected, "actual": self.actual}

    def record(self) -> PullCheck:
        """The check as the final-pull record keeps it."""
        return PullCheck(name=self.name, ok=self.ok, expected=self.expected, actual=self.actual)


class _Verdict(ABC):
    """What every final pull says, whatever pulled it: verified only when every check said
    yes, the scope sentence, and the JSON around what the runtime adds."""

    reference: Reference
    expected_digest: Digest
    where: str
    checks: tuple[DigestCheck, ...]
    evidence: Path | None
    record: LedgerRecord | None

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def exit_code(self) -> int:
        """0 when the store holds the accepted image, 1 when a check said no."""
        return 0 if self.ok else 1

    @property
    def ledger_seqs(self) -> tuple[int, ...]:
        return (self.record.seq,) if self.record else ()

    @property
    def status(self) -> FinalPullStatus:
        return FinalPullStatus.VERIFIED if self.ok else FinalPullStatus.MISMATCH

    @property
    @abstractmethod
    def scope(self) -> str:
        """One sentence: what the pull proved, or which checks failed (see ``_scope``)."""

    def _scope(self, puller: str, holds: str) -> str:
        """``puller`` pulled the image and ``holds`` what was proved, or which checks failed."""
        if self.ok:
            return (
                f"{puller} pulled {self.reference.name}@{self.expected_digest} and holds "
                f"{holds}, not that the image runs or serves"
            )
        failed = ", ".join(c.name for c in self.checks if not c.ok)
        return (
            f"{puller} pulled {self.reference} but {failed} did not match the expected "
            "digests: it does not hold the image that was accepted"
        )

    def _document(self, details: dict[str, Any]) -> dict[str, Any]:
        """The JSON of a final pull, with the ``details`` of its runtime in the middle."""
        return {
            "reference": str(self.reference),
            "status": self.status,
            "ok": self.ok,
            "scope": self.scope,
            "expected_digest": str(self.expected_digest),
            **details,
            "where": self.where,
            "checks": [c.to_json() for c in self.checks],
            "evidence": str(self.evidence) if self.evidence else None,
            "record_seq": self.record.seq if self.record else None,
        }


@dataclass(frozen=True)
class PullResult(_Verdict):
    reference: Reference
    expected_digest: Digest
    manifest_digest: Digest
    config_digest: Digest
    index_digest: Digest | None
    image_id: str
    repo_digests: tuple[str, ...]
    image_store: str
    engine_version: str
    where: str
    checks: tuple[DigestCheck, ...]
    evidence: Path | None = None
    record: LedgerRecord | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def scope(self) -> str:
        store = f"Docker {self.engine_version}, {self.image_store} image store"
        return self._scope(
            f"the engine on {self.where} ({store})",
            f"image ID {self.image_id}, matching the registry's manifest and config digests; "
            "this proves what that engine holds",
        )

    def to_json(self) -> dict[str, Any]:
        return self._document(
            {
                "index_digest": str(self.index_digest) if self.index_digest else None,
                "manifest_digest": str(self.manifest_digest),
                "config_digest": str(self.config_digest),
                "image_id": self.image_id,
                "repo_digests": list(self.repo_digests),
                "image_store": self.image_store,
                "engine_version": self.engine_version,
            }
        )


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


def _repo_digest_matches(repo_digests: tuple[str, ...], ref: Reference, digest: Digest) -> bool:
    for text in repo_digests:
        try:
            parsed = parse_reference(text)
        except ReferenceFormatError:
            continue
        if parsed.name == ref.name and parsed.digest == digest:
            return True
    return False


def compare(
    *,
    image_store: str,
    ref: Reference,
    expected: Digest,
    pulled_by: Digest,
    config_digest: Digest,
    image_id: str,
    repo_digests: tuple[str, ...],
) -> tuple[DigestCheck, ...]:
    """The three checks of a final pull; which digest the image ID must be depends on the store."""
    checks = [
        DigestCheck("registry digest", pulled_by == expected, str(expected), str(pulled_by)),
        DigestCheck(
            "engine RepoDigests",
            _repo_digest_matches(repo_digests, ref, expected),
            f"{ref.name}@{expected}",
            ", ".join(repo_digests) or None,
        ),
    ]
    if image_store == "containerd":
        # The containerd store names an image by the digest it was pulled by.
        checks.append(
            DigestCheck(
                "image ID (containerd store)", image_id == expected, str(expected), image_id
            )
        )
    elif image_store == "classic":
        # The classic store names an image by its config digest:
        # https://github.com/opencontainers/image-spec/blob/main/config.md#imageid
        checks.append(
            DigestCheck(
                "image ID (classic store)", image_id == config_digest, str(config_digest), image_id
            )
        )
    else:
        checks.append(DigestCheck(f"image ID ({image_store} store)", False, None, image_id))
    return tuple(checks)


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
    pull_name = str(ref)
    with (
        engine_errors(f"pulling {pull_name}", registry=ref.registry),
        progress.current().waiting(f"pulling {pull_name} into the engine"),
    ):
        engine.client.image.pull(pull_name, quiet=True)
    with engine_errors(f"inspecting {pull_name}"):
        image = engine.client.image.inspect(pull_name)
    resolved = _resolve(registry, ref, pulled_platform(image.os, image.architecture))
    image_id = str(image.id)
    repo_digests = tuple(str(d) for d in (image.repo_digests or ()))
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
                "repo_tags": list(image.repo_tags or ()),
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


@dataclass(frozen=True)
class ContainerdPullResult(_Verdict):
    """A final pull through containerd, as the node's CRI plugin will name the image.

    ``image_id`` is the CRI image ID (the config digest for the node's platform);
    ``kubelet_image_ref`` the ``status.imageID`` a container of it would show.
    """

    reference: Reference
    expected_digest: Digest
    resolved: ResolvedImage
    store: ctrd.StoreImage
    pull: ctrd.PullOutput
    containerd: ContainerdStore
    chain_id: Digest
    snapshot: ctrd.SnapshotInfo | None
    snapshot_label: str | None
    cri_record: ctrd.ImageRecord | None
    cri_references: tuple[str, ...]
    kubelet_image_ref: str
    where: str
    checks: tuple[DigestCheck, ...]
    evidence: Path | None = None
    record: LedgerRecord | None = None

    @property
    def image_id(self) -> Digest:
        return self.store.config_digest

    @property
    def image_id_means(self) -> str:
        return (
            "the config digest: the CRI image ID (crictl images --digests); the kubelet's "
            f"status.imageID is the image's first name with a digest, {self.kubelet_image_ref}"
        )

    @property
    def repo_digests(self) -> tuple[str, ...]:
        return tuple(r for r in self.cri_references if "@" in r)

    @property
    def scope(self) -> str:
        node = self.containerd
        store = (
            f"containerd {node.version} on {self.where} (namespace "
            f"{node.namespace}, snapshotter {node.snapshotter}, CRI plugin on)"
        )
        return self._scope(
            store,
            f"it as CRI image ID {self.image_id} ({self.store.platform}, its layers unpacked as "
            f"chain ID {self.chain_id}), matching the registry's digests; a kubelet there "
            f"reports imageID {self.kubelet_image_ref}; this proves what that containerd holds",
        )

    def to_json(self) -> dict[str, Any]:
        store = self.store
        details = {
            "name": store.record.name,
            "target_digest": str(store.record.target),
            "target_media_type": store.record.media_type,
            "platform": str(store.platform),
            "platform_manifest_digest": str(store.manifest_digest),
            "config_digest": str(store.config_digest),
            "image_id": str(self.image_id),
            "image_id_means": self.image_id_means,
            "chain_id": str(self.chain_id),
            "chain_id_reported": str(self.pull.chain_id) if self.pull.chain_id else None,
            "cri_references": list(self.cri_references),
            "kubelet_image_ref": self.kubelet_image_ref,
            "registry": {
                "index_digest": str(self.resolved.index_digest)
                if self.resolved.index_digest
                else None,
                "manifest_digest": str(self.resolved.manifest_digest),
                "config_digest": str(self.resolved.config_digest),
                "diff_ids": [str(d) for d in self.resolved.diff_ids],
            },
            "containerd": self.containerd.to_json(),
        }
        return {"runtime": "containerd", **self._document(details)}


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


def _containerd_checks(
    expected: Digest,
    resolved: ResolvedImage,
    image: ctrd.StoreImage,
    pull: ctrd.PullOutput,
    computed_chain: Digest,
    snapshot: ctrd.SnapshotInfo | None,
    label: str | None,
    cri_record: ctrd.ImageRecord | None,
    snapshotter: str,
) -> tuple[DigestCheck, ...]:
    bad = ", ".join(image.bad_blobs)
    registry_top = resolved.index_digest or resolved.manifest_digest
    own_chain = chain_id(image.diff_ids) if image.diff_ids else None
    snap = f"{snapshot.Kind} {snapshot.Name}" if snapshot else "no such snapshot"
    return (
        DigestCheck("registry digest", registry_top == expected, str(expected), str(registry_top)),
        DigestCheck(
            "containerd image target",
            image.record.target == expected,
            str(expected),
            f"{image.record.name} -> {image.record.target}",
        ),
        DigestCheck(
            "content store bytes",
            not image.bad_blobs,
            "each blob hashes to its digest",
            f"differ: {bad}" if bad else "each blob hashes to its digest",
        ),
        DigestCheck(
            f"platform manifest ({image.platform})",
            image.manifest_digest == resolved.manifest_digest,
            str(resolved.manifest_digest),
            str(image.manifest_digest),
        ),
        DigestCheck(
            "config digest (CRI image ID)",
            image.config_digest == resolved.config_digest,
            str(resolved.config_digest),
            str(image.config_digest),
        ),
        DigestCheck(
            "CRI plugin's image ID record",
            cri_record is not None,
            f"{image.config_digest} -> {image.record.target} or {image.manifest_digest}",
            f"{cri_record.name} -> {cri_record.target}" if cri_record else None,
        ),
        DigestCheck(
            "unpacked chain ID",
            pull.chain_id == computed_chain and own_chain == computed_chain,
            str(computed_chain),
            str(pull.chain_id) if pull.chain_id else None,
        ),
        DigestCheck(
            f"snapshot ({snapshotter})",
            snapshot is not None and snapshot.Kind == "Committed" and label == computed_chain,
            f"Committed {computed_chain}, labelled on the config",
            f"{snap}, config label {label}",
        ),
    )


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
    name = str(ref)
    with progress.current().waiting(f"pulling {name} into containerd"):
        pulled = store.pull(name, plain_http=is_loopback(ref.registry))
    image_record = store.image(name)
    if image_record is None:
        raise ContainerdError(f"containerd pulled {name} but lists no image record of that name")
    if pulled.platform is None:
        raise ContainerdError(
            f"`ctr images pull {name}` did not say which platform it unpacked",
            hint="see its output in the evidence; imagekit reads containerd 1.6's",
        )
    image = store.read_image(image_record, pulled.platform)
    resolved = _resolve(registry, ref, pulled.platform)
    computed_chain = chain_id(resolved.diff_ids)
    snapshot = store.snapshot(str(computed_chain))
    label = store.snapshot_label(image.config_digest)
    cri_record, names = _cri_image(store, image)
    checks = _containerd_checks(
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
