"""`imagekit inspect`: what an image reference resolves to, as an image lock entry records it.

One call to the registry client: the reference is resolved (an index narrowed to one
platform), the manifest and config are fetched and verified against their digests, and the
result carries the fields of an entry of the public MiniMax-M3 image lock (source_tag,
index_digest, platform, manifest_digest, config_digest, compressed_layer_bytes,
layer_digests) plus media types and the config's diff_ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from imagekit.refs import parse_platform, parse_reference
from imagekit.registry import RegistryClient, ResolvedImage


def inspect_image(
    reference: str,
    *,
    platform: str | None = None,
    insecure: Sequence[str] = (),
    docker_config: Path | None = None,
    client: RegistryClient | None = None,
) -> ResolvedImage:
    """Resolve ``reference`` (a tag or a digest) to one platform image, verified.

    A malformed reference or platform raises ReferenceFormatError before any network call.
    """
    ref = parse_reference(reference)
    wanted = parse_platform(platform) if platform else None
    if client is not None:
        return client.resolve(ref, wanted)
    with RegistryClient(insecure=insecure, docker_config=docker_config) as own:
        return own.resolve(ref, wanted)
