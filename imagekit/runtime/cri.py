"""What a Kubernetes node reports about an image in containerd: the CRI plugin's identities.

The kubelet never reads containerd's image records itself; it asks containerd's CRI plugin,
which names an image differently from Docker's classic store and from containerd's own
records (containerd 1.6, ``pkg/cri/store/image/image.go`` and
``pkg/cri/server/container_status.go``):

- the CRI image ID is the digest of the image config for the node's platform (what
  ``crictl images --digests`` shows as IMAGE ID);
- one CRI image gathers every containerd image record whose config, on that platform, is
  that config: the name it was pulled by (``repo@sha256:<index or manifest>``), tags, and the
  record ``sha256:<config>`` the plugin adds itself. A pull by index digest is named by the
  index, never by the platform manifest that was unpacked;
- a container's ``status.imageID`` (the CRI ImageRef) is the first name with a digest after
  sorting the names as distribution/reference's ``Sort`` does (name+tag+digest, name+tag,
  name+digest, name, digest; string order within each), or the bare image ID when no name
  has a digest.

So the same bytes pulled once by index and once by platform manifest are one CRI image, and
its imageID is whichever of the two names sorts first. ``judge_pod_image_id`` applies these
rules to a kubelet's imageID against what a containerd final pull recorded, and
``FinalPullStatus`` is the one vocabulary of every final pull's verdict (engine, containerd
or pod).

The unpacked layers sit in the snapshotter under the chain ID of the config's diffIDs:
https://github.com/opencontainers/image-spec/blob/main/config.md#layer-chainid
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from imagekit.errors import ReferenceFormatError
from imagekit.refs import Digest, is_digest, parse_reference


class FinalPullStatus(StrEnum):
    """A final pull's status: the store (or the kubelet) holds the accepted image, holds
    another, or could not be compared (never a pass)."""

    VERIFIED = "verified"
    MISMATCH = "mismatch"
    UNKNOWN = "unknown"


VERIFIED, MISMATCH, UNKNOWN = FinalPullStatus


def chain_id(diff_ids: Sequence[Digest]) -> Digest:
    """ChainID(L0) = DiffID(L0); ChainID(Ln) = sha256(ChainID(Ln-1) + " " + DiffID(Ln))."""
    if not diff_ids:
        raise ValueError("an image without layers has no chain ID")
    current = Digest(diff_ids[0])
    for diff_id in diff_ids[1:]:
        current = Digest("sha256:" + hashlib.sha256(f"{current} {diff_id}".encode()).hexdigest())
    return current


def _rank(name: str) -> int:
    """distribution/reference's refRank, plus 6 for a name that does not parse."""
    if is_digest(name):
        return 5
    try:
        ref = parse_reference(name)
    except ReferenceFormatError:
        return 6
    if ref.tag is not None:
        return 1 if ref.digest is not None else 2
    return 3 if ref.digest is not None else 4


def sort_references(names: Iterable[str]) -> tuple[str, ...]:
    """The order in which the CRI plugin keeps one image's names."""
    return tuple(sorted(set(names), key=lambda name: (_rank(name), name)))


def kubelet_image_ref(names: Iterable[str], image_id: Digest) -> str:
    """The ``status.imageID`` the kubelet shows for a container of this CRI image."""
    for name in sort_references(names):
        if _rank(name) in (1, 3):
            return name
    return str(image_id)


@dataclass(frozen=True)
class PulledImage:
    """A containerd final-pull record, as far as a pod's imageID is judged against it."""

    seq: int
    status: str  # the record's status, as read back
    where: str | None
    name: str  # the repository (registry/repo) it was pulled from
    target_digest: Digest
    target_media_type: str
    platform: str
    platform_manifest_digest: Digest
    config_digest: Digest
    references: tuple[str, ...]

    @classmethod
    def from_details(cls, seq: int, status: str, details: Mapping[str, Any]) -> PulledImage | None:
        """None for records that are not containerd final pulls (or lack what is compared)."""
        if details.get("source") != "containerd":
            return None
        texts = [details.get(key) for key in ("target_digest", "platform_manifest_digest")]
        config = details.get("image_id")
        if not all(isinstance(t, str) and is_digest(t) for t in [*texts, config]):
            return None
        refs = details.get("cri_references")
        names = tuple(r for r in refs if isinstance(r, str)) if isinstance(refs, list) else ()
        return cls(
            seq=seq,
            status=status,
            where=details.get("where") if isinstance(details.get("where"), str) else None,
            name=str(details.get("repository", "")),
            target_digest=Digest(str(texts[0])),
            target_media_type=str(details.get("target_media_type", "")),
            platform=str(details.get("platform", "")),
            platform_manifest_digest=Digest(str(texts[1])),
            config_digest=Digest(str(config)),
            references=names,
        )

    @property
    def by_index(self) -> bool:
        return self.target_digest != self.platform_manifest_digest


def judge_pod_image_id(
    form: str,
    repository: str | None,
    digest: Digest | None,
    raw: str,
    pulled: PulledImage,
) -> tuple[FinalPullStatus, str]:
    """A kubelet imageID against the containerd final pull of the same node: verdict, reason."""
    where = f"on {pulled.where}" if pulled.where else "on its node"
    pull = f"the containerd final pull {where} (seq {pulled.seq})"
    if pulled.status != VERIFIED:
        return UNKNOWN, f"{pull} is {pulled.status}, not verified: nothing to match the pod with"
    if form == "repo-digest" and digest is not None:
        named = f"{repository}@{digest}"
        other_name = ""
        if repository != pulled.name:
            other_name = (
                f"; the name is {repository}, the pull's was {pulled.name}: the CRI plugin "
                "reports the first in sort order of all names of one config"
            )
        if digest == pulled.target_digest or named in pulled.references:
            if pulled.by_index and digest == pulled.target_digest:
                what = (
                    f"the index {digest} that {pull} pulled by digest: containerd names an "
                    f"index pull by the index, not by its {pulled.platform} manifest "
                    f"{pulled.platform_manifest_digest}"
                )
            elif digest == pulled.target_digest:
                what = f"the manifest {digest} that {pull} pulled by digest"
            else:
                what = f"{named}, one of the names {pull} recorded for its CRI image"
            return VERIFIED, f"imageID names {what}{other_name}"
        if digest == pulled.platform_manifest_digest:
            return VERIFIED, (
                f"imageID names the {pulled.platform} manifest {digest} of the index "
                f"{pulled.target_digest} of {pull}: the same CRI image (config "
                f"{pulled.config_digest}), which the CRI plugin names by whichever name sorts "
                f"first{other_name}"
            )
        return MISMATCH, (
            f"imageID names {digest}, but {pull} holds {pulled.target_digest} "
            f"({pulled.platform} manifest {pulled.platform_manifest_digest}, CRI image ID "
            f"{pulled.config_digest})"
        )
    if form == "image-id" and digest is not None:
        if digest == pulled.config_digest:
            return VERIFIED, f"imageID is the CRI image ID (config digest) {digest} of {pull}"
        return MISMATCH, (
            f"imageID is the image ID {digest}, not the CRI image ID {pulled.config_digest} "
            f"of {pull}"
        )
    if not raw:
        return UNKNOWN, "imageID is empty: the container has not been created yet"
    return UNKNOWN, "imageID is in a form imagekit cannot compare"
