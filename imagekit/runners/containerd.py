"""containerd, as a Kubernetes node's CRI plugin uses it, as a place that pulls: the image
pulled into the kubelet's namespace and unpacked for its snapshotter (``ctr``), then read
back from the content store blob by blob for the platform containerd unpacked. Its image
ID is the CRI's: the config digest for that platform."""

from __future__ import annotations

from dataclasses import dataclass

from imagekit import progress
from imagekit.errors import ContainerdError
from imagekit.registry import is_loopback
from imagekit.runtime import containerd as ctrd


@dataclass(frozen=True)
class ContainerdPulled:
    """What ``ctr images pull`` said, and the image as the content store holds it."""

    output: ctrd.PullOutput
    image: ctrd.StoreImage

    @property
    def image_id(self) -> str:
        return str(self.image.config_digest)


class ContainerdPuller:
    """Pulls through one containerd (its namespace and snapshotter: ``store``)."""

    def __init__(self, store: ctrd.Containerd) -> None:
        self.store = store

    def pull(self, reference: str, *, registry: str | None = None) -> ContainerdPulled:
        """Pull and unpack REFERENCE (plain HTTP only to a loopback registry), then read the
        image back; containerd that lists no record, or no platform, is ContainerdError."""
        store = self.store
        with progress.current().waiting(f"pulling {reference} into containerd"):
            pulled = store.pull(
                reference, plain_http=registry is not None and is_loopback(registry)
            )
        record = store.image(reference)
        if record is None:
            raise ContainerdError(
                f"containerd pulled {reference} but lists no image record of that name"
            )
        if pulled.platform is None:
            raise ContainerdError(
                f"`ctr images pull {reference}` did not say which platform it unpacked",
                hint="see its output in the evidence; imagekit reads containerd 1.6's",
            )
        return ContainerdPulled(pulled, store.read_image(record, pulled.platform))
