"""What a final pull found, and what it decides: each check of a digest, and the verdict
every final pull says whatever pulled it (the engine's ``PullResult``, containerd's
``ContainerdPullResult``): verified only when every check said yes, with the sentence of
what was proved. imagekit.pull does the pulls and records them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagekit.errors import ReferenceFormatError
from imagekit.ledger import ContainerdStore, LedgerRecord, PullCheck
from imagekit.refs import Digest, Reference, parse_reference
from imagekit.registry import ResolvedImage
from imagekit.runtime import containerd as ctrd
from imagekit.runtime.cri import FinalPullStatus, chain_id

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


class FinalPullVerdict(ABC):
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
class PullResult(FinalPullVerdict):
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


@dataclass(frozen=True)
class ContainerdPullResult(FinalPullVerdict):
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


def containerd_checks(
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
