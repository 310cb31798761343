"""An image in a registry (go-containerregistry's ``remote``): the registry's Image.

:class:`RegistryImage` is one platform's image, resolved once through the registry client
(an index is resolved to the platform asked for, or the client's own choice), whose layers
are each streamed on their own (random access), each a :class:`~imagekit.image.layer.LayerStream`
over the registry's blob (its digest checked as it streams).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from imagekit.image.layer import LayerStream, scan_blob
from imagekit.image.members import LayerScan
from imagekit.layers.media import LayerLimits
from imagekit.refs import Digest, Platform, parse_reference
from imagekit.registry import Descriptor, RegistryClient, ResolvedImage
from imagekit.registry.manifest import ImageConfig, ImageManifest


@dataclass(frozen=True)
class RegistryImage:
    """An image in a registry, resolved once; any layer can be streamed on its own."""

    client: RegistryClient
    resolved: ResolvedImage
    label: str
    random_access: bool = True
    limits: LayerLimits = field(default_factory=LayerLimits)

    @classmethod
    def open(
        cls, client: RegistryClient, reference: str, platform: Platform | None = None
    ) -> RegistryImage:
        ref = parse_reference(reference)
        return cls(client, client.resolve(ref, platform), reference)

    @property
    def name(self) -> str:
        return self.resolved.reference.name

    def digest(self) -> Digest:
        return self.resolved.manifest_digest

    def manifest(self) -> ImageManifest:
        return self.resolved.manifest

    def config(self) -> ImageConfig:
        return self.resolved.config

    def layers(self) -> Sequence[Descriptor]:
        return self.resolved.layers

    def diff_ids(self) -> Sequence[Digest]:
        return list(self.resolved.diff_ids)

    def layer(
        self,
        index: int,
        *,
        limits: LayerLimits | None = None,
        on_bytes: Callable[[int], None] | None = None,
    ) -> LayerStream:
        ref, desc = self.resolved.reference, self.resolved.layers[index]
        return LayerStream(
            lambda: self.client.stream_blob(ref, desc),
            desc,
            self.resolved.diff_ids[index],
            registry=ref.registry,
            repository=ref.repository,
            limits=limits,
            on_bytes=on_bytes,
        )

    def scan(self, indices: Sequence[int]) -> dict[int, LayerScan]:
        ref = self.resolved.reference
        return {
            index: scan_blob(
                self.client.stream_blob(ref, self.resolved.layers[index]),
                self.resolved.layers[index],
                self.resolved.diff_ids[index],
                where=f"layer {index} ({{digest}}) of {self.label}",
                limits=self.limits,
            )
            for index in indices
        }
